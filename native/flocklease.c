// flocklease's I/O layer in C (Node-API). Why native: the lease's whole write side — create and
// flock the new generation's .live, write the record to a temp file, fsync, rename, fsync the
// directory, remove the predecessor's .live — runs here as ONE step on a libuv worker thread,
// instead of ~10 threadpool round trips of ~35 µs each from JS. The cheap non-blocking calls
// (open, LOCK_NB flock, fstat, a small read) are synchronous, as the spec allows.
//
// Every descriptor is opened O_CLOEXEC (a child must not inherit a lease) and every lease file
// O_NOFOLLOW (a planted symlink is an error, not a redirect).
//
// Fault points (tests only): each system-call step has a name; setFault(name, action, count)
// makes the next `count` executions of that step fail with an errno, SIGKILL or SIGSTOP the
// process, or stall for some milliseconds, before the call is made.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <node_api.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#define MAX_RECORD_BYTES (64 * 1024)
// A first read's buffer: a record with names of usual length fits, and a queue of a few dozen
// waiters; a bigger file costs an fstat and a second read.
#define RECORD_READ_BYTES 4096
#define FTYPE_ERROR (-1000) // our code for "not a regular file" (reported as EFTYPE)

// ---------------------------------------------------------------------------------------------
// Fault points

enum { FAULT_NONE = 0, FAULT_ERRNO, FAULT_KILL, FAULT_STOP, FAULT_SLEEP };
typedef struct {
  char step[32];
  int kind;
  int value; // errno for FAULT_ERRNO, milliseconds for FAULT_SLEEP
  int count; // executions left to fault; -1 = every time
} fault_t;

#define MAX_FAULTS 32
static fault_t faults[MAX_FAULTS];
static int fault_count = 0; // read without the lock as a fast path: no faults, no locking
static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;

// 0 to go ahead with the step, or the errno it must fail with.
static int fault_at(const char *step) {
  if (__atomic_load_n(&fault_count, __ATOMIC_ACQUIRE) == 0) return 0;
  int kind = FAULT_NONE, value = 0;
  pthread_mutex_lock(&fault_lock);
  for (int i = 0; i < MAX_FAULTS; i++) {
    fault_t *f = &faults[i];
    if (f->kind == FAULT_NONE || strcmp(f->step, step) != 0) continue;
    kind = f->kind;
    value = f->value;
    if (f->count > 0 && --f->count == 0) {
      f->kind = FAULT_NONE;
      __atomic_sub_fetch(&fault_count, 1, __ATOMIC_RELEASE);
    }
    break;
  }
  pthread_mutex_unlock(&fault_lock);
  switch (kind) {
    case FAULT_ERRNO: return value;
    case FAULT_KILL: raise(SIGKILL); return 0;
    case FAULT_STOP: raise(SIGSTOP); return 0;
    case FAULT_SLEEP: {
      struct timespec ts = {value / 1000, (long)(value % 1000) * 1000000L};
      while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
      return 0;
    }
    default: return 0;
  }
}

// Runs a syscall expression unless the step is faulted; on a fault, sets errno and yields -1.
#define STEP(name, expr) (fault_errno = fault_at(name), fault_errno ? (errno = fault_errno, -1) : (expr))

// ---------------------------------------------------------------------------------------------
// Errors shaped like Node's own fs errors: message "CODE: description, syscall 'path'" and
// properties code, errno (negative, as libuv reports it), syscall, path.

// libuv names only the errnos it maps; for the rest uv_err_name gives "Unknown system error -N",
// which no caller can match on (and the lease's own ENOLCK → LeaseUnsupportedError mapping never
// fired). Name the ones a lease directory can meet: no locks on this fs (NFS without lockd), disk
// quota full, a stale NFS handle, a lock deadlock.
static const char *errno_code(int err) {
  switch (err) {
    case ENOLCK: return "ENOLCK";
    case EDQUOT: return "EDQUOT";
    case ESTALE: return "ESTALE";
    case EDEADLK: return "EDEADLK";
    default: return NULL;
  }
}

// A failed Node-API call: make sure an exception is pending (the call may have set one) so the
// JS caller sees an error, never a silently wrong value.
static void throw_napi_failure(napi_env env, const char *call) {
  bool pending = false;
  if (napi_is_exception_pending(env, &pending) == napi_ok && pending) return;
  const napi_extended_error_info *info = NULL;
  const char *why = "failed";
  if (napi_get_last_error_info(env, &info) == napi_ok && info && info->error_message) why = info->error_message;
  char message[256];
  snprintf(message, sizeof message, "flocklease addon: %s: %s", call, why);
  napi_throw_error(env, "ERR_FLOCKLEASE_NAPI", message);
}

// Every napi_status is checked: on failure, throw (if nothing is pending yet) and bail out.
#define NAPI_CHECK_OR(env, call, on_failure) \
  do {                                       \
    if ((call) != napi_ok) {                 \
      throw_napi_failure(env, #call);        \
      on_failure;                            \
    }                                        \
  } while (0)
#define NAPI_CHECK(env, call) NAPI_CHECK_OR(env, call, return NULL)

// NULL (with an exception pending) if the error object itself could not be made.
static napi_value make_error(napi_env env, int err, const char *syscall, const char *path) {
  const char *named = err == FTYPE_ERROR ? NULL : errno_code(err);
  const char *code = err == FTYPE_ERROR ? "EFTYPE" : named ? named : uv_err_name(-err);
  const char *desc = err == FTYPE_ERROR ? "not a regular file" : named ? strerror(err) : uv_strerror(-err);
  char message[4096 + 256];
  snprintf(message, sizeof message, "%s: %s, %s '%s'", code, desc, syscall, path ? path : "");
  napi_value js_message, js_code, error, value;
  NAPI_CHECK(env, napi_create_string_utf8(env, message, NAPI_AUTO_LENGTH, &js_message));
  NAPI_CHECK(env, napi_create_string_utf8(env, code, NAPI_AUTO_LENGTH, &js_code));
  NAPI_CHECK(env, napi_create_error(env, js_code, js_message, &error));
  NAPI_CHECK(env, napi_set_named_property(env, error, "code", js_code));
  NAPI_CHECK(env, napi_create_int32(env, err == FTYPE_ERROR ? -1000 : -err, &value));
  NAPI_CHECK(env, napi_set_named_property(env, error, "errno", value));
  NAPI_CHECK(env, napi_create_string_utf8(env, syscall, NAPI_AUTO_LENGTH, &value));
  NAPI_CHECK(env, napi_set_named_property(env, error, "syscall", value));
  if (path) {
    NAPI_CHECK(env, napi_create_string_utf8(env, path, NAPI_AUTO_LENGTH, &value));
    NAPI_CHECK(env, napi_set_named_property(env, error, "path", value));
  }
  return error;
}

static napi_value throw_errno(napi_env env, int err, const char *syscall, const char *path) {
  napi_value error = make_error(env, err, syscall, path);
  if (error) NAPI_CHECK(env, napi_throw(env, error));
  return NULL;
}

// ---------------------------------------------------------------------------------------------
// Argument helpers

// A JS string as a malloc'd C string; NULL with an exception pending (not a string: TypeError;
// no memory: ENOMEM naming `what`).
static char *get_string(napi_env env, napi_value value, const char *what) {
  size_t length;
  if (napi_get_value_string_utf8(env, value, NULL, 0, &length) != napi_ok) {
    napi_throw_type_error(env, NULL, "expected a string argument");
    return NULL;
  }
  char *buffer = malloc(length + 1);
  if (!buffer) {
    throw_errno(env, ENOMEM, what, NULL);
    return NULL;
  }
  NAPI_CHECK_OR(env, napi_get_value_string_utf8(env, value, buffer, length + 1, &length), free(buffer); return NULL);
  return buffer;
}

// An optional string argument: *out is NULL when it is undefined. false with an exception pending
// on any other failure (`what` names the call for ENOMEM).
static bool get_optional_string(napi_env env, napi_value value, const char *what, char **out) {
  napi_valuetype type;
  *out = NULL;
  NAPI_CHECK_OR(env, napi_typeof(env, value, &type), return false);
  if (type == napi_undefined) return true;
  *out = get_string(env, value, what);
  return *out != NULL;
}

static bool get_fd(napi_env env, napi_value value, int32_t *fd) {
  if (napi_get_value_int32(env, value, fd) != napi_ok || *fd < 0) {
    napi_throw_type_error(env, NULL, "expected a file descriptor");
    return false;
  }
  return true;
}

// The prologue of every call: its `n` arguments into argv, or NULL with a TypeError pending.
#define ARGS(n)                                                          \
  size_t argc = n;                                                       \
  napi_value argv[n];                                                    \
  NAPI_CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL)); \
  if (argc < n) {                                                        \
    napi_throw_type_error(env, NULL, "missing argument");                \
    return NULL;                                                         \
  }

// Up to `n` arguments into argv, the missing ones undefined (napi_get_cb_info fills them so).
#define OPTIONAL_ARGS(n)  \
  size_t argc = n;        \
  napi_value argv[n];     \
  NAPI_CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL))

