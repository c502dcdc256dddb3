// Errors shaped like Node's own fs errors: message "CODE: description, syscall 'path'" and
// properties code, errno (negative, as libuv reports it), syscall, path. And the check every
// Node-API call gets.
#ifndef FLOCKLEASE_ERRORS_H
#define FLOCKLEASE_ERRORS_H

#include <node_api.h>

#define FTYPE_ERROR (-1000) // our code for "not a regular file" (reported as EFTYPE)

// A failed Node-API call: make sure an exception is pending (the call may have set one) so the
// JS caller sees an error, never a silently wrong value.
void throw_napi_failure(napi_env env, const char *call);

// Every napi_status is checked: on failure, throw (if nothing is pending yet) and bail out.
#define NAPI_CHECK_OR(env, call, on_failure) \
  do {                                       \
    if ((call) != napi_ok) {                 \
      throw_napi_failure(env, #call);        \
      on_failure;                            \
    }                                        \
  } while (0)
#define NAPI_CHECK(env, call) NAPI_CHECK_OR(env, call, return NULL)

// The error for `err` (an errno, or FTYPE_ERROR); NULL (with an exception pending) if the error
// object itself could not be made.
napi_value make_error(napi_env env, int err, const char *syscall, const char *path);

// Throws make_error's error; returns NULL.
napi_value throw_errno(napi_env env, int err, const char *syscall, const char *path);

#endif
