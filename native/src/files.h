// The lease's files, one synchronous non-blocking system call (or a few) per call: the transition
// lock, the record's read, liveness probes, closes, removals, a waiter's .wait file and the wait
// queue's bytes in the transition lock file. What the bytes mean is JavaScript's.
#ifndef FLOCKLEASE_FILES_H
#define FLOCKLEASE_FILES_H

#include <node_api.h>
#include <stdbool.h>
#include <sys/stat.h>

// Every lease file is opened here: never following a symlink (a planted link is an error, not a
// redirect), close-on-exec (a child must not inherit a lease), and only if it is a regular file
// (O_NONBLOCK in `flags` keeps a FIFO from hanging the open). The fd, or -1 with *err (an errno, or
// FTYPE_ERROR) and *syscall set. `st`, if given, receives its fstat. `step` names the open's fault
// point.
int open_lease_file(const char *path, int flags, const char *step, struct stat *st, int *err, const char **syscall);

napi_value lock_transition(napi_env env, napi_callback_info info);
napi_value read_record(napi_env env, napi_callback_info info);
napi_value probe_live(napi_env env, napi_callback_info info);
napi_value close_fd(napi_env env, napi_callback_info info);
napi_value unlock_transition(napi_env env, napi_callback_info info);
napi_value remove_file(napi_env env, napi_callback_info info);
napi_value same_file(napi_env env, napi_callback_info info);
napi_value fs_type(napi_env env, napi_callback_info info);
napi_value lock_file(napi_env env, napi_callback_info info);
napi_value read_lock_data(napi_env env, napi_callback_info info);
napi_value write_lock_data(napi_env env, napi_callback_info info);

#endif
