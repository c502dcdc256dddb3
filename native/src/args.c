#include "args.h"

#include <errno.h>
#include <stdlib.h>

char *get_string(napi_env env, napi_value value, const char *what, size_t *length) {
  size_t size;
  if (napi_get_value_string_utf8(env, value, NULL, 0, &size) != napi_ok) {
    napi_throw_type_error(env, NULL, "expected a string argument");
    return NULL;
  }
  char *buffer = malloc(size + 1);
  if (!buffer) {
    throw_errno(env, ENOMEM, what, NULL);
    return NULL;
  }
  NAPI_CHECK_OR(env, napi_get_value_string_utf8(env, value, buffer, size + 1, &size), free(buffer); return NULL);
  if (length) *length = size;
  return buffer;
}

bool get_optional_string(napi_env env, napi_value value, const char *what, char **out) {
  napi_valuetype type;
  *out = NULL;
  NAPI_CHECK_OR(env, napi_typeof(env, value, &type), return false);
  if (type == napi_undefined) return true;
  *out = get_string(env, value, what, NULL);
  return *out != NULL;
}

bool get_fd(napi_env env, napi_value value, int32_t *fd) {
  if (napi_get_value_int32(env, value, fd) != napi_ok || *fd < 0) {
    napi_throw_type_error(env, NULL, "expected a file descriptor");
    return false;
  }
  return true;
}

napi_value int_value(napi_env env, int64_t n) {
  napi_value value;
  NAPI_CHECK(env, napi_create_int64(env, n, &value));
  return value;
}

napi_value bool_value(napi_env env, bool b) {
  napi_value value;
  NAPI_CHECK(env, napi_get_boolean(env, b, &value));
  return value;
}

napi_value undefined_value(napi_env env) {
  napi_value value;
  NAPI_CHECK(env, napi_get_undefined(env, &value));
  return value;
}
