// CUDA graphs from JS: captureGraph(fn) records the ops fn enqueues on the stream and
// returns a Graph whose replay() launches them again, asynchronously.
#pragma once
#include <napi.h>

namespace mstar {
void RegisterGraph(Napi::Env env, Napi::Object exports);
}
