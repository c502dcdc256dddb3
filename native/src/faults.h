// Fault points (tests only): each system-call step has a name; setFault(name, action, count) makes
// the next `count` executions of that step fail with an errno, SIGKILL or SIGSTOP the process, or
// stall for some milliseconds, before the call is made.
#ifndef FLOCKLEASE_FAULTS_H
#define FLOCKLEASE_FAULTS_H

#include <errno.h>
#include <node_api.h>

// 0 to go ahead with the step, or the errno it must fail with.
int fault_at(const char *step);

// Runs a syscall expression unless the step is faulted; on a fault, sets errno and yields -1. The
// calling function declares `int fault_errno`.
#define STEP(name, expr) (fault_errno = fault_at(name), fault_errno ? (errno = fault_errno, -1) : (expr))

napi_value set_fault(napi_env env, napi_callback_info info);
napi_value clear_faults(napi_env env, napi_callback_info info);

#endif
