// The watch: waking JavaScript when a lock it waits for is let go (inotify on the event loop, and a
// pool thread blocked in flock where that is not enough; see watch.c).
#ifndef FLOCKLEASE_WATCH_H
#define FLOCKLEASE_WATCH_H

#include <node_api.h>

napi_value watch_init(napi_env env, napi_callback_info info);
napi_value watch_unlock(napi_env env, napi_callback_info info);

#endif
