// The commit: the write side of one transition, as one step (see commit.c). It writes whatever
// bytes JavaScript gives it; what they mean is JavaScript's.
#ifndef FLOCKLEASE_COMMIT_H
#define FLOCKLEASE_COMMIT_H

#include <node_api.h>

// Once per environment as the addon loads: the pid and counter its temp file names use.
void commit_process_init(void);

napi_value commit_async(napi_env env, napi_callback_info info);
napi_value commit_sync(napi_env env, napi_callback_info info);

#endif
