// Each environment's state (the main thread's, and each worker thread's): its watches (set up by
// watchInit) and the lock descriptors it holds for JavaScript (transition locks, waiters' .wait
// files, generations' .live files). A worker thread can end without the process ending, and its
// leases must end with it, as a process's end when it dies: a cleanup hook closes whatever the
// environment still holds, which drops those flocks. Only the environment's own thread touches it.
#ifndef FLOCKLEASE_ENV_H
#define FLOCKLEASE_ENV_H

#include <node_api.h>
#include <stddef.h>

struct watch_env;

typedef struct {
  struct watch_env *watch;
  int *held;
  size_t held_count, held_capacity;
} env_state;

// This environment's state (NULL if it has none).
env_state *state_of(napi_env env);

// Records `fd` as held by this environment. Best effort: without memory it is simply not closed
// at teardown (the lock works the same).
void held_add(napi_env env, int fd);

// Forgets `fd` (it is being closed).
void held_remove(napi_env env, int fd);

// Sets up this environment's state, with a cleanup hook that closes what it still holds. NULL with
// an exception pending on failure.
napi_value env_init(napi_env env);

#endif
