// The JS face of fences (gpu::Fence): fence() makes one; fence.record() marks the ops
// enqueued on the stream so far and returns at once; fence.wait() returns once they ran
// (at once if never recorded); fence.done() says whether they ran, without waiting. With
// tensor.copyToAsync(pinned), a step's results come back while the host already enqueues
// the next step, and the engine thread polls for them instead of blocking.
#include "fence.h"

#include <memory>

#include "gpu.h"
#include "tensor.h"

namespace mstar {
namespace {

class Fence : public Napi::ObjectWrap<Fence> {
 public:
  static Napi::Function Init(Napi::Env env) {
    return DefineClass(env, "Fence", {
      InstanceMethod<&Fence::Record>("record"),
      InstanceMethod<&Fence::Wait>("wait"),
      InstanceMethod<&Fence::Done>("done"),
      InstanceMethod<&Fence::Dispose>("dispose"),
    });
  }

  explicit Fence(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Fence>(info), fence_(new gpu::Fence) {}

 private:
  std::unique_ptr<gpu::Fence> fence_;

  gpu::Fence& live(Napi::Env env) const {
    if (!fence_) throw Napi::Error::New(env, "Fence was disposed");
    return *fence_;
  }
  Napi::Value Record(const Napi::CallbackInfo& info) {
    gpu::Fence& f = live(info.Env());
    withErrors(info.Env(), "fence.record", [&] { f.record(); });
    return info.Env().Undefined();
  }
  Napi::Value Wait(const Napi::CallbackInfo& info) {
    gpu::Fence& f = live(info.Env());
    withErrors(info.Env(), "fence.wait", [&] { f.wait(); });
    return info.Env().Undefined();
  }
  Napi::Value Done(const Napi::CallbackInfo& info) {
    gpu::Fence& f = live(info.Env());
    bool done = false;
    withErrors(info.Env(), "fence.done", [&] { done = f.done(); });
    return Napi::Boolean::New(info.Env(), done);
  }
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    fence_.reset();
    return info.Env().Undefined();
  }
};

// info.Data(): this env's Fence constructor.
Napi::Value MakeFence(const Napi::CallbackInfo& info) {
  return static_cast<Napi::FunctionReference*>(info.Data())->New({});
}

}  // namespace

void RegisterFence(Napi::Env env, Napi::Object exports) {
  auto* ctor = new Napi::FunctionReference(Napi::Persistent(Fence::Init(env)));
  env.AddCleanupHook([ctor] { delete ctor; });
  exports["fence"] = Napi::Function::New<MakeFence>(env, "fence", ctor);
}

}  // namespace mstar
