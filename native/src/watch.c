#define _GNU_SOURCE
#include "watch.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <unistd.h>
#include <uv.h>

#include "args.h"
#include "env.h"
#include "errors.h"
#include "faults.h"
#include "files.h"

// The watch: waking JavaScript when a lock it waits for is let go.
//
// watchUnlock(path, id, mode) → false when there is nothing to wait for (no such file, or nobody
// holds an exclusive flock on it), else true, and later the environment's dispatcher (set by
// watchInit) is called with (id, errno or 0) once nobody holds it: its holder released it or died.
// A watch cannot be cancelled; it ends when the lock it watches ends, so callers share one watch
// per file (see watch.ts). The dispatcher ignores an id it has already been called with. `mode`: 0,
// or WATCH_CUE_ONLY or WATCH_WRITERS_ONLY (below).
//
// Two watchers, and the first to report wins:
// - inotify, read by the event loop's own epoll (a uv_poll handle): the holder's close (or its
//   death: the kernel closes its files) queues IN_CLOSE_*, which wakes the event loop directly,
//   one wake-up for the hand-off, as a C process blocked in flock has. Each event is only a cue
//   to probe the lock again: other processes' probes close the file too, and the event is queued
//   just before the kernel drops the lock (__fput: fsnotify_close, then locks_remove_file).
// - a pool thread blocked in flock(LOCK_SH), exact whatever the notifications do: alone when
//   inotify cannot watch (no instance or watch left for this user), else started once a close left
//   the lock held and it is still held when probed again, on the loop's next turn and RECHECK_MS
//   later (notify_held). Every release a holder makes by closing its file (as this port and the Go
//   original do; a death closes them all) queues an event, after the lock is dropped or just
//   before: so the rechecks see the release the first probe can miss, and the thread waits for it
//   if it takes longer; a watch nothing else touches wakes no second thread when its holder lets go
//   (a second wake-up would cost a hand-off's waiter a context switch). Seen late, by the caller's own
//   timer or the file's next close: a holder that unlocks and keeps its file open, and a close
//   whose event came just before a watch started while its lock went just after the watch's probe
//   (this port lets go of a .live or .wait before it closes it, close_fd, so only a death or
//   another program leaves that gap). The thread wakes the event loop through a threadsafe
//   function (a second wake-up), often to find the watch already reported; when it reports first,
//   it delivers through the watch's inotify side, which is then done. Pool threads are reused (a wait costs no thread creation) and run as SCHED_IDLE: a
//   release wakes one beside the event loop it would wake, often on one CPU.
// A writers-only watch is for a file that only this port's processes lock, always through a
// descriptor open for writing (a waiter's .wait): its holder's close, or death, queues
// IN_CLOSE_WRITE, and the read-only probes of other processes (a releaser asking whether the front
// waiter lives, `flocklease inspect`) wake nobody. A file a Go process may hold gets every close:
// Go opens its lock files read-only.
// A cue-only watch has no pool thread while inotify watches (a transition lock's: see transition.ts).
// Woken, that thread holds the lock shared until it closes it, and a waiter that takes the lock
// exclusively fails meanwhile; at idle priority on busy CPUs it can be kept off the CPU with the
// lock held, and every other waiter then spins. Its caller looks again on a timer of its own,
// which covers the event read before the kernel dropped the lock.
//
// Lifetime: when an environment is torn down (the process exits, a worker thread ends) Node
// deletes its threadsafe function even while other threads still hold it, so a pool thread woken
// at that moment must not touch it. Each environment's watch state is reference-counted (the
// environment and every queued request hold one), and a cleanup hook, which Node runs before the
// threadsafe function's own (hooks run last-in, first-out), closes it and waits for deliveries
// already under way. The inotify side lives on the event loop's thread only and is closed by an
// async cleanup hook (its poll handle needs the loop to close).

#define MAX_WATCH_THREADS 64
#define WATCH_CUE_ONLY 1
#define WATCH_WRITERS_ONLY 2

