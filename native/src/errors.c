#include "errors.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

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

void throw_napi_failure(napi_env env, const char *call) {
  bool pending = false;
  if (napi_is_exception_pending(env, &pending) == napi_ok && pending) return;
  const napi_extended_error_info *info = NULL;
  const char *why = "failed";
  if (napi_get_last_error_info(env, &info) == napi_ok && info && info->error_message) why = info->error_message;
  char message[256];
  snprintf(message, sizeof message, "flocklease addon: %s: %s", call, why);
  napi_throw_error(env, "ERR_FLOCKLEASE_NAPI", message);
}

napi_value make_error(napi_env env, int err, const char *syscall, const char *path) {
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

napi_value throw_errno(napi_env env, int err, const char *syscall, const char *path) {
  napi_value error = make_error(env, err, syscall, path);
  if (error) NAPI_CHECK(env, napi_throw(env, error));
  return NULL;
}
