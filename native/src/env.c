#include "env.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "errors.h"

env_state *state_of(napi_env env) {
  env_state *s = NULL;
  return napi_get_instance_data(env, (void **)&s) == napi_ok ? s : NULL;
}

void held_add(napi_env env, int fd) {
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
void held_remove(napi_env env, int fd) {
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

napi_value env_init(napi_env env) {
  env_state *s = calloc(1, sizeof *s);
  if (!s) return throw_errno(env, ENOMEM, "init", NULL);
  NAPI_CHECK_OR(env, napi_set_instance_data(env, s, NULL, NULL), free(s); return NULL);
  NAPI_CHECK(env, napi_add_env_cleanup_hook(env, state_cleanup, s));
  napi_value ok;
  NAPI_CHECK(env, napi_get_boolean(env, true, &ok));
  return ok;
}