// One path watched through inotify: its own descriptor to probe the lock with (a probe by fd
// opens nothing, so it queues no event of its own).
typedef struct notify_watch notify_watch;
struct notify_watch {
  int wd;
  int fd;
  uint32_t id;
  bool thread_later;      // an event may yet start its pool thread (not cue-only, not started)
  bool rechecking;        // a close left the lock held: probe again at recheck_at (uv_now, ms)
  uint64_t recheck_at;
  int rechecks;           // probes made again since that close
  struct notify_watch *next;
};

// The inotify side of an environment; event-loop thread only.
typedef struct {
  struct watch_env *owner;
  napi_env env;
  napi_ref dispatcher;
  napi_async_context async;
  int fd; // the inotify instance; -1 when unavailable
  uv_poll_t poll;
  uv_timer_t recheck; // fires at the earliest recheck_at of the watches
  int handles;        // poll and recheck until each has closed
  notify_watch *watches;
  napi_async_cleanup_hook_handle cleanup;
} notify_env;

typedef struct watch_env {
  napi_threadsafe_function tsfn;
  napi_env env;
  napi_ref drain; // runs what the reports left to tidy up, once they and their microtasks have run
  int closed;   // the environment is being torn down: deliver nothing more
  int inflight; // deliveries in progress
  int refs;     // the environment's, plus one per queued request
  notify_env *notify; // NULL when inotify could not be set up
} watch_env;

typedef struct watch_request {
  int fd;
  uint32_t id;
  int err; // the watch's outcome: 0, or the errno its flock failed with
  watch_env *env;
  struct watch_request *next;
} watch_request;

static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t watch_ready = PTHREAD_COND_INITIALIZER;
static pthread_cond_t watch_drained = PTHREAD_COND_INITIALIZER;
static watch_request *watch_head, *watch_tail;
static int watch_threads, watch_idle;

// Drops a reference; under watch_lock.
static void watch_env_unref(watch_env *e) {
  if (--e->refs == 0) free(e);
}

static void watch_env_cleanup(void *arg) {
  watch_env *e = arg;
  napi_delete_reference(e->env, e->drain);
  pthread_mutex_lock(&watch_lock);
  e->closed = 1;
  while (e->inflight > 0) pthread_cond_wait(&watch_drained, &watch_lock);
  watch_env_unref(e);
  pthread_mutex_unlock(&watch_lock);
}

static notify_watch *notify_unlink(notify_env *n, uint32_t id);
static void notify_deliver(notify_env *n, notify_watch *w, int err);
static void notify_forget(notify_env *n, notify_watch *w);
static bool watch_thread(watch_env *e, int fd, uint32_t id);

// Calls the environment's drain (see watchInit): after a batch of reports, outside any JS.
static void watch_drain(watch_env *e, napi_async_context async) {
  napi_env env = e->env;
  napi_handle_scope scope;
  if (napi_open_handle_scope(env, &scope) != napi_ok) return;
  napi_value drain, global;
  if (napi_get_reference_value(env, e->drain, &drain) != napi_ok || napi_get_global(env, &global) != napi_ok ||
      (async ? napi_make_callback(env, async, global, drain, 0, NULL, NULL)
             : napi_call_function(env, global, drain, 0, NULL, NULL)) != napi_ok) {
    napi_value exception;
    if (napi_get_and_clear_last_exception(env, &exception) == napi_ok) napi_fatal_exception(env, exception);
  }
  napi_close_handle_scope(env, scope);
}