// ...and a path argument as `path` (malloc'd; the function frees it), for calls on one file.
#define PATH_ARGS(n, index, syscall)                      \
  ARGS(n);                                                \
  char *path = get_string(env, argv[index], syscall);     \
  if (!path) return NULL

// NULL with an exception pending on failure, like every napi_value this file returns.
static napi_value int_value(napi_env env, int64_t n) {
  napi_value value;
  NAPI_CHECK(env, napi_create_int64(env, n, &value));
  return value;
}

static napi_value bool_value(napi_env env, bool b) {
  napi_value value;
  NAPI_CHECK(env, napi_get_boolean(env, b, &value));
  return value;
}

static napi_value undefined_value(napi_env env) {
  napi_value value;
  NAPI_CHECK(env, napi_get_undefined(env, &value));
  return value;
}

// ---------------------------------------------------------------------------------------------
// Each environment's state (the main thread's, and each worker thread's): its watches (set up by
// watchInit) and the lock descriptors it holds for JavaScript (transition locks, waiters' .wait
// files, generations' .live files). A worker thread can end without the process ending, and its
// leases must end with it, as a process's end when it dies: a cleanup hook closes whatever the
// environment still holds, which drops those flocks. Only the environment's own thread touches it.

struct watch_env;

typedef struct {
  struct watch_env *watch;
  int *held;
  size_t held_count, held_capacity;
} env_state;

static env_state *state_of(napi_env env) {
  env_state *s = NULL;
  return napi_get_instance_data(env, (void **)&s) == napi_ok ? s : NULL;
}

// Records `fd` as held by this environment. Best effort: without memory it is simply not closed
// at teardown (the lock works the same).
static void held_add(napi_env env, int fd) {
  env_state *s = state_of(env);
  if (s == NULL || fd < 0) return;
  if (s->held_count == s->held_capacity) {
    size_t capacity = s->held_capacity ? s->held_capacity * 2 : 16;
    int *grown = realloc(s->held, capacity * sizeof *grown);
    if (!grown) return;
    s->held = grown;
    s->held_capacity = capacity;
  }
  s->held[s->held_count++] = fd;
}

// From the newest: what closes most often was opened last (a transition lock, held for one
// operation), so a process holding 10 000 leases does not scan them all on every operation.
static void held_remove(napi_env env, int fd) {
  env_state *s = state_of(env);
  if (s == NULL) return;
  for (size_t i = s->held_count; i-- > 0;) {
    if (s->held[i] == fd) {
      s->held[i] = s->held[--s->held_count];
      return;
    }
  }
}

// The environment is torn down (registered first, so it runs after the watches' hooks).
static void state_cleanup(void *arg) {
  env_state *s = arg;
  for (size_t i = 0; i < s->held_count; i++) close(s->held[i]);
  free(s->held);
  free(s);
}

// ---------------------------------------------------------------------------------------------
// Lease files

// Whether the file open as `fd` is a regular file, as every lease file must be (a FIFO or a
// directory planted there is refused): true, or false with *err (an errno, or FTYPE_ERROR) and
// *syscall set. `st` receives its fstat.
static bool regular_file(int fd, struct stat *st, int *err, const char **syscall) {
  if (fstat(fd, st) != 0) {
    *err = errno;
    *syscall = "fstat";
    return false;
  }
  if (!S_ISREG(st->st_mode)) {
    *err = FTYPE_ERROR;
    *syscall = "open";
    return false;
  }
  return true;
}

// Every lease file is opened here: never following a symlink (a planted link is an error, not a
// redirect), close-on-exec (a child must not inherit a lease), and only if it is a regular file
// (O_NONBLOCK in `flags` keeps a FIFO from hanging the open). The fd, or -1 with *err (an errno, or
// FTYPE_ERROR) and *syscall set. `st`, if given, receives its fstat. `step` names the open's fault
// point.
static int open_lease_file(const char *path, int flags, const char *step, struct stat *st, int *err, const char **syscall) {
  int fault_errno;
  struct stat own;
  if (st == NULL) st = &own;
  int fd = STEP(step, open(path, flags | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd < 0) {
    *err = errno;
    *syscall = "open";
    return -1;
  }
  if (regular_file(fd, st, err, syscall)) return fd;
  close(fd);
  return -1;
}

// ---------------------------------------------------------------------------------------------
// Synchronous, non-blocking calls

// lockTransition(path) → fd, -1 when another holder has it, -2 when the path no longer names
// the inode we locked (pruned meanwhile: the caller retries at once).
static napi_value lock_transition(napi_env env, napi_callback_info info) {
  PATH_ARGS(1, 0, "open");
  int fault_errno, err;
  const char *call;
  napi_value result = NULL;
  struct stat locked, current;
  int fd = open_lease_file(path, O_RDWR | O_CREAT, "lock.open", &locked, &err, &call);
  if (fd < 0) {
    throw_errno(env, err, call, path);
    goto out;
  }
  if (STEP("lock.flock", flock(fd, LOCK_EX | LOCK_NB)) != 0) {
    int err = errno;
    close(fd);
    if (err == EWOULDBLOCK) result = int_value(env, -1);
    else throw_errno(env, err, "flock", path);
    goto out;
  }
  // Prune may have unlinked (and someone recreated) the path while we opened and locked it: a
  // lock on that inode serializes nothing.
  if (STEP("lock.lstat", lstat(path, &current)) != 0 || current.st_ino != locked.st_ino ||
      current.st_dev != locked.st_dev) {
    close(fd);
    result = int_value(env, -2);
    goto out;
  }
  result = int_value(env, fd);
  if (result) held_add(env, fd);
  else close(fd);
out:
  free(path);
  return result;
}

// Reads the record at `path` into *content (malloc'd, *length bytes): 0, or the errno (ENOENT: no
// record; EFBIG: too big for one; FTYPE_ERROR: not a regular file) with *syscall naming the call.
// First straight into a RECORD_READ_BYTES buffer: a short read is a regular file's end, and needs no
// fstat. An empty or failed read, or a full buffer, is looked at with fstat (a FIFO, a directory, a
// bigger record), so every answer is the one open_lease_file would give.
static int read_record_file(const char *path, char **content, size_t *length, const char **syscall) {
  int fault_errno, err;
  *syscall = "open";
  int fd = STEP("read.open", open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC));
  if (fd < 0) return errno;
  char small[RECORD_READ_BYTES];
  ssize_t n;
  do n = STEP("read.read", read(fd, small, sizeof small));
  while (n < 0 && errno == EINTR);
  int read_errno = n < 0 ? errno : 0;
  char *buffer = NULL;
  size_t capacity = 0, got = 0;
  if (n > 0 && (size_t)n < sizeof small) {
    got = (size_t)n;
  } else {
    struct stat st;
    if (!regular_file(fd, &st, &err, syscall)) goto fail;
    *syscall = "read";
    if (read_errno != 0) {
      err = read_errno;
      goto fail;
    }
    if (n > 0) {
      // Bigger than the buffer: read it whole, as its size says (+1: notice a file that grew).
      if (st.st_size > MAX_RECORD_BYTES) {
        err = EFBIG;
        goto fail;
      }
      capacity = (size_t)st.st_size + 1;
      if (capacity <= sizeof small) capacity = sizeof small + 1;
      if (!(buffer = malloc(capacity))) {
        err = ENOMEM;
        goto fail;
      }
      memcpy(buffer, small, (size_t)n);
      got = (size_t)n;
      for (;;) {
        size_t wanted = capacity - got;
        do n = STEP("read.read", read(fd, buffer + got, wanted));
        while (n < 0 && errno == EINTR);
        if (n < 0) {
          err = errno;
          goto fail;
        }
        got += (size_t)n;
        if (got == capacity) {
          err = EFBIG;
          goto fail;
        }
        // A regular file on a local file system reads short only at its end: no second read for the 0.
        if ((size_t)n < wanted) break;
      }
    }
  }
  if (buffer == NULL) {
    if (!(buffer = malloc(got + 1))) {
      err = ENOMEM;
      goto fail;
    }
    memcpy(buffer, small, got);
  }
  close(fd);
  *content = buffer;
  *length = got;
  return 0;
fail:
  free(buffer);
  close(fd);
  return err;
}

static bool is_ascii(const char *text, size_t length) {
  for (size_t i = 0; i < length; i++)
    if ((unsigned char)text[i] >= 0x80) return false;
  return true;
}

// readRecord(path) → the file's text when it is all ASCII (the lease's own records: the woken
// waiter then skips a Buffer and a decoder, see docs/bench.md, "The ninth round"), else a Buffer
// of its bytes (decoded, and validated as UTF-8, in JavaScript); undefined when there is no record.
static napi_value read_record(napi_env env, napi_callback_info info) {
  PATH_ARGS(1, 0, "open");
  napi_value result = NULL;
  char *content = NULL;
  size_t length = 0;
  const char *call;
  int err = read_record_file(path, &content, &length, &call);
  if (err == 0) {
    if (is_ascii(content, length))
      NAPI_CHECK_OR(env, napi_create_string_latin1(env, content, length, &result), result = NULL);
    else NAPI_CHECK_OR(env, napi_create_buffer_copy(env, length, content, NULL, &result), result = NULL);
  } else if (err == ENOENT && strcmp(call, "open") == 0) {
    result = undefined_value(env);
  } else {
    throw_errno(env, err, call, path);
  }
  free(content);
  free(path);
  return result;
}

