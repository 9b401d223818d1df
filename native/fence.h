// Fences from JS: fence() returns an object with record(), wait() and dispose().
#pragma once
#include <napi.h>

namespace mstar {
void RegisterFence(Napi::Env env, Napi::Object exports);
}