// Runs on the JS thread with the finished request (which it frees), or with env NULL at teardown.
static void watch_dispatch(napi_env env, napi_value dispatcher, void *context, void *data) {
  watch_request *r = data;
  uint32_t id = r->id;
  int32_t err = r->err;
  free(r);
  if (env == NULL || dispatcher == NULL) return; // the environment is shutting down
  watch_env *e = context;
  // Reported here first: the watch's inotify side, if it has one, delivers it and is done.
  notify_watch *w = e->notify == NULL ? NULL : notify_unlink(e->notify, id);
  if (w != NULL) {
    notify_deliver(e->notify, w, err);
    notify_forget(e->notify, w);
    watch_drain(e, NULL);
    return;
  }
  napi_value args[2], global;
  // No JS caller to throw to: a failure leaves the exception to Node's uncaught handling.
  NAPI_CHECK_OR(env, napi_create_uint32(env, id, &args[0]), return);
  NAPI_CHECK_OR(env, napi_create_int32(env, err, &args[1]), return);
  NAPI_CHECK_OR(env, napi_get_global(env, &global), return);
  NAPI_CHECK_OR(env, napi_call_function(env, global, dispatcher, 2, args, NULL), return);
  watch_drain(e, NULL);
}

static void *watch_worker(void *arg) {
  (void)arg;
  // The fallback runs only when a CPU has nothing else to do: a release wakes it beside the event
  // loop it would wake, and on the same CPU it must not go first: the woken waiter would wait for it.
  // Best effort: a policy the system refuses leaves the thread as it was.
  struct sched_param idle = {0};
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);
  for (;;) {
    pthread_mutex_lock(&watch_lock);
    while (watch_head == NULL) {
      watch_idle++;
      pthread_cond_wait(&watch_ready, &watch_lock);
      watch_idle--;
    }
    watch_request *r = watch_head;
    watch_head = r->next;
    if (watch_head == NULL) watch_tail = NULL;
    pthread_mutex_unlock(&watch_lock);

    int rc, fault_errno;
    do rc = STEP("watch.flock", flock(r->fd, LOCK_SH));
    while (rc != 0 && errno == EINTR);
    r->err = rc == 0 ? 0 : errno;
    close(r->fd); // drops our shared lock at once: we only wanted to know when it became free

    watch_env *e = r->env;
    pthread_mutex_lock(&watch_lock);
    int deliver = !e->closed;
    if (deliver) e->inflight++;
    pthread_mutex_unlock(&watch_lock);
    // Queued, the request is watch_dispatch's to free; not queued (closing), it is still ours.
    int queued = deliver && napi_call_threadsafe_function(e->tsfn, r, napi_tsfn_nonblocking) == napi_ok;
    pthread_mutex_lock(&watch_lock);
    if (deliver && --e->inflight == 0 && e->closed) pthread_cond_broadcast(&watch_drained);
    watch_env_unref(e);
    pthread_mutex_unlock(&watch_lock);
    if (!queued) free(r);
  }
  return NULL;
}

// Calls the dispatcher from the event loop (not from inside JS) with (id, errno): as a callback, so
// that promises it settles run their reactions before the loop goes on.
static void notify_deliver(notify_env *n, notify_watch *w, int err) {
  napi_env env = n->env;
  napi_handle_scope scope;
  if (napi_open_handle_scope(env, &scope) != napi_ok) return;
  napi_value dispatcher, global, args[2];
  // No JS caller to throw to: a failure becomes an uncaught exception.
  if (napi_get_reference_value(env, n->dispatcher, &dispatcher) != napi_ok ||
      napi_get_global(env, &global) != napi_ok || napi_create_uint32(env, w->id, &args[0]) != napi_ok ||
      napi_create_int32(env, err, &args[1]) != napi_ok ||
      napi_make_callback(env, n->async, global, dispatcher, 2, args, NULL) != napi_ok) {
    napi_value exception;
    if (napi_get_and_clear_last_exception(env, &exception) == napi_ok) napi_fatal_exception(env, exception);
  }
  napi_close_handle_scope(env, scope);
}

// Probes a watched file's lock through its own fd: 0 when nobody holds it exclusively (our shared
// lock is dropped at once), EWOULDBLOCK while someone does, or the errno flock failed with.
static int notify_probe(int fd) {
  int fault_errno;
  if (STEP("watch.probe", flock(fd, LOCK_SH | LOCK_NB)) != 0) return errno;
  flock(fd, LOCK_UN);
  return 0;
}

