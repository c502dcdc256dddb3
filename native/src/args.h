// The arguments of a call from JavaScript, and the plain values it returns. Every function here
// returns NULL (or false) with an exception pending on failure.
#ifndef FLOCKLEASE_ARGS_H
#define FLOCKLEASE_ARGS_H

#include <node_api.h>
#include <stdbool.h>
#include <stdint.h>

#include "errors.h"

// A JS string as a malloc'd C string; NULL with an exception pending (not a string: TypeError;
// no memory: ENOMEM naming `what`). `*length`, if given, receives its length in bytes.
char *get_string(napi_env env, napi_value value, const char *what, size_t *length);

// An optional string argument: *out is NULL when it is undefined. false with an exception pending
// on any other failure (`what` names the call for ENOMEM).
bool get_optional_string(napi_env env, napi_value value, const char *what, char **out);

bool get_fd(napi_env env, napi_value value, int32_t *fd);

napi_value int_value(napi_env env, int64_t n);
napi_value bool_value(napi_env env, bool b);
napi_value undefined_value(napi_env env);

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
#define OPTIONAL_ARGS(n) \
  size_t argc = n;       \
  napi_value argv[n];    \
  NAPI_CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL))

// ...and a path argument as `path` (malloc'd; the function frees it), for calls on one file.
#define PATH_ARGS(n, index, syscall)                              \
  ARGS(n);                                                        \
  char *path = get_string(env, argv[index], syscall, NULL);       \
  if (!path) return NULL

#endif
