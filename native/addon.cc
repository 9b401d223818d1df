// Module init: the Tensor class, tensor constructors, file reads and the op set.
#include <napi.h>

#include "cublaslt.h"
#include "fence.h"
#include "file_read.h"
#include "gpu.h"
#include "graph.h"
#include "ops.h"
#include "scatter.h"
#include "tensor.h"
#include "thread_pool.h"

namespace mstar {
namespace {

// buildInfo(): what this binary was built with, for `mstar doctor` and the device choice.
Napi::Value BuildInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
#ifdef MSTAR_WITH_CUDA
  o["cuda"] = true;
  o["cudaVersion"] = MSTAR_CUDA_VERSION;              // nvcc's, e.g. "13.0.88"
  o["cudaArchitectures"] = MSTAR_CUDA_ARCHITECTURES;  // CMake's list, comma-separated
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
  std::string error;
  int n = gpu::deviceCount(&error);
  o["count"] = n < 0 ? 0 : n;
  if (n < 0) o["error"] = error;
  return o;
}

// cudaMemInfo(): {free, total} bytes of the device; throws where there is none.
Napi::Value CudaMemInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  size_t freeBytes = 0, totalBytes = 0;
  try {
    gpu::memInfo(&freeBytes, &totalBytes);
  } catch (const gpu::Error& e) {
    throw Napi::Error::New(env, std::string("cudaMemInfo: ") + e.what());
  }
  Napi::Object o = Napi::Object::New(env);
  o["free"] = double(freeBytes);
  o["total"] = double(totalBytes);
  return o;
}

// cudaReadBandwidth(bytes, passes): GB/s of the best timed read of a device buffer of that
// size (gpu::readBandwidth); throws where there is no device.
Napi::Value CudaReadBandwidth(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 2 || !info[0].IsNumber() || !info[1].IsNumber())
    throw Napi::TypeError::New(env, "cudaReadBandwidth(bytes, passes): two numbers");
  const double bytes = info[0].As<Napi::Number>().DoubleValue();
  const double passes = info[1].As<Napi::Number>().DoubleValue();
  if (!(bytes >= 16 && bytes <= 1e12) || !(passes >= 1 && passes <= 1000) || passes != double(int(passes)))
    throw Napi::RangeError::New(env, "cudaReadBandwidth: bytes in [16, 1e12], passes an integer in [1, 1000]");
  double gbps = 0;
  withErrors(env, "cudaReadBandwidth", [&] { gbps = gpu::readBandwidth(size_t(bytes), int(passes)); });
  return Napi::Number::New(env, gbps);
}

// cudaLibraries(): what was loaded at run time: {cublasLt: {loaded, path?, version?, error?}}.
// Asking loads them (once); never throws.
Napi::Value CudaLibraries(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object lt = Napi::Object::New(env);
#ifdef MSTAR_WITH_CUDA
  const cublaslt::Status& s = cublaslt::status();
  lt["loaded"] = s.loaded;
  if (s.loaded) {
    lt["path"] = s.path;
    lt["version"] = double(s.version);
  } else {
    lt["error"] = s.error;
  }
#else
  lt["loaded"] = false;
  lt["error"] = "this build of the addon has no CUDA backend (nvcc was not found when it was built)";
#endif
  Napi::Object o = Napi::Object::New(env);
  o["cublasLt"] = lt;
  return o;
}

// gemmTuning(on): whether a GEMM shape of up to gemmTunedRows rows met for the first time
// (outside a capture) picks cuBLASLt's algorithm by timing its candidates (cublaslt::setTuning).
Napi::Value GemmTuning(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsBoolean()) throw Napi::TypeError::New(env, "gemmTuning(on): one boolean");
  cublaslt::setTuning(info[0].As<Napi::Boolean>().Value());
  return env.Undefined();
}

// gemmRowBuckets(maxRows): the row counts above gemmTunedRows whose GEMMs make cuBLASLt plans,
// up to the one serving maxRows (cublaslt::rowBuckets).
Napi::Value GemmRowBuckets(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "gemmRowBuckets(maxRows): one number");
  const std::vector<int64_t> buckets = cublaslt::rowBuckets(info[0].As<Napi::Number>().Int64Value());
  Napi::Array out = Napi::Array::New(env, buckets.size());
  for (size_t i = 0; i < buckets.size(); ++i) out[uint32_t(i)] = Napi::Number::New(env, double(buckets[i]));
  return out;
}

// synchronize(): waits for every op enqueued on the CUDA stream (a no-op without CUDA).
Napi::Value Synchronize(const Napi::CallbackInfo& info) {
  withErrors(info.Env(), "synchronize", [] { gpu::synchronize(); });
  return info.Env().Undefined();
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports["Tensor"] = Tensor::Init(env);
  exports["empty"] = Napi::Function::New<Empty>(env, "empty");
  exports["zeros"] = Napi::Function::New<Zeros>(env, "zeros");
  exports["fromArray"] = Napi::Function::New<FromArray>(env, "fromArray");
  exports["readInto"] = Napi::Function::New<ReadInto>(env, "readInto");
  exports["readIntoAsync"] = Napi::Function::New<ReadIntoAsync>(env, "readIntoAsync");
  exports["buildInfo"] = Napi::Function::New<BuildInfo>(env, "buildInfo");
  exports["cudaDevices"] = Napi::Function::New<CudaDevices>(env, "cudaDevices");
  exports["cudaLibraries"] = Napi::Function::New<CudaLibraries>(env, "cudaLibraries");
  exports["cudaMemInfo"] = Napi::Function::New<CudaMemInfo>(env, "cudaMemInfo");
  exports["cudaReadBandwidth"] = Napi::Function::New<CudaReadBandwidth>(env, "cudaReadBandwidth");
  exports["gemmTuning"] = Napi::Function::New<GemmTuning>(env, "gemmTuning");
  exports["gemmRowBuckets"] = Napi::Function::New<GemmRowBuckets>(env, "gemmRowBuckets");
  exports["gemmTunedRows"] = Napi::Number::New(env, double(cublaslt::kTunedRows));
  exports["synchronize"] = Napi::Function::New<Synchronize>(env, "synchronize");
  RegisterOps(env, exports);
  RegisterLoraOps(env, exports);
  RegisterUpload(env, exports);
  RegisterGraph(env, exports);
  RegisterFence(env, exports);
  RegisterScatter(env, exports);
  return exports;
}

}  // namespace
}  // namespace mstar

static Napi::Object InitModule(Napi::Env env, Napi::Object exports) { return mstar::Init(env, exports); }

NODE_API_MODULE(mstar, InitModule)