// Stops watching one file: its watch descriptor goes when no other watch shares it (watches of
// one inode share one).
static void notify_forget(notify_env *n, notify_watch *w) {
  close(w->fd);
  bool shared = false;
  for (notify_watch *other = n->watches; other; other = other->next) shared |= other->wd == w->wd;
  if (!shared) inotify_rm_watch(n->fd, w->wd);
  free(w);
}

// The inotify side of the watch `id`, taken out of the list (its pool thread has reported), or NULL.
static notify_watch *notify_unlink(notify_env *n, uint32_t id) {
  for (notify_watch **link = &n->watches; *link; link = &(*link)->next) {
    notify_watch *w = *link;
    if (w->id == id) {
      *link = w->next;
      return w;
    }
  }
  return NULL;
}

#define NOTIFY_BATCH 64
// After a close that left the lock held: probe again on the loop's next turn (a release the kernel
// was finishing is done by then), then RECHECK_MS later, then leave it to the pool thread.
#define RECHECKS 2
#define RECHECK_MS 5

static void on_recheck(uv_timer_t *timer);

// Arms the recheck timer for the earliest watch that wants one, or stops it.
static void notify_arm(notify_env *n) {
  bool any = false;
  uint64_t next = 0;
  for (notify_watch *w = n->watches; w; w = w->next) {
    if (w->rechecking && (!any || w->recheck_at < next)) next = w->recheck_at;
    any |= w->rechecking;
  }
  if (!any) {
    uv_timer_stop(&n->recheck);
    return;
  }
  uint64_t now = uv_now(n->poll.loop);
  uv_timer_start(&n->recheck, on_recheck, next > now ? next - now : 0, 0);
}

// A watch whose probe found the lock still held after a close (its event's, or a `due` recheck's).
// Other processes' probes close the file too, and its holder keeps it; when they come often (a
// contended lease: each holder is probed twice a cycle) a thread started at the first would wake
// the process a second time at every hand-off. The rechecks see a release that was under way;
// past them, the pool thread waits, exactly.
static void notify_held(notify_env *n, notify_watch *w, bool due, uint64_t now) {
  if (!w->thread_later) return; // the thread has it, or there is none (cue-only)
  if (!due) {
    if (w->rechecking) return; // already looking again
    w->rechecking = true;
    w->rechecks = 0;
    w->recheck_at = now;
  } else if (++w->rechecks < RECHECKS) {
    w->recheck_at = now + RECHECK_MS;
  } else if (watch_thread(n->owner, w->fd, w->id)) {
    w->rechecking = false;
    w->thread_later = false;
  } else {
    w->recheck_at = now + RECHECK_MS; // no descriptor or memory for it: try again
  }
}

// Probes the watches named by `woken` (all of them if `all`) or, with `rechecks`, those whose
// recheck is due; delivers the released ones.
static void notify_scan(notify_env *n, bool all, const int *woken, int nwoken, bool rechecks) {
  uint64_t now = uv_now(n->poll.loop);
  // Unlink the finished watches first, deliver after: a dispatcher may add watches. Their
  // descriptors and inotify watches go only after delivering, off the waiter's path to its grant
  // (a watch the dispatcher added meanwhile on the same inode shares the wd, so it is kept).
  notify_watch *done[NOTIFY_BATCH];
  int errs[NOTIFY_BATCH], ndone = 0;
  for (notify_watch **link = &n->watches; *link && ndone < NOTIFY_BATCH;) {
    notify_watch *w = *link;
    bool due = rechecks && w->rechecking && w->recheck_at <= now;
    bool hit = all || due;
    for (int i = 0; i < nwoken && !hit; i++) hit = woken[i] == w->wd;
    int err = hit ? notify_probe(w->fd) : EWOULDBLOCK;
    if (err == EWOULDBLOCK) {
      if (hit) notify_held(n, w, due, now);
      link = &w->next;
      continue;
    }
    *link = w->next;
    done[ndone] = w;
    errs[ndone++] = err;
  }
  for (int i = 0; i < ndone; i++) notify_deliver(n, done[i], errs[i]);
  for (int i = 0; i < ndone; i++) notify_forget(n, done[i]);
  if (ndone > 0) watch_drain(n->owner, n->async);
  notify_arm(n);
}

