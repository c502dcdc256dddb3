// flocklease's I/O binding (Node-API): the system calls a lease makes, the commit (the write side
// of a transition as one step: temp file, fsync, rename, directory fsync) and the watch (waking
// the event loop when a lock is let go). The lease's rules (its files' names and formats, tokens,
// the wait queue, who is handed the lease) are all in TypeScript (src/flock/): this side moves
// bytes and descriptors, and reports errors as Node's fs does.
//
// Why native: the commit runs on a libuv worker thread as one step instead of a threadpool round
// trip per system call, the cheap non-blocking calls (open, LOCK_NB flock, fstat, a small read) are
// synchronous, as the spec allows, and the watch needs inotify and a thread blocked in flock.
//
// Every descriptor is opened O_CLOEXEC (a child must not inherit a lease) and every lease file
// O_NOFOLLOW (a planted symlink is an error, not a redirect). Every system-call step is a named
// fault point for the tests (faults.h).

#include <node_api.h>

#include "commit.h"
#include "env.h"
#include "errors.h"
#include "faults.h"
#include "files.h"
#include "watch.h"

static napi_value init(napi_env env, napi_value exports) {
  commit_process_init();
  if (!env_init(env)) return NULL;
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
      {"setFault", NULL, set_fault, NULL, NULL, NULL, napi_default, NULL},
      {"clearFaults", NULL, clear_faults, NULL, NULL, NULL, napi_default, NULL},
  };
  NAPI_CHECK(env, napi_define_properties(env, exports, sizeof methods / sizeof methods[0], methods));
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