// probeLive(path) → true when some process holds the generation's liveness lock. A shared probe,
// so two probes (an acquirer and `flocklease inspect`) never take each other for a holder. Held is
// the answer a release's probe of its front waiter gets every time, and a lock file someone holds
// is one this port made: only a free one is looked at with fstat (a FIFO or a directory planted
// there is an error, not a free lock).
// The probe of a liveness (or .wait) file: 1 when some process holds it exclusively, 0 when nobody
// does (no such file, or a free regular file), -1 with *err and *call set otherwise.
static int probe_lock(const char *path, int *err, const char **call) {
  int fault_errno;
  int fd = STEP("probe.open", open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC));
  if (fd < 0) {
    if (errno == ENOENT) return 0; // no liveness file: nobody holds it
    *err = errno;
    *call = "open";
    return -1;
  }
  struct stat st;
  int held = 0;
  if (STEP("probe.flock", flock(fd, LOCK_SH | LOCK_NB)) != 0) {
    if (errno == EWOULDBLOCK) held = 1;
    else {
      *err = errno;
      *call = "flock";
      held = -1;
    }
  } else if (!regular_file(fd, &st, err, call)) {
    held = -1;
  }
  close(fd);
  return held;
}

static napi_value probe_live(napi_env env, napi_callback_info info) {
  PATH_ARGS(1, 0, "open");
  int err;
  const char *call;
  int held = probe_lock(path, &err, &call);
  napi_value result = held < 0 ? throw_errno(env, err, call, path) : bool_value(env, held == 1);
  free(path);
  return result;
}

// Closes a lock descriptor at the fault point `step`. Linux frees the descriptor even when close(2)
// reports an error, so there is nothing to retry and nothing to report for a lock-only descriptor
// (no data written through it).
static napi_value close_lock(napi_env env, napi_callback_info info, const char *step, bool unlock_first) {
  ARGS(1);
  int32_t fd;
  if (!get_fd(env, argv[0], &fd)) return NULL;
  int fault_errno;
  if (STEP(step, 0) != 0) return throw_errno(env, errno, "close", NULL); // an injected failure leaves it open
  held_remove(env, fd);
  if (unlock_first) {
    flock(fd, LOCK_UN);
    fault_at("unlocked"); // tests pause here: let go of, not yet closed
  }
  close(fd);
  return NULL;
}

// closeFd(fd): a liveness or wait file's descriptor, unlocked before it is closed. A close queues
// its inotify event just before the kernel drops the lock: a watch that started between the two
// (its probe found the lock held, the event already gone) would wait for one that never comes.
// Let go of first, the close's event comes with the lock free.
static napi_value close_fd(napi_env env, napi_callback_info info) {
  return close_lock(env, info, "close", true);
}

// unlockTransition(fd): the transition lock's, a fault point of its own ("unlock"): a release
// closes its .live only after it ("close"), and each can be faulted alone. Closed at once: its
// waiters look again on a short timer of their own (transition.ts), which covers that gap.
static napi_value unlock_transition(napi_env env, napi_callback_info info) {
  return close_lock(env, info, "unlock", false);
}

// removeFile(path): unlink; a missing file is not an error.
static napi_value remove_file(napi_env env, napi_callback_info info) {
  PATH_ARGS(1, 0, "unlink");
  int fault_errno;
  if (STEP("unlink", unlink(path)) != 0 && errno != ENOENT) throw_errno(env, errno, "unlink", path);
  free(path);
  return NULL;
}

// sameFile(fd, path) → whether `path` (not followed) names the file open as `fd`: a waiter asks
// whether its flocked .wait file has been handed over as the new generation's .live.
static napi_value same_file(napi_env env, napi_callback_info info) {
  PATH_ARGS(2, 1, "lstat");
  int32_t fd;
  int fault_errno;
  napi_value result = NULL;
  struct stat a, b;
  if (!get_fd(env, argv[0], &fd)) goto out;
  // A failing stat answers "not the same file": the caller then takes the locked path.
  bool same = STEP("same.fstat", fstat(fd, &a)) == 0 && STEP("same.lstat", lstat(path, &b)) == 0 &&
              a.st_ino == b.st_ino && a.st_dev == b.st_dev;
  result = bool_value(env, same);
out:
  free(path);
  return result;
}

// fsType(dir) → the file system's magic number (statfs f_type), for the tmpfs decision.
static napi_value fs_type(napi_env env, napi_callback_info info) {
  PATH_ARGS(1, 0, "statfs");
  struct statfs st;
  int fault_errno;
  napi_value result = NULL;
  if (STEP("statfs", statfs(path, &st)) != 0) throw_errno(env, errno, "statfs", path);
  else result = int_value(env, (int64_t)(uint32_t)st.f_type);
  free(path);
  return result;
}

// ---------------------------------------------------------------------------------------------
// The commit: the write side of one transition, as one step.
//
//   1. live (optional): create and exclusively flock the new generation's liveness file; or
//      adopt (optional, a hand-off): rename a queued waiter's flocked .wait file to the new
//      generation's .live name — the rename keeps the inode, so the waiter's flock becomes the
//      new generation's liveness lock
//   2. write the record to a temp file in the same directory, fsync it, close it
//   3. rename it over the record (the commit point), fsync the directory
//   4. remove files that belong to finished generations (failures are reported, not fatal)
// If 1–3 fail, the temp file and the new liveness file are removed and closed (an adopted file
// is renamed back): the old record stands.

typedef struct {
  char *live_path, *adopt_from, *record_path, *dir_path, *data;
  size_t data_length;
  char *remove_paths[2];
  int durable;
  // results
  int live_fd;
  int adopted;   // the waiter's .wait file now has the .live name
  int committed; // the rename happened: the record is replaced, whatever fails after it
  int err;
  const char *syscall;
  const char *err_path; // points into this struct
  int removal_failed[2];
  // async plumbing
  napi_async_work work;
  napi_deferred deferred;
} commit_t;

static uint32_t temp_counter;
// This process's pid, for temp file names: read as the addon loads (and again in a forked child),
// not once per commit.
static pid_t process_id;
static int process_id_watched;
static void process_forked(void) { __atomic_store_n(&process_id, getpid(), __ATOMIC_RELAXED); }

static void commit_free(commit_t *c) {
  free(c->live_path);
  free(c->adopt_from);
  free(c->record_path);
  free(c->dir_path);
  free(c->data);
  free(c->remove_paths[0]);
  free(c->remove_paths[1]);
  free(c);
}

static int write_all(int fd, const char *data, size_t length) {
  int fault_errno;
  while (length > 0) {
    ssize_t n = STEP("temp.write", write(fd, data, length));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    data += n;
    length -= (size_t)n;
  }
  return 0;
}

#define FAIL(call, path) \
  do {                   \
    c->err = errno;      \
    c->syscall = call;   \
    c->err_path = path;  \
    goto fail;           \
  } while (0)