static void on_recheck(uv_timer_t *timer) {
  notify_scan(timer->data, false, NULL, 0, true);
}

static void on_notify(uv_poll_t *handle, int status, int events) {
  (void)events;
  notify_env *n = handle->data;
  // Which watches to probe: those named by an event, or all of them if events were lost.
  bool all = status < 0;
  int woken[NOTIFY_BATCH], nwoken = 0;
  char buffer[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
  for (;;) {
    ssize_t length = read(n->fd, buffer, sizeof buffer);
    if (length < 0 && errno == EINTR) continue;
    if (length <= 0) break;
    for (char *at = buffer; at < buffer + length;) {
      const struct inotify_event *event = (const struct inotify_event *)at;
      if (event->mask & IN_Q_OVERFLOW || nwoken == NOTIFY_BATCH) all = true;
      else woken[nwoken++] = event->wd;
      at += sizeof *event + event->len;
    }
    // Room left for the largest event: the queue was empty, and reading again would only say so
    // (one system call less on a hand-off; an event queued since makes the poll report again).
    if (sizeof buffer - (size_t)length >= sizeof(struct inotify_event) + NAME_MAX + 1) break;
  }
  notify_scan(n, all, woken, nwoken, false);
}

// The close callback of the handles of a set-up that failed: nothing else refers to them.
static void notify_free(uv_handle_t *handle) {
  notify_env *n = handle->data;
  if (--n->handles == 0) free(n);
}

static void notify_closed(uv_handle_t *handle) {
  notify_env *n = handle->data;
  if (--n->handles > 0) return;
  napi_async_cleanup_hook_handle cleanup = n->cleanup;
  free(n);
  napi_remove_async_cleanup_hook(cleanup);
}

static void notify_cleanup(napi_async_cleanup_hook_handle cleanup, void *arg) {
  notify_env *n = arg;
  n->cleanup = cleanup;
  while (n->watches) {
    notify_watch *w = n->watches;
    n->watches = w->next;
    close(w->fd);
    free(w);
  }
  n->owner->notify = NULL;
  napi_delete_reference(n->env, n->dispatcher);
  napi_async_destroy(n->env, n->async);
  uv_poll_stop(&n->poll);
  uv_timer_stop(&n->recheck);
  close(n->fd);
  uv_close((uv_handle_t *)&n->poll, notify_closed);
  uv_close((uv_handle_t *)&n->recheck, notify_closed);
}

// The inotify side of an environment, or NULL (then every watch is a pool thread's).
static notify_env *notify_setup(watch_env *e, napi_env env, napi_value dispatcher) {
  uv_loop_t *loop;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok) return NULL;
  notify_env *n = calloc(1, sizeof *n);
  if (!n) return NULL;
  n->owner = e;
  n->env = env;
  n->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (n->fd < 0) goto fail;
  napi_value name;
  if (napi_create_string_utf8(env, "flocklease.watch", NAPI_AUTO_LENGTH, &name) != napi_ok ||
      napi_async_init(env, NULL, name, &n->async) != napi_ok)
    goto fail_fd;
  if (napi_create_reference(env, dispatcher, 1, &n->dispatcher) != napi_ok) goto fail_async;
  if (uv_poll_init(loop, &n->poll, n->fd) != 0) goto fail_ref;
  uv_timer_init(loop, &n->recheck); // cannot fail
  n->poll.data = n->recheck.data = n;
  n->handles = 2;
  // Pending watches must not keep the process alive.
  uv_unref((uv_handle_t *)&n->poll);
  uv_unref((uv_handle_t *)&n->recheck);
  if (uv_poll_start(&n->poll, UV_READABLE, on_notify) != 0 ||
      napi_add_async_cleanup_hook(env, notify_cleanup, n, NULL) != napi_ok) {
    // The handles are initialized: they can only go through uv_close.
    napi_delete_reference(env, n->dispatcher);
    napi_async_destroy(env, n->async);
    close(n->fd);
    uv_close((uv_handle_t *)&n->poll, notify_free);
    uv_close((uv_handle_t *)&n->recheck, notify_free);
    return NULL;
  }
  return n;
fail_ref:
  napi_delete_reference(env, n->dispatcher);
fail_async:
  napi_async_destroy(env, n->async);
fail_fd:
  close(n->fd);
fail:
  free(n);
  return NULL;
}

