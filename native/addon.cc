// Module init: the Tensor class, tensor constructors, file reads and the op set.
#include <napi.h>

#include "file_read.h"
#include "ops.h"
#include "tensor.h"
#include "thread_pool.h"

#ifdef MSTAR_WITH_CUDA
extern "C" int mstarCudaDeviceCount(char* error, int errorLen);
#endif

namespace mstar {
namespace {

// buildInfo(): what this binary was built with, for `mstar doctor` and the device choice.
Napi::Value BuildInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
#ifdef MSTAR_WITH_CUDA
  o["cuda"] = true;
#else
  o["cuda"] = false;
#endif
  o["cpuThreads"] = poolThreads();
  return o;
}

// cudaDevices(): {count} or {count: 0, error} — never throws, so a GPU-less machine can ask.
Napi::Value CudaDevices(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
#ifdef MSTAR_WITH_CUDA
  char error[256] = {0};
  int n = mstarCudaDeviceCount(error, sizeof error);
  o["count"] = n < 0 ? 0 : n;
  if (n < 0) o["error"] = std::string(error);
#else
  o["count"] = 0;
  o["error"] = "this build of the addon has no CUDA backend (nvcc was not found when it was built)";
#endif
  return o;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports["Tensor"] = Tensor::Init(env);
  exports["empty"] = Napi::Function::New<Empty>(env, "empty");
  exports["zeros"] = Napi::Function::New<Zeros>(env, "zeros");
  exports["fromArray"] = Napi::Function::New<FromArray>(env, "fromArray");
  exports["readInto"] = Napi::Function::New<ReadInto>(env, "readInto");
  exports["buildInfo"] = Napi::Function::New<BuildInfo>(env, "buildInfo");
  exports["cudaDevices"] = Napi::Function::New<CudaDevices>(env, "cudaDevices");
  RegisterOps(env, exports);
  RegisterLoraOps(env, exports);
  return exports;
}

}  // namespace
}  // namespace mstar

static Napi::Object InitModule(Napi::Env env, Napi::Object exports) { return mstar::Init(env, exports); }

NODE_API_MODULE(mstar, InitModule)
