// Registers the op set (the same names and signatures on every backend) on the exports.
#pragma once
#include <napi.h>

namespace mstar {
void RegisterOps(Napi::Env env, Napi::Object exports);
void RegisterLoraOps(Napi::Env env, Napi::Object exports);
void RegisterUpload(Napi::Env env, Napi::Object exports);
}