static void commit_run(commit_t *c) {
  int fault_errno;
  int temp_fd = -1, dir_fd = -1;
  char temp_path[4200];
  temp_path[0] = 0;
  c->live_fd = -1;
  c->err = 0;

  if (c->adopt_from) {
    if (STEP("adopt.rename", rename(c->adopt_from, c->live_path)) != 0) FAIL("rename", c->adopt_from);
    c->adopted = 1;
  } else if (c->live_path) {
    c->live_fd = open_lease_file(c->live_path, O_RDWR | O_CREAT, "live.open", NULL, &c->err, &c->syscall);
    if (c->live_fd < 0) {
      c->err_path = c->live_path;
      goto fail_set;
    }
    if (STEP("live.flock", flock(c->live_fd, LOCK_EX | LOCK_NB)) != 0) {
      int err = errno;
      close(c->live_fd);
      c->live_fd = -1;
      // EWOULDBLOCK: someone else holds it, so it is theirs: never unlink it. Otherwise nobody
      // holds what we created (only transitions, under the lock we hold, create .live files).
      if (err != EWOULDBLOCK) unlink(c->live_path);
      errno = err;
      FAIL("flock", c->live_path);
    }
  }

  for (int attempt = 0;; attempt++) {
    uint32_t n = __atomic_add_fetch(&temp_counter, 1, __ATOMIC_RELAXED);
    int pid = (int)__atomic_load_n(&process_id, __ATOMIC_RELAXED);
    snprintf(temp_path, sizeof temp_path, "%s.%d-%08x.tmp", c->record_path, pid, n);
    temp_fd = STEP("temp.open", open(temp_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (temp_fd >= 0) break;
    if (errno != EEXIST || attempt == 3) {
      int err = errno;
      temp_path[0] = 0; // not ours: do not remove it
      errno = err;
      FAIL("open", c->record_path);
    }
  }
  if (write_all(temp_fd, c->data, c->data_length) != 0) FAIL("write", temp_path);
  if (c->durable && STEP("temp.fsync", fsync(temp_fd)) != 0) FAIL("fsync", temp_path);
  int closed = STEP("temp.close", close(temp_fd));
  if (fault_errno) close(temp_fd); // a real failing close(2) still frees the descriptor
  temp_fd = -1;
  if (closed != 0) FAIL("close", temp_path);
  if (STEP("rename", rename(temp_path, c->record_path)) != 0) FAIL("rename", c->record_path);
  temp_path[0] = 0; // renamed: nothing to clean up
  c->committed = 1;
  if (c->durable) {
    // The rename is durable only once the directory is. A failure from here on is reported with
    // `committed: true`: the record is already replaced, so the caller keeps the new state.
    dir_fd = STEP("dir.open", open(c->dir_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dir_fd < 0) FAIL("open", c->dir_path);
    if (STEP("dir.fsync", fsync(dir_fd)) != 0) FAIL("fsync", c->dir_path);
    if (STEP("dir.close", close(dir_fd)) != 0 && fault_errno) close(dir_fd); // read-only: a failing close loses nothing
    dir_fd = -1;
  }
  for (int i = 0; i < 2; i++) {
    if (c->remove_paths[i] && STEP("unlink", unlink(c->remove_paths[i])) != 0 && errno != ENOENT) c->removal_failed[i] = errno;
  }
  STEP("commit.done", 0);
  return;

fail:
  if (c->err == 0) c->err = EIO;
fail_set:
  if (temp_fd >= 0) close(temp_fd);
  if (dir_fd >= 0) close(dir_fd);
  if (temp_path[0]) unlink(temp_path);
  return;
}

static void commit_execute(napi_env env, void *data) {
  (void)env;
  commit_run((commit_t *)data);
}

// The commit failed before its rename: undo the new generation (the old record stands).
static void commit_undo(commit_t *c) {
  if (c->adopted) {
    rename(c->live_path, c->adopt_from); // give the waiter its place back
    c->adopted = 0;
  }
  if (c->live_fd >= 0) {
    close(c->live_fd);
    c->live_fd = -1;
    if (c->live_path) unlink(c->live_path);
  }
}

// NULL with an exception pending if the result could not be made (the commit itself is done).
static napi_value commit_result(napi_env env, commit_t *c) {
  napi_value result, value, fd = int_value(env, c->live_fd);
  if (!fd) return NULL;
  NAPI_CHECK(env, napi_create_object(env, &result));
  NAPI_CHECK(env, napi_set_named_property(env, result, "liveFd", fd));
  NAPI_CHECK(env, napi_create_array(env, &value));
  uint32_t n = 0;
  for (int i = 0; i < 2; i++) {
    if (c->removal_failed[i]) {
      napi_value error = make_error(env, c->removal_failed[i], "unlink", c->remove_paths[i]);
      if (!error) return NULL;
      NAPI_CHECK(env, napi_set_element(env, value, n++, error));
    }
  }
  NAPI_CHECK(env, napi_set_named_property(env, result, "removalErrors", value));
  held_add(env, c->live_fd);
  return result;
}

// The error of a failed commit. Before the rename, the new generation is undone (the old record
// stands); after it, the error carries `committed: true` and the new generation's `liveFd`.
// NULL with an exception pending if the error object could not be made.
static napi_value commit_error(napi_env env, commit_t *c) {
  if (!c->committed) commit_undo(c);
  napi_value error = make_error(env, c->err, c->syscall, c->err_path);
  if (!error) return NULL;
  napi_value committed = bool_value(env, c->committed);
  if (!committed) return NULL;
  NAPI_CHECK(env, napi_set_named_property(env, error, "committed", committed));
  if (c->committed) {
    napi_value fd = int_value(env, c->live_fd);
    if (!fd) return NULL;
    NAPI_CHECK(env, napi_set_named_property(env, error, "liveFd", fd));
    held_add(env, c->live_fd);
  }
  return error;
}

// Settles the promise. If the outcome cannot be made into a value, reject with the pending
// exception: the caller must never see a commit as successful when it cannot be told the fd.
static void commit_complete(napi_env env, napi_status status, void *data) {
  commit_t *c = data;
  if (status != napi_ok && c->err == 0) {
    c->err = ECANCELED; // the work never ran (or was cancelled): nothing changed
    c->syscall = "commit";
  }
  napi_value outcome = c->err == 0 ? commit_result(env, c) : commit_error(env, c);
  if (outcome == NULL) {
    napi_get_and_clear_last_exception(env, &outcome);
    if (c->err == 0 && c->live_fd >= 0) close(c->live_fd); // no one can be told it is theirs
  }
  if (c->err == 0 && outcome != NULL) NAPI_CHECK_OR(env, napi_resolve_deferred(env, c->deferred, outcome), (void)0);
  else NAPI_CHECK_OR(env, napi_reject_deferred(env, c->deferred, outcome), (void)0);
  NAPI_CHECK_OR(env, napi_delete_async_work(env, c->work), (void)0);
  commit_free(c);
}

// The plan, as commit's arguments (record, dir, data, live, adoptFrom, remove0, remove1): positional,
// so that a call makes no plan object in JavaScript and looks up no property here. NULL with an
// exception pending when one is missing or not a string.
#define COMMIT_ARGS 7
static commit_t *commit_parse(napi_env env, const napi_value *argv) {
  commit_t *c = calloc(1, sizeof *c);
  if (!c) {
    throw_errno(env, ENOMEM, "commit", NULL);
    return NULL;
  }
  c->live_fd = -1;
  c->durable = 1;
  char **fields[COMMIT_ARGS] = {&c->record_path, &c->dir_path,        &c->data,           &c->live_path,
                                &c->adopt_from,  &c->remove_paths[0], &c->remove_paths[1]};
  bool ok = true;
  for (int i = 0; ok && i < COMMIT_ARGS; i++) ok = get_optional_string(env, argv[i], "commit", fields[i]);
  if (ok && (!c->record_path || !c->dir_path || !c->data)) {
    napi_throw_type_error(env, NULL, "commit plan needs record, dir and data strings");
    ok = false;
  }
  if (!ok) {
    commit_free(c);
    return NULL;
  }
  c->data_length = strlen(c->data);
  return c;
}

// commit(record, dir, data, live, adoptFrom, remove0, remove1) → Promise<{ liveFd, removalErrors }>,
// on a libuv worker thread.
static napi_value commit_async(napi_env env, napi_callback_info info) {
  OPTIONAL_ARGS(COMMIT_ARGS);
  commit_t *c = commit_parse(env, argv);
  if (!c) return NULL;
  napi_value promise, name;
  NAPI_CHECK_OR(env, napi_create_promise(env, &c->deferred, &promise), commit_free(c); return NULL);
  // From here the promise exists: a failure rejects it (through commit_complete's error path).
  if (napi_create_string_utf8(env, "flocklease.commit", NAPI_AUTO_LENGTH, &name) != napi_ok ||
      napi_create_async_work(env, NULL, name, commit_execute, commit_complete, c, &c->work) != napi_ok) {
    throw_napi_failure(env, "napi_create_async_work");
    napi_value error;
    // Best effort: if even this fails, Node reports the pending exception as uncaught.
    if (napi_get_and_clear_last_exception(env, &error) == napi_ok) (void)napi_reject_deferred(env, c->deferred, error);
    commit_free(c);
    return promise;
  }
  if (napi_queue_async_work(env, c->work) != napi_ok) {
    c->err = ECANCELED;
    c->syscall = "commit";
    commit_complete(env, napi_cancelled, c);
  }
  return promise;
}

// commitSync(record, dir, data, live, adoptFrom, remove0, remove1) → { liveFd, removalErrors }, on
// this thread: for tmpfs, where every step is a memory operation of a few microseconds and a thread
// hop would cost more than the work.
static napi_value commit_sync(napi_env env, napi_callback_info info) {
  OPTIONAL_ARGS(COMMIT_ARGS);
  commit_t *c = commit_parse(env, argv);
  if (!c) return NULL;
  commit_run(c);
  napi_value result = NULL;
  if (c->err == 0) {
    result = commit_result(env, c);
    if (!result && c->live_fd >= 0) close(c->live_fd); // no one can be told it is theirs
  } else {
    napi_value error = commit_error(env, c);
    if (error) NAPI_CHECK_OR(env, napi_throw(env, error), (void)0);
  }
  commit_free(c);
  return result;
}

// ---------------------------------------------------------------------------------------------
// Waiting: the wait queue kept in the transition lock file, waiter liveness files, and watchers.

// lockFile(path) → fd of a newly created (or reused) file we now hold exclusively, or -1 when
// someone else holds it. For a waiter's `<safeID>.<ticket>.wait` liveness file.
static napi_value lock_file(napi_env env, napi_callback_info info) {
  PATH_ARGS(1, 0, "open");
  napi_value result = NULL;
  int err, fault_errno;
  const char *call;
  int fd = open_lease_file(path, O_RDWR | O_CREAT, "wait.open", NULL, &err, &call);
  if (fd < 0) {
    throw_errno(env, err, call, path);
  } else if (STEP("wait.flock", flock(fd, LOCK_EX | LOCK_NB)) != 0) {
    err = errno;
    close(fd);
    if (err == EWOULDBLOCK) result = int_value(env, -1);
    else throw_errno(env, err, "flock", path);
  } else {
    result = int_value(env, fd);
    if (result) held_add(env, fd);
    else close(fd);
  }
  free(path);
  return result;
}

// readLockData(fd) → the transition lock file's content (the wait queue): its text when it is all
// ASCII (as the lease writes it for ASCII owners: no Buffer to decode in JavaScript), else a Buffer
// of its bytes; undefined if empty. Only called with the transition lock held.
static napi_value read_lock_data(napi_env env, napi_callback_info info) {
  ARGS(1);
  int32_t fd;
  if (!get_fd(env, argv[0], &fd)) return NULL;
  int fault_errno;
  napi_value result = NULL;
  // First straight into a RECORD_READ_BYTES buffer: a short read is all of it, and needs no fstat;
  // a full one is read again whole, as its size says.
  char small[RECORD_READ_BYTES];
  char *buffer = small;
  ssize_t n;
  do n = STEP("queue.read", pread(fd, small, sizeof small, 0));
  while (n < 0 && errno == EINTR);
  if (n < 0) return throw_errno(env, errno, "pread", NULL);
  if (n == 0) return undefined_value(env);
  if ((size_t)n == sizeof small) {
    struct stat st;
    if (STEP("queue.fstat", fstat(fd, &st)) != 0) return throw_errno(env, errno, "fstat", NULL);
    if (st.st_size > MAX_RECORD_BYTES) return throw_errno(env, EFBIG, "read", NULL);
    if (!(buffer = malloc((size_t)st.st_size + 1))) return throw_errno(env, ENOMEM, "pread", NULL);
    do n = STEP("queue.read", pread(fd, buffer, (size_t)st.st_size, 0));
    while (n < 0 && errno == EINTR);
    if (n < 0) {
      free(buffer);
      return throw_errno(env, errno, "pread", NULL);
    }
  }
  if (is_ascii(buffer, (size_t)n))
    NAPI_CHECK_OR(env, napi_create_string_latin1(env, buffer, (size_t)n, &result), result = NULL);
  else NAPI_CHECK_OR(env, napi_create_buffer_copy(env, (size_t)n, buffer, NULL, &result), result = NULL);
  if (buffer != small) free(buffer);
  return result;
}

// Replaces the transition lock file's content (the wait queue) with `text`: 0, or the errno with
// *call naming the call.
static int write_queue(int fd, const char *text, const char **call) {
  int fault_errno;
  size_t length = strlen(text), done = 0;
  *call = "pwrite";
  while (done < length) {
    ssize_t n = STEP("queue.write", pwrite(fd, text + done, length - done, (off_t)done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    done += (size_t)n;
  }
  *call = "ftruncate";
  return STEP("queue.truncate", ftruncate(fd, (off_t)length)) != 0 ? errno : 0;
}

// writeLockData(fd, text): replaces the transition lock file's content. No fsync: the queue is
// soft state (a crash that loses it costs ordering, never safety).
static napi_value write_lock_data(napi_env env, napi_callback_info info) {
  ARGS(2);
  int32_t fd;
  if (!get_fd(env, argv[0], &fd)) return NULL;
  char *text = get_string(env, argv[1], "pwrite");
  if (!text) return NULL;
  const char *call;
  int err = write_queue(fd, text, &call);
  free(text);
  return err != 0 ? throw_errno(env, err, call, NULL) : NULL;
}

// ---------------------------------------------------------------------------------------------
// A release's hand-off as one step: the common case of a contended release, for a directory whose
// commits run inline (tmpfs). Its rules are the Lease's (src/flock/lease.ts, release and #handOff;
// src/flock/waitline.ts, nextInLine and handedOff); this only does them without returning to
// JavaScript in between, where a contending process's cold code cost most of a release
// (docs/bench.md, "The twenty-third round"). Anything but the common case is left to JavaScript
// before anything changes. Every system call is at the fault point of the call it stands for.

// The queue's own layout (src/flock/queue.ts, formatQueue).
#define QUEUE_HEAD "{\"waiters\":["
#define QUEUE_TICKET "{\"t\":"
#define QUEUE_OWNER ",\"o\":"
#define QUEUE_TTL ",\"ttl\":"
#define QUEUE_TAIL "],\"freeSince\":"
#define MAX_SAFE_INTEGER 9007199254740991ULL
#define MAX_EXPIRY_MS 253402300799999.0 // 9999-12-31T23:59:59.999Z (src/port/validate.ts)

static bool starts_with(const char *text, const char *prefix) { return strncmp(text, prefix, strlen(prefix)) == 0; }

// The end of the plain decimal number at `at` (digits, no leading zero, a fraction if `fraction`),
// or NULL: queue.ts's decimalEnd.
static const char *decimal_end(const char *at, bool fraction) {
  const char *end = at;
  while (*end >= '0' && *end <= '9') end++;
  if (end == at || (end - at > 1 && *at == '0')) return NULL;
  if (!fraction || *end != '.') return end;
  const char *digits = ++end;
  while (*end >= '0' && *end <= '9') end++;
  return end == digits ? NULL : end;
}

// A front waiter as the queue names it.
typedef struct {
  uint64_t ticket;
  double ttl_ms;
  const char *owner; // its JSON string, quotes included
  size_t owner_length;
} queued_waiter;

// Reads the entry at `at` (queue.ts's readEntry): past it, or NULL if it is not a valid one.
// `plain` is cleared for an owner with an escape.
static const char *read_entry(const char *at, queued_waiter *w, bool *plain) {
  if (!starts_with(at, QUEUE_TICKET)) return NULL;
  at += strlen(QUEUE_TICKET);
  const char *end = decimal_end(at, false);
  if (!end || end - at > 16) return NULL;
  uint64_t ticket = strtoull(at, NULL, 10);
  if (ticket > MAX_SAFE_INTEGER || !starts_with(end, QUEUE_OWNER)) return NULL;
  const char *from = end + strlen(QUEUE_OWNER);
  if (*from != '"') return NULL;
  const char *p = from + 1;
  while (*p != '"') {
    if ((unsigned char)*p < 0x20) return NULL; // a raw control character, or the text's end
    if (*p != '\\') {
      p++;
      continue;
    }
    *plain = false;
    char c = p[1];
    if (c == 'u') {
      for (int i = 2; i < 6; i++)
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f') || (p[i] >= 'A' && p[i] <= 'F'))) return NULL;
      p += 6;
    } else if (c && strchr("\"\\/bfnrt", c)) {
      p += 2;
    } else {
      return NULL;
    }
  }
  if (p == from + 1 || !starts_with(p + 1, QUEUE_TTL)) return NULL;
  const char *ttl = p + 1 + strlen(QUEUE_TTL);
  const char *ttl_end = decimal_end(ttl, true);
  if (!ttl_end || *ttl_end != '}') return NULL;
  double ttl_ms = strtod(ttl, NULL);
  if (!(ttl_ms > 0)) return NULL;
  w->ticket = ticket;
  w->ttl_ms = ttl_ms;
  w->owner = from;
  w->owner_length = (size_t)(p + 1 - from);
  return ttl_end + 1;
}

// The front waiter of the queue `text` (`length` bytes) when it is the queue's own layout, every
// entry valid, and the front owner without escapes (so its JSON string is the one JSON.stringify
// makes of it); `*rest` is where the entries after it begin and `*tail` where the entries end.
// false for anything else, an empty queue included: queue.ts's scanOwnQueue decides those.
static bool queue_front(const char *text, size_t length, queued_waiter *front, const char **rest, const char **tail) {
  if (!starts_with(text, QUEUE_HEAD)) return false;
  const char *at = text + strlen(QUEUE_HEAD);
  bool front_plain = true, later_plain = true;
  if (!(at = read_entry(at, front, &front_plain))) return false;
  *rest = at;
  while (*at == ',') {
    queued_waiter later;
    if (!(at = read_entry(at + 1, &later, &later_plain))) return false;
  }
  if (!front_plain || !starts_with(at, QUEUE_TAIL)) return false;
  *tail = at;
  const char *free_since = at + strlen(QUEUE_TAIL), *end = decimal_end(free_since, true);
  return end && *end == '}' && end + 1 == text + length && isfinite(strtod(free_since, NULL));
}

// Whether `text` is an expiry as this port writes it (formatUtcMs: YYYY-MM-DDTHH:MM:SS.mmmZ) and a
// valid time, as record.ts's parseRfc3339Instant would read it.
#define EXPIRY_LENGTH 24
static bool own_expiry(const char *text) {
  int value[7] = {0}, at[7] = {0, 5, 8, 11, 14, 17, 20}, width[7] = {4, 2, 2, 2, 2, 2, 3};
  for (int f = 0; f < 7; f++) {
    for (int i = at[f]; i < at[f] + width[f]; i++) {
      if (text[i] < '0' || text[i] > '9') return false;
      value[f] = value[f] * 10 + (text[i] - '0');
    }
  }
  if (text[4] != '-' || text[7] != '-' || text[10] != 'T' || text[13] != ':' || text[16] != ':' || text[19] != '.' ||
      text[23] != 'Z')
    return false;
  int year = value[0], month = value[1], day = value[2];
  bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  int days = month == 2 ? (leap ? 29 : 28) : (month == 4 || month == 6 || month == 9 || month == 11) ? 30 : 31;
  return month >= 1 && month <= 12 && day >= 1 && day <= days && value[3] <= 23 && value[4] <= 59 && value[5] <= 59;
}

// `value`'s last `count` decimal digits at `out`.
static char *put_digits(char *out, int64_t value, int count) {
  for (int i = count - 1; i >= 0; i--, value /= 10) out[i] = (char)('0' + value % 10);
  return out + count;
}

// `ms` (0 to MAX_EXPIRY_MS) as record.ts's formatUtcMs writes it: UTC, milliseconds, Z.
static void format_utc_ms(int64_t ms, char out[EXPIRY_LENGTH + 1]) {
  int64_t days = ms / 86400000, rest = ms % 86400000;
  // H. Hinnant's civil_from_days, as record.ts has it.
  int64_t z = days + 719468, era = z / 146097, day_of_era = z - era * 146097;
  int64_t year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36524 - day_of_era / 146096) / 365;
  int64_t day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
  int64_t mp = (5 * day_of_year + 2) / 153, day = day_of_year - (153 * mp + 2) / 5 + 1;
  int64_t month = mp < 10 ? mp + 3 : mp - 9, year = year_of_era + era * 400 + (month <= 2 ? 1 : 0);
  char *p = put_digits(out, year, 4);
  *p++ = '-';
  p = put_digits(p, month, 2);
  *p++ = '-';
  p = put_digits(p, day, 2);
  *p++ = 'T';
  p = put_digits(p, rest / 3600000, 2);
  *p++ = ':';
  p = put_digits(p, rest / 60000 % 60, 2);
  *p++ = ':';
  p = put_digits(p, rest / 1000 % 60, 2);
  *p++ = '.';
  p = put_digits(p, rest % 1000, 3);
  *p++ = 'Z';
  *p = 0;
}

// What handoff_plan found.
enum { HANDOFF_NOT_HANDLED, HANDOFF_PLANNED, HANDOFF_FAILED };

typedef struct {
  int lock_fd;
  const char *record, *prefix, *live_suffix, *wait_suffix, *before, *between, *after;
  const char *queue_read; // the queue as read first (see releaseHandOff), NUL-terminated
  size_t queue_length;
  uint64_t token;
  double now_ms;
  char *dir; // handed to the commit
  // results
  uint64_t next;
  char *queue; // the queue without the front waiter (malloc'd)
  int err;     // HANDOFF_FAILED: the errno, the call and its path
  const char *syscall;
  char err_path[4200];
} handoff_step;

// A plan that failed: its errno, the call and the file (or none).
static int plan_failed(handoff_step *s, int err, const char *call, const char *path) {
  s->err = err;
  s->syscall = call;
  snprintf(s->err_path, sizeof s->err_path, "%s", path ? path : "");
  return HANDOFF_FAILED;
}

// The hand-off up to its commit (its plan filled into `c`), or why not; the queue is read.
static int handoff_plan(handoff_step *s, commit_t *c, char **content) {
  const char *call;
  size_t length;
  // 1. The record: ours, exactly as this port writes it? Anything else (no record, a successor's,
  // another layout, one JavaScript would call corrupt) is decided in JavaScript.
  int err = read_record_file(s->record, content, &length, &call);
  if (err != 0) {
    if (err == ENOENT && strcmp(call, "open") == 0) return HANDOFF_NOT_HANDLED;
    return plan_failed(s, err, call, s->record);
  }
  char ours[64];
  snprintf(ours, sizeof ours, "%" PRIu64, s->token);
  size_t before = strlen(s->before), digits = strlen(ours), between = strlen(s->between), after = strlen(s->after);
  const char *expiry_text = *content + before + digits + between;
  if (length != before + digits + between + EXPIRY_LENGTH + after || memcmp(*content, s->before, before) != 0 ||
      memcmp(*content + before, ours, digits) != 0 || memcmp(*content + before + digits, s->between, between) != 0 ||
      !own_expiry(expiry_text) || memcmp(expiry_text + EXPIRY_LENGTH, s->after, after) != 0)
    return HANDOFF_NOT_HANDLED;
  // 2. The queue's front waiter.
  queued_waiter front;
  const char *rest = NULL, *tail = NULL;
  if (!queue_front(s->queue_read, s->queue_length, &front, &rest, &tail)) return HANDOFF_NOT_HANDLED;
  // 3. Alive (its .wait held), and its expiry and our successor token in range? A dead or stopped
  // line is JavaScript's to prune.
  char wait_path[4200];
  if (snprintf(wait_path, sizeof wait_path, "%s%" PRIu64 "%s", s->prefix, front.ticket, s->wait_suffix) >= (int)sizeof wait_path)
    return HANDOFF_NOT_HANDLED;
  int held = probe_lock(wait_path, &err, &call);
  if (held < 0) return plan_failed(s, err, call, wait_path);
  if (held == 0) return HANDOFF_NOT_HANDLED;
  double expiry_ms = s->now_ms + front.ttl_ms, wall = s->now_ms * 1000;
  if (!(expiry_ms >= 0 && expiry_ms <= MAX_EXPIRY_MS) || s->token == UINT64_MAX || !(wall < 18446744073709551616.0))
    return HANDOFF_NOT_HANDLED;
  uint64_t wall_micros = wall > 0 ? (uint64_t)wall : 0; // token.ts's nextToken (a cast floors a positive double)
  s->next = wall_micros > s->token + 1 ? wall_micros : s->token + 1;
  // 4. The commit's plan: the waiter's .wait becomes the new .live, the record names it, ours goes.
  char expiry[EXPIRY_LENGTH + 1], live[4200], removed[4200];
  format_utc_ms((int64_t)expiry_ms, expiry);
  snprintf(live, sizeof live, "%s%" PRIu64 "%s", s->prefix, s->next, s->live_suffix);
  snprintf(removed, sizeof removed, "%s%s%s", s->prefix, ours, s->live_suffix);
  size_t size = front.owner_length + strlen(s->after) + 128;
  c->data = malloc(size);
  c->live_path = strdup(live);
  c->adopt_from = strdup(wait_path);
  c->remove_paths[0] = strdup(removed);
  if (!c->data || !c->live_path || !c->adopt_from || !c->remove_paths[0]) return plan_failed(s, ENOMEM, "commit", NULL);
  c->data_length = (size_t)snprintf(c->data, size, "{\"owner\":%.*s,\"token\":%" PRIu64 "%s%s%s", (int)front.owner_length,
                                    front.owner, s->next, s->between, expiry, s->after);
  c->record_path = strdup(s->record);
  c->dir_path = s->dir;
  s->dir = NULL;
  // 5. What the queue becomes without its front waiter, freeSince 0 (waitline.ts's handedOff),
  // written once the commit is done.
  size_t rest_length = *rest == ',' ? (size_t)(tail - rest - 1) : 0;
  s->queue = malloc(rest_length + 64);
  if (!c->record_path || !s->queue) return plan_failed(s, ENOMEM, "commit", NULL);
  if (rest_length == 0) s->queue[0] = 0; // as formatQueue writes an empty queue
  else snprintf(s->queue, rest_length + 64, QUEUE_HEAD "%.*s" QUEUE_TAIL "0}", (int)rest_length, rest + 1);
  return HANDOFF_PLANNED;
}

// releaseHandOff(lockFd, record, dir, prefix, liveSuffix, waitSuffix, before, between, after, token,
// nowMs), with the id's transition lock held as lockFd, by the holder of generation `token` (a
// BigInt), whose record layout is (before, between, after) (see recordLayout), at the clock's nowMs:
// - '': the queue is empty (a release to nobody, JavaScript's; read first, so that such a release
//   makes no call twice: JavaScript takes the queue as read here);
// - undefined: not the common case (see handoff_plan); nothing changed, JavaScript decides;
// - false: the front waiter's .wait was gone at the rename (it gave up); nothing changed;
// - the new token (a BigInt): the front waiter was handed the lease and left the queue;
// - [token, error]: so, but our .live could not be removed (the unlink's error).
// Throws what the same steps throw in JavaScript: a read's error, a failed commit's (with
// `committed`, as commitSync), or the queue write's once committed.
static napi_value release_hand_off(napi_env env, napi_callback_info info) {
  ARGS(11);
  handoff_step s = {0};
  int32_t lock_fd;
  bool lossless;
  int fault_errno;
  if (!get_fd(env, argv[0], &lock_fd)) return NULL;
  s.lock_fd = lock_fd;
  // The queue first: empty, there is nothing else to do here (one read: a longer queue is left to
  // JavaScript).
  char queue[RECORD_READ_BYTES + 1];
  ssize_t n;
  do n = STEP("queue.read", pread(lock_fd, queue, RECORD_READ_BYTES, 0));
  while (n < 0 && errno == EINTR);
  if (n < 0) return throw_errno(env, errno, "pread", NULL);
  if (n == 0) {
    napi_value empty;
    NAPI_CHECK(env, napi_create_string_latin1(env, "", 0, &empty));
    return empty;
  }
  if (n == RECORD_READ_BYTES || !is_ascii(queue, (size_t)n)) return undefined_value(env);
  queue[n] = 0;
  s.queue_read = queue;
  s.queue_length = (size_t)n;
  if (napi_get_value_bigint_uint64(env, argv[9], &s.token, &lossless) != napi_ok || !lossless ||
      napi_get_value_double(env, argv[10], &s.now_ms) != napi_ok) {
    napi_throw_type_error(env, NULL, "releaseHandOff needs a uint64 token and a time");
    return NULL;
  }
  char *strings[8] = {NULL}; // argv[1] to argv[8]
  napi_value result = NULL;
  char *content = NULL;
  commit_t *c = NULL;
  for (int i = 0; i < 8; i++)
    if (!(strings[i] = get_string(env, argv[i + 1], "open"))) goto out;
  s.record = strings[0];
  s.dir = strings[1];
  strings[1] = NULL; // the commit's once planned
  s.prefix = strings[2];
  s.live_suffix = strings[3];
  s.wait_suffix = strings[4];
  s.before = strings[5];
  s.between = strings[6];
  s.after = strings[7];
  if (!(c = calloc(1, sizeof *c))) {
    throw_errno(env, ENOMEM, "commit", NULL);
    goto out;
  }
  c->live_fd = -1;
  c->durable = 1;
  switch (handoff_plan(&s, c, &content)) {
    case HANDOFF_NOT_HANDLED:
      result = undefined_value(env);
      goto out;
    case HANDOFF_FAILED:
      throw_errno(env, s.err, s.syscall, s.err_path[0] ? s.err_path : NULL);
      goto out;
  }
  commit_run(c);
  if (c->err != 0) {
    // As Lease.#handOff: a waiter that gave up removed its .wait (nothing changed: the next one).
    if (!c->committed && c->err == ENOENT && c->err_path == c->adopt_from) result = bool_value(env, false);
    else {
      napi_value error = commit_error(env, c);
      if (error) NAPI_CHECK_OR(env, napi_throw(env, error), (void)0);
    }
    goto out;
  }
  const char *call;
  int err = write_queue(lock_fd, s.queue, &call);
  if (err != 0) {
    throw_errno(env, err, call, NULL);
    goto out;
  }
  napi_value token;
  NAPI_CHECK_OR(env, napi_create_bigint_uint64(env, s.next, &token), goto out);
  if (!c->removal_failed[0]) {
    result = token;
    goto out;
  }
  napi_value pair, error = make_error(env, c->removal_failed[0], "unlink", c->remove_paths[0]);
  if (!error) goto out;
  NAPI_CHECK_OR(env, napi_create_array_with_length(env, 2, &pair), goto out);
  NAPI_CHECK_OR(env, napi_set_element(env, pair, 0, token), goto out);
  NAPI_CHECK_OR(env, napi_set_element(env, pair, 1, error), goto out);
  result = pair;
out:
  if (c) commit_free(c);
  free(s.dir);
  free(s.queue);
  free(content);
  for (int i = 0; i < 8; i++) free(strings[i]);
  return result;
}

// watchUnlock(path, id, mode[, fd, record, livePrefix, liveSuffix, before, between, after]) →
// false when there is nothing to wait for (no such file, or nobody holds an exclusive flock on it),
// else true, and later the environment's dispatcher (set by watchInit) is called with (id, errno or
// 0) once nobody holds it: its holder released it or died. A watch cannot be cancelled; it ends when
// the lock it watches ends, so callers share one watch per file (see watch.ts). The dispatcher
// ignores an id it has already been called with. A waiting acquire passes its hand-off probe (its
// flocked .wait, the record and the layout it expects there, how the id's .live files are named):
// if the release handed it the lease, the inotify side's report is (id, 0, token, expiry), so the
// woken waiter makes no call of its own and parses almost nothing (handoff_check). `mode`: 0, or
// WATCH_CUE_ONLY or WATCH_WRITERS_ONLY (below).
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
//   (a hand-off's wake-up: docs/bench.md, "The fourteenth round"). Seen late, by the caller's own
//   timer or the file's next close: a holder that unlocks and keeps its file open, and a close
//   whose event came just before a watch started while its lock went just after the watch's probe
//   (this port lets go of a .live or .wait before it closes it, close_fd, so only a death or
//   another program leaves that gap). The thread wakes the event loop through a threadsafe
//   function (a second wake-up), often to find the watch already reported; when it reports first,
//   it delivers through the watch's inotify side (with its hand-off probe's answer), which is then
//   done. Pool threads are reused (a wait costs no thread creation) and run as SCHED_IDLE: a
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

// What a waiting acquire asks its watch to find out as the lock is let go, before JavaScript runs:
// whether the release handed it the lease (see handoff_check).
typedef struct {
  char *record;                    // the id's record
  char *before, *between, *after;  // its layout for this waiter: before, token, between, expiry, after
  char *live_prefix, *live_suffix; // a generation's .live: the prefix, its token in decimal, the suffix
  int wait_fd;                     // the waiter's flocked .wait file (JavaScript's: never closed here)
  dev_t wait_dev;                  // ...and its inode, taken as the watch starts (it never changes),
  ino_t wait_ino;                  // so that the woken waiter's check makes one system call less
  size_t longest;                  // the longest record of this layout (a longer one is not a match)
} handoff_probe;

// One path watched through inotify: its own descriptor to probe the lock with (a probe by fd
// opens nothing, so it queues no event of its own).
typedef struct notify_watch notify_watch;
struct notify_watch {
  int wd;
  int fd;
  uint32_t id;
  handoff_probe *handoff; // NULL when nobody asked
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
  // Reported here first: the watch's inotify side, if it has one, delivers it (with its hand-off
  // probe's answer, which the lock being free makes worth asking) and is done.
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
  // loop it would wake, and on the same CPU it must not go first (docs/bench.md, "The tenth round").
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

static void handoff_free(handoff_probe *p) {
  if (p == NULL) return;
  free(p->record);
  free(p->before);
  free(p->between);
  free(p->after);
  free(p->live_prefix);
  free(p->live_suffix);
  free(p);
}

// Whether the release that let the lock go handed the lease to the probe's waiter: the record is
// exactly the layout the waiter was given (its own owner and session: the hand-off record the
// releaser writes for it), and its token names a .live that is the waiter's own flocked .wait inode
// (a hand-off renames it so). The lease's own check, made here so that the woken JavaScript has its
// answer at once. Then the token is *token and the expiry's text is *expiry (malloc'd); or false:
// anything else is left to the lease's locked path, which reads and reports it properly.
static bool handoff_check(const handoff_probe *p, uint64_t *token, char **expiry) {
  int fault_errno;
  char *content = malloc(p->longest + 1);
  if (!content) return false;
  bool handed = false;
  // Not open_lease_file: no fstat for the file's type and size. This is a check, not a read: a
  // record that is not a regular file, or is longer than the layout allows, simply does not match.
  int fd = STEP("handoff.open", open(p->record, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC));
  if (fd < 0) goto out;
  ssize_t n;
  do n = STEP("handoff.read", read(fd, content, p->longest + 1));
  while (n < 0 && errno == EINTR);
  close(fd);
  if (n < 0 || (size_t)n > p->longest) goto out;
  const char *at = content, *end = content + n;
  size_t before = strlen(p->before), between = strlen(p->between), after = strlen(p->after);
  if ((size_t)(end - at) < before || memcmp(at, p->before, before) != 0) goto out;
  at += before;
  uint64_t value = 0;
  const char *digits = at;
  for (; at < end && *at >= '0' && *at <= '9'; at++) {
    unsigned d = (unsigned)(*at - '0');
    // As the lease writes it: no leading zero, at most 2^64-1.
    if ((at - digits == 1 && value == 0) || value > (UINT64_MAX - d) / 10) goto out;
    value = value * 10 + d;
  }
  if (at == digits || (size_t)(end - at) < between || memcmp(at, p->between, between) != 0) goto out;
  at += between;
  // The expiry runs to the quote that `after` begins with; JavaScript parses it.
  const char *quote = memchr(at, '"', (size_t)(end - at));
  if (quote == NULL || (size_t)(end - quote) != after || memcmp(quote, p->after, after) != 0) goto out;
  char live[PATH_MAX];
  struct stat named;
  if (snprintf(live, sizeof live, "%s%" PRIu64 "%s", p->live_prefix, value, p->live_suffix) >= (int)sizeof live ||
      STEP("handoff.lstat", lstat(live, &named)) != 0 || named.st_ino != p->wait_ino || named.st_dev != p->wait_dev ||
      !(*expiry = strndup(at, (size_t)(quote - at))))
    goto out;
  *token = value;
  handed = true;
out:
  free(content);
  return handed;
}

// Calls the dispatcher from the event loop (not from inside JS): as a callback, so that promises
// it settles run their reactions before the loop goes on. (id, errno), and for a watch whose
// release handed its waiter the lease, (id, 0, its token, its expiry's text).
static void notify_deliver(notify_env *n, notify_watch *w, int err) {
  napi_env env = n->env;
  char *expiry = NULL;
  uint64_t token = 0;
  bool handed = err == 0 && w->handoff != NULL && handoff_check(w->handoff, &token, &expiry);
  napi_handle_scope scope;
  if (napi_open_handle_scope(env, &scope) != napi_ok) {
    free(expiry);
    return;
  }
  napi_value dispatcher, global, args[4];
  // No JS caller to throw to: a failure becomes an uncaught exception.
  if (napi_get_reference_value(env, n->dispatcher, &dispatcher) != napi_ok ||
      napi_get_global(env, &global) != napi_ok || napi_create_uint32(env, w->id, &args[0]) != napi_ok ||
      napi_create_int32(env, err, &args[1]) != napi_ok ||
      (handed && (napi_create_bigint_uint64(env, token, &args[2]) != napi_ok ||
                  napi_create_string_utf8(env, expiry, NAPI_AUTO_LENGTH, &args[3]) != napi_ok)) ||
      napi_make_callback(env, n->async, global, dispatcher, handed ? 4 : 2, args, NULL) != napi_ok) {
    napi_value exception;
    if (napi_get_and_clear_last_exception(env, &exception) == napi_ok) napi_fatal_exception(env, exception);
  }
  napi_close_handle_scope(env, scope);
  free(expiry);
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
  handoff_free(w->handoff);
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
    handoff_free(w->handoff);
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
static int notify_add(notify_env *n, int fd, uint32_t id, handoff_probe *handoff, bool thread_later, bool writers_only) {
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
  w->handoff = handoff;
  w->thread_later = thread_later;
  n->watches = w;
  return 1;
}

// watchInit(dispatcher, drain): this environment's (id, errno) callback for finished watches, and
// what the addon calls after each batch of reports, once they (and their microtasks) have run.
static napi_value watch_init(napi_env env, napi_callback_info info) {
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

// watchUnlock's optional probe, its arguments fd, record, livePrefix, liveSuffix, before, between,
// after, in *out (NULL when fd is undefined: no probe). false with an exception pending if it is
// malformed.
#define PROBE_ARGS 7
static bool handoff_arg(napi_env env, const napi_value *argv, handoff_probe **out) {
  napi_valuetype type;
  *out = NULL;
  NAPI_CHECK_OR(env, napi_typeof(env, argv[0], &type), return false);
  if (type == napi_undefined) return true;
  handoff_probe *p = calloc(1, sizeof *p);
  if (!p) {
    throw_errno(env, ENOMEM, "watchUnlock", NULL);
    return false;
  }
  char **strings[PROBE_ARGS - 1] = {&p->record, &p->live_prefix, &p->live_suffix,
                                    &p->before, &p->between,     &p->after};
  bool ok = get_fd(env, argv[0], &p->wait_fd);
  for (int i = 0; ok && i < PROBE_ARGS - 1; i++) {
    ok = get_optional_string(env, argv[1 + i], "watchUnlock", strings[i]);
    if (ok && *strings[i] == NULL) {
      napi_throw_type_error(env, NULL, "watchUnlock: a hand-off probe's fields are strings");
      ok = false;
    }
  }
  struct stat mine;
  int fault_errno;
  // A .wait that cannot be looked at now will not be later: the watch then asks no probe, and the
  // waiter checks for itself (its report says "no hand-off").
  if (ok && STEP("handoff.fstat", fstat(p->wait_fd, &mine)) != 0) {
    handoff_free(p);
    return true;
  }
  if (!ok) {
    handoff_free(p);
    return false;
  }
  p->wait_dev = mine.st_dev;
  p->wait_ino = mine.st_ino;
  // before, a uint64's 20 digits, between, the longest RFC 3339 text the lease reads (40), after.
  p->longest = strlen(p->before) + 20 + strlen(p->between) + 40 + strlen(p->after);
  *out = p;
  return true;
}

static napi_value watch_unlock(napi_env env, napi_callback_info info) {
  OPTIONAL_ARGS(3 + PROBE_ARGS);
  if (argc < 2) {
    napi_throw_type_error(env, NULL, "missing argument");
    return NULL;
  }
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
  handoff_probe *handoff;
  if (!handoff_arg(env, argv + 3, &handoff)) return NULL;
  char *path = get_string(env, argv[0], "open");
  if (!path) {
    handoff_free(handoff);
    return NULL;
  }
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
    int watching = notify_add(e->notify, fd, id, handoff, !cue_only, mode == WATCH_WRITERS_ONLY);
    if (watching == 1) handoff = NULL; // the watch's now
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
  handoff_free(handoff); // no inotify side to ask it: the pool thread reports (id, errno) only
  free(path);
  return result;
}

// ---------------------------------------------------------------------------------------------
// Fault control (tests only)

// setFault(step, kind, value, count): kind "errno" (value = errno number), "kill", "stop",
// "sleep" (value = ms); count = how many executions (-1 = all).
static napi_value set_fault(napi_env env, napi_callback_info info) {
  ARGS(4);
  int32_t value = 0, count = 1;
  if (napi_get_value_int32(env, argv[2], &value) != napi_ok || napi_get_value_int32(env, argv[3], &count) != napi_ok) {
    napi_throw_type_error(env, NULL, "setFault: value and count must be numbers");
    return NULL;
  }
  char *step = get_string(env, argv[0], "setFault");
  if (!step) return NULL;
  char *kind = get_string(env, argv[1], "setFault");
  if (!kind) {
    free(step);
    return NULL;
  }
  int k = !kind ? FAULT_NONE
          : strcmp(kind, "errno") == 0 ? FAULT_ERRNO
          : strcmp(kind, "kill") == 0  ? FAULT_KILL
          : strcmp(kind, "stop") == 0  ? FAULT_STOP
          : strcmp(kind, "sleep") == 0 ? FAULT_SLEEP
                                       : FAULT_NONE;
  if (!step || k == FAULT_NONE || strlen(step) >= sizeof faults[0].step || count == 0) {
    free(step);
    free(kind);
    napi_throw_range_error(env, NULL, "setFault(step, 'errno'|'kill'|'stop'|'sleep', value, count)");
    return NULL;
  }
  pthread_mutex_lock(&fault_lock);
  int slot = -1;
  for (int i = 0; i < MAX_FAULTS; i++) {
    if (faults[i].kind == FAULT_NONE && slot < 0) slot = i;
  }
  if (slot >= 0) {
    snprintf(faults[slot].step, sizeof faults[slot].step, "%s", step);
    faults[slot].kind = k;
    faults[slot].value = value;
    faults[slot].count = count;
    __atomic_add_fetch(&fault_count, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&fault_lock);
  free(step);
  free(kind);
  if (slot < 0) napi_throw_range_error(env, NULL, "too many faults set");
  return NULL;
}

static napi_value clear_faults(napi_env env, napi_callback_info info) {
  (void)info;
  pthread_mutex_lock(&fault_lock);
  memset(faults, 0, sizeof faults);
  __atomic_store_n(&fault_count, 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&fault_lock);
  return NULL;
}

// ---------------------------------------------------------------------------------------------

static napi_value init(napi_env env, napi_value exports) {
  process_forked(); // every environment (worker thread) of the process reads the same pid
  if (!__atomic_exchange_n(&process_id_watched, 1, __ATOMIC_ACQ_REL)) pthread_atfork(NULL, NULL, process_forked);
  temp_counter = (uint32_t)time(NULL) ^ ((uint32_t)process_id << 16);
  env_state *s = calloc(1, sizeof *s);
  if (!s) return throw_errno(env, ENOMEM, "init", NULL);
  NAPI_CHECK_OR(env, napi_set_instance_data(env, s, NULL, NULL), free(s); return NULL);
  NAPI_CHECK(env, napi_add_env_cleanup_hook(env, state_cleanup, s));
  napi_property_descriptor methods[] = {
      {"lockTransition", NULL, lock_transition, NULL, NULL, NULL, napi_default, NULL},
      {"readRecord", NULL, read_record, NULL, NULL, NULL, napi_default, NULL},
      {"probeLive", NULL, probe_live, NULL, NULL, NULL, napi_default, NULL},
      {"closeFd", NULL, close_fd, NULL, NULL, NULL, napi_default, NULL},
      {"unlockTransition", NULL, unlock_transition, NULL, NULL, NULL, napi_default, NULL},
      {"removeFile", NULL, remove_file, NULL, NULL, NULL, napi_default, NULL},
      {"fsType", NULL, fs_type, NULL, NULL, NULL, napi_default, NULL},
      {"lockFile", NULL, lock_file, NULL, NULL, NULL, napi_default, NULL},
      {"sameFile", NULL, same_file, NULL, NULL, NULL, napi_default, NULL},
      {"readLockData", NULL, read_lock_data, NULL, NULL, NULL, napi_default, NULL},
      {"writeLockData", NULL, write_lock_data, NULL, NULL, NULL, napi_default, NULL},
      {"watchInit", NULL, watch_init, NULL, NULL, NULL, napi_default, NULL},
      {"watchUnlock", NULL, watch_unlock, NULL, NULL, NULL, napi_default, NULL},
      {"commit", NULL, commit_async, NULL, NULL, NULL, napi_default, NULL},
      {"commitSync", NULL, commit_sync, NULL, NULL, NULL, napi_default, NULL},
      {"releaseHandOff", NULL, release_hand_off, NULL, NULL, NULL, napi_default, NULL},
      {"setFault", NULL, set_fault, NULL, NULL, NULL, napi_default, NULL},
      {"clearFaults", NULL, clear_faults, NULL, NULL, NULL, napi_default, NULL},
  };
  NAPI_CHECK(env, napi_define_properties(env, exports, sizeof methods / sizeof methods[0], methods));
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
