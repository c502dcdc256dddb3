#define _GNU_SOURCE
#include "commit.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "env.h"
#include "errors.h"
#include "faults.h"
#include "files.h"

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

void commit_process_init(void) {
  process_forked(); // every environment (worker thread) of the process reads the same pid
  if (!__atomic_exchange_n(&process_id_watched, 1, __ATOMIC_ACQ_REL)) pthread_atfork(NULL, NULL, process_forked);
  temp_counter = (uint32_t)time(NULL) ^ ((uint32_t)process_id << 16);
}

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
  if (STEP("temp.fsync", fsync(temp_fd)) != 0) FAIL("fsync", temp_path);
  int closed = STEP("temp.close", close(temp_fd));
  if (fault_errno) close(temp_fd); // a real failing close(2) still frees the descriptor
  temp_fd = -1;
  if (closed != 0) FAIL("close", temp_path);
  if (STEP("rename", rename(temp_path, c->record_path)) != 0) FAIL("rename", c->record_path);
  temp_path[0] = 0; // renamed: nothing to clean up
  c->committed = 1;
  // The rename is durable only once the directory is. A failure from here on is reported with
  // `committed: true`: the record is already replaced, so the caller keeps the new state.
  dir_fd = STEP("dir.open", open(c->dir_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd < 0) FAIL("open", c->dir_path);
  if (STEP("dir.fsync", fsync(dir_fd)) != 0) FAIL("fsync", c->dir_path);
  if (STEP("dir.close", close(dir_fd)) != 0 && fault_errno) close(dir_fd); // read-only: a failing close loses nothing
  dir_fd = -1;
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
  char **fields[COMMIT_ARGS] = {&c->record_path, &c->dir_path,        NULL,
                                &c->live_path,   &c->adopt_from,      &c->remove_paths[0],
                                &c->remove_paths[1]};
  bool ok = true;
  for (int i = 0; ok && i < COMMIT_ARGS; i++) {
    if (fields[i]) ok = get_optional_string(env, argv[i], "commit", fields[i]);
  }
  // The data as bytes, whatever they are: its length is the string's, not up to a NUL.
  if (ok && !(c->data = get_string(env, argv[2], "commit", &c->data_length))) ok = false;
  if (ok && (!c->record_path || !c->dir_path)) {
    napi_throw_type_error(env, NULL, "commit plan needs record, dir and data strings");
    ok = false;
  }
  if (!ok) {
    commit_free(c);
    return NULL;
  }
  return c;
}

// commit(record, dir, data, live, adoptFrom, remove0, remove1) → Promise<{ liveFd, removalErrors }>,
// on a libuv worker thread.
napi_value commit_async(napi_env env, napi_callback_info info) {
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
napi_value commit_sync(napi_env env, napi_callback_info info) {
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
