#define _GNU_SOURCE
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "args.h"
#include "env.h"
#include "errors.h"
#include "faults.h"

#define MAX_RECORD_BYTES (64 * 1024)
// A first read's buffer: a record with names of usual length fits, and a queue of a few dozen
// waiters; a bigger file costs an fstat and a second read.
#define RECORD_READ_BYTES 4096

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

int open_lease_file(const char *path, int flags, const char *step, struct stat *st, int *err, const char **syscall) {
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
// lockTransition(path) → fd, -1 when another holder has it, -2 when the path no longer names
// the inode we locked (pruned meanwhile: the caller retries at once).
napi_value lock_transition(napi_env env, napi_callback_info info) {
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

// readRecord(path) → the file's text when it is all ASCII (the lease's own records: JavaScript then
// makes no Buffer and runs no decoder), else a Buffer
// of its bytes (decoded, and validated as UTF-8, in JavaScript); undefined when there is no record.
napi_value read_record(napi_env env, napi_callback_info info) {
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

napi_value probe_live(napi_env env, napi_callback_info info) {
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
napi_value close_fd(napi_env env, napi_callback_info info) {
  return close_lock(env, info, "close", true);
}

// unlockTransition(fd): the transition lock's, a fault point of its own ("unlock"): a release
// closes its .live only after it ("close"), and each can be faulted alone. Closed at once: its
// waiters look again on a short timer of their own (transition.ts), which covers that gap.
napi_value unlock_transition(napi_env env, napi_callback_info info) {
  return close_lock(env, info, "unlock", false);
}

// removeFile(path): unlink; a missing file is not an error.
napi_value remove_file(napi_env env, napi_callback_info info) {
  PATH_ARGS(1, 0, "unlink");
  int fault_errno;
  if (STEP("unlink", unlink(path)) != 0 && errno != ENOENT) throw_errno(env, errno, "unlink", path);
  free(path);
  return NULL;
}

// sameFile(fd, path) → whether `path` (not followed) names the file open as `fd`: a waiter asks
// whether its flocked .wait file has been handed over as the new generation's .live.
napi_value same_file(napi_env env, napi_callback_info info) {
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
napi_value fs_type(napi_env env, napi_callback_info info) {
  PATH_ARGS(1, 0, "statfs");
  struct statfs st;
  int fault_errno;
  napi_value result = NULL;
  if (STEP("statfs", statfs(path, &st)) != 0) throw_errno(env, errno, "statfs", path);
  else result = int_value(env, (int64_t)(uint32_t)st.f_type);
  free(path);
  return result;
}
// lockFile(path) → fd of a newly created (or reused) file we now hold exclusively, or -1 when
// someone else holds it. For a waiter's `<safeID>.<ticket>.wait` liveness file.
napi_value lock_file(napi_env env, napi_callback_info info) {
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
napi_value read_lock_data(napi_env env, napi_callback_info info) {
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

// Replaces the transition lock file's content (the wait queue) with `length` bytes of `text`: 0, or
// the errno with *call naming the call.
static int write_queue(int fd, const char *text, size_t length, const char **call) {
  int fault_errno;
  size_t done = 0;
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
napi_value write_lock_data(napi_env env, napi_callback_info info) {
  ARGS(2);
  int32_t fd;
  if (!get_fd(env, argv[0], &fd)) return NULL;
  size_t length;
  char *text = get_string(env, argv[1], "pwrite", &length);
  if (!text) return NULL;
  const char *call;
  int err = write_queue(fd, text, length, &call);
  free(text);
  return err != 0 ? throw_errno(env, err, call, NULL) : NULL;
}