// Adds an inotify watch for the file open as `fd` (the inode we opened, not whatever the path names
// by now), which its probes use; `thread_later`: an event may start a pool thread (not cue-only);
// `writers_only`: only the close of a descriptor open for writing is a cue (see watchUnlock).
// 1: watching (fd is the watch's); 0: nobody holds it (fd closed); -1: inotify cannot watch it (fd
// untouched).
static int notify_add(notify_env *n, int fd, uint32_t id, bool thread_later, bool writers_only) {
  char self[32];
  snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
  int fault_errno;
  // Watches of one inode share its watch descriptor: masks only add up (a watch that wants every
  // close keeps getting them beside one that wants only writers' closes, which then sees more).
  uint32_t mask = IN_MASK_ADD | IN_CLOSE_WRITE | (writers_only ? 0 : IN_CLOSE_NOWRITE);
  int wd = STEP("watch.inotify", inotify_add_watch(n->fd, self, mask));
  notify_watch *w = wd < 0 ? NULL : malloc(sizeof *w);
  if (!w) {
    if (wd >= 0) {
      bool shared = false;
      for (notify_watch *other = n->watches; other; other = other->next) shared |= other->wd == wd;
      if (!shared) inotify_rm_watch(n->fd, wd);
    }
    return -1;
  }
  *w = (notify_watch){.wd = wd, .fd = fd, .id = id, .next = n->watches};
  // Released before the watch was in place: no event will come. (Held, but by a close whose event
  // came before the watch: see close_fd, and the limits above.)
  if (notify_probe(fd) != EWOULDBLOCK) {
    notify_forget(n, w); // not the probe: the caller still owns it
    return 0;
  }
  w->thread_later = thread_later;
  n->watches = w;
  return 1;
}

// watchInit(dispatcher, drain): this environment's (id, errno) callback for finished watches, and
// what the addon calls after each batch of reports, once they (and their microtasks) have run.
napi_value watch_init(napi_env env, napi_callback_info info) {
  ARGS(2);
  env_state *s = state_of(env);
  if (s == NULL) return throw_errno(env, ENOMEM, "watchInit", NULL);
  if (s->watch != NULL) return NULL;
  watch_env *e = calloc(1, sizeof *e);
  if (!e) return throw_errno(env, ENOMEM, "watchInit", NULL);
  e->refs = 1;
  e->env = env;
  NAPI_CHECK_OR(env, napi_create_reference(env, argv[1], 1, &e->drain), free(e); return NULL);
  napi_value name;
  NAPI_CHECK_OR(env, napi_create_string_utf8(env, "flocklease.watch", NAPI_AUTO_LENGTH, &name),
                napi_delete_reference(env, e->drain);
                free(e); return NULL);
  napi_status created =
      napi_create_threadsafe_function(env, argv[0], NULL, name, 0, 1, NULL, NULL, e, watch_dispatch, &e->tsfn);
  NAPI_CHECK_OR(env, created, napi_delete_reference(env, e->drain); free(e); return NULL);
  // Pending watches must not keep the process alive. From here `e` is shared with the
  // threadsafe function, so a failure below is reported but `e` is not freed.
  NAPI_CHECK(env, napi_unref_threadsafe_function(env, e->tsfn));
  // Added after the threadsafe function, so it runs before it is torn down.
  NAPI_CHECK(env, napi_add_env_cleanup_hook(env, watch_env_cleanup, e));
  s->watch = e;
  e->notify = notify_setup(e, env, argv[0]);
  return NULL;
}

