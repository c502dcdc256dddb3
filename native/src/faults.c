#define _GNU_SOURCE
#include "faults.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "errors.h"

enum { FAULT_NONE = 0, FAULT_ERRNO, FAULT_KILL, FAULT_STOP, FAULT_SLEEP };
typedef struct {
  char step[32];
  int kind;
  int value; // errno for FAULT_ERRNO, milliseconds for FAULT_SLEEP
  int count; // executions left to fault; -1 = every time
} fault_t;

#define MAX_FAULTS 32
static fault_t faults[MAX_FAULTS];
static int fault_count = 0; // read without the lock as a fast path: no faults, no locking
static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;

// See faults.h.
int fault_at(const char *step) {
  if (__atomic_load_n(&fault_count, __ATOMIC_ACQUIRE) == 0) return 0;
  int kind = FAULT_NONE, value = 0;
  pthread_mutex_lock(&fault_lock);
  for (int i = 0; i < MAX_FAULTS; i++) {
    fault_t *f = &faults[i];
    if (f->kind == FAULT_NONE || strcmp(f->step, step) != 0) continue;
    kind = f->kind;
    value = f->value;
    if (f->count > 0 && --f->count == 0) {
      f->kind = FAULT_NONE;
      __atomic_sub_fetch(&fault_count, 1, __ATOMIC_RELEASE);
    }
    break;
  }
  pthread_mutex_unlock(&fault_lock);
  switch (kind) {
    case FAULT_ERRNO: return value;
    case FAULT_KILL: raise(SIGKILL); return 0;
    case FAULT_STOP: raise(SIGSTOP); return 0;
    case FAULT_SLEEP: {
      struct timespec ts = {value / 1000, (long)(value % 1000) * 1000000L};
      while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
      return 0;
    }
    default: return 0;
  }
}

// setFault(step, kind, value, count): kind "errno" (value = errno number), "kill", "stop",
// "sleep" (value = ms); count = how many executions (-1 = all).
napi_value set_fault(napi_env env, napi_callback_info info) {
  ARGS(4);
  int32_t value = 0, count = 1;
  if (napi_get_value_int32(env, argv[2], &value) != napi_ok || napi_get_value_int32(env, argv[3], &count) != napi_ok) {
    napi_throw_type_error(env, NULL, "setFault: value and count must be numbers");
    return NULL;
  }
  char *step = get_string(env, argv[0], "setFault", NULL);
  if (!step) return NULL;
  char *kind = get_string(env, argv[1], "setFault", NULL);
  if (!kind) {
    free(step);
    return NULL;
  }
  int k = !kind ? FAULT_NONE
          : strcmp(kind, "errno") == 0 ? FAULT_ERRNO
          : strcmp(kind, "kill") == 0  ? FAULT_KILL
          : strcmp(kind, "stop") == 0  ? FAULT_STOP
          : strcmp(kind, "sleep") == 0 ? FAULT_SLEEP
                                       : FAULT_NONE;
  if (!step || k == FAULT_NONE || strlen(step) >= sizeof faults[0].step || count == 0) {
    free(step);
    free(kind);
    napi_throw_range_error(env, NULL, "setFault(step, 'errno'|'kill'|'stop'|'sleep', value, count)");
    return NULL;
  }
  pthread_mutex_lock(&fault_lock);
  int slot = -1;
  for (int i = 0; i < MAX_FAULTS; i++) {
    if (faults[i].kind == FAULT_NONE && slot < 0) slot = i;
  }
  if (slot >= 0) {
    snprintf(faults[slot].step, sizeof faults[slot].step, "%s", step);
    faults[slot].kind = k;
    faults[slot].value = value;
    faults[slot].count = count;
    __atomic_add_fetch(&fault_count, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&fault_lock);
  free(step);
  free(kind);
  if (slot < 0) napi_throw_range_error(env, NULL, "too many faults set");
  return NULL;
}

napi_value clear_faults(napi_env env, napi_callback_info info) {
  (void)info;
  pthread_mutex_lock(&fault_lock);
  memset(faults, 0, sizeof faults);
  __atomic_store_n(&fault_count, 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&fault_lock);
  return NULL;
}