// Queues a blocking watch of the file open as `fd` (which the pool thread closes) for `id`.
static bool watch_queue(watch_env *e, int fd, uint32_t id) {
  watch_request *r = calloc(1, sizeof *r);
  if (!r) return false;
  r->fd = fd;
  r->id = id;
  r->env = e;
  pthread_mutex_lock(&watch_lock);
  e->refs++;
  if (watch_tail) watch_tail->next = r;
  else watch_head = r;
  watch_tail = r;
  int spawn = watch_idle == 0 && watch_threads < MAX_WATCH_THREADS;
  if (spawn) watch_threads++;
  pthread_cond_signal(&watch_ready);
  pthread_mutex_unlock(&watch_lock);
  if (spawn) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_t thread;
    if (pthread_create(&thread, &attr, watch_worker, NULL) != 0) {
      pthread_mutex_lock(&watch_lock);
      watch_threads--; // the request waits for a busy thread to come free
      pthread_mutex_unlock(&watch_lock);
    }
    pthread_attr_destroy(&attr);
  }
  return true;
}

// Starts the pool thread of an inotify watch whose probes use `fd`: on a second open of its inode,
// its own open file description, so that its blocking flock and the probes never touch each
// other's lock. false (nothing started) if that open or the request fails.
static bool watch_thread(watch_env *e, int fd, uint32_t id) {
  char self[32];
  int fault_errno;
  snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
  int own = STEP("watch.reopen", open(self, O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (own < 0) return false;
  if (watch_queue(e, own, id)) return true;
  close(own);
  return false;
}

napi_value watch_unlock(napi_env env, napi_callback_info info) {
  ARGS(3);
  env_state *s = state_of(env);
  watch_env *e = s == NULL ? NULL : s->watch;
  if (e == NULL) {
    napi_throw_error(env, NULL, "watchInit must be called first");
    return NULL;
  }
  uint32_t id;
  if (napi_get_value_uint32(env, argv[1], &id) != napi_ok) {
    napi_throw_type_error(env, NULL, "expected a watch id");
    return NULL;
  }
  uint32_t mode;
  if (napi_get_value_uint32(env, argv[2], &mode) != napi_ok || mode > WATCH_WRITERS_ONLY) {
    napi_throw_type_error(env, NULL, "watchUnlock: mode is 0, 1 (cue only) or 2 (writers only)");
    return NULL;
  }
  bool cue_only = mode == WATCH_CUE_ONLY;
  char *path = get_string(env, argv[0], "open", NULL);
  if (!path) return NULL;
  napi_value result = NULL;
  int err;
  const char *call;
  int fd = open_lease_file(path, O_RDONLY | O_NONBLOCK, "watch.open", NULL, &err, &call);
  if (fd < 0) {
    if (err == ENOENT) result = bool_value(env, false);
    else throw_errno(env, err, call, path);
    goto out;
  }
  if (e->notify != NULL) {
    // A cue-only watch never starts its thread: inotify alone reports (see above).
    int watching = notify_add(e->notify, fd, id, !cue_only, mode == WATCH_WRITERS_ONLY);
    if (watching >= 0) {
      result = bool_value(env, watching == 1);
      goto out;
    }
  }
  // No inotify side: the pool thread alone reports.
  if (!watch_queue(e, fd, id)) {
    close(fd);
    throw_errno(env, ENOMEM, "watchUnlock", path);
    goto out;
  }
  result = bool_value(env, true);
out:
  free(path);
  return result;
}
