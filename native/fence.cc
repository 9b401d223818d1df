// The JS face of fences (gpu::Fence): fence() makes one; fence.record() marks the ops
// enqueued on the stream so far and returns at once; fence.wait() returns once they ran
// (at once if never recorded); fence.done() says whether they ran, without waiting. With
// tensor.copyToAsync(pinned), a step's results come back while the host already enqueues
// the next step, and the engine thread polls for them instead of blocking. timer() makes a
// pair of timed fences: start() and stop() mark the stream, and once done(), ms() is the GPU
// time between them (a step's, a merge's: lib/lora/merge_costs.ts).
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

class Timer : public Napi::ObjectWrap<Timer> {
 public:
  static Napi::Function Init(Napi::Env env) {
    return DefineClass(env, "Timer", {
      InstanceMethod<&Timer::Start>("start"),
      InstanceMethod<&Timer::Stop>("stop"),
      InstanceMethod<&Timer::Done>("done"),
      InstanceMethod<&Timer::Ms>("ms"),
      InstanceMethod<&Timer::Dispose>("dispose"),
    });
  }

  explicit Timer(const Napi::CallbackInfo& info)
      : Napi::ObjectWrap<Timer>(info), start_(new gpu::Fence(true)), stop_(new gpu::Fence(true)) {}

 private:
  std::unique_ptr<gpu::Fence> start_, stop_;

  void live(Napi::Env env) const {
    if (!start_) throw Napi::Error::New(env, "Timer was disposed");
  }
  Napi::Value Start(const Napi::CallbackInfo& info) {
    live(info.Env());
    withErrors(info.Env(), "timer.start", [&] { start_->record(); });
    return info.Env().Undefined();
  }
  Napi::Value Stop(const Napi::CallbackInfo& info) {
    live(info.Env());
    withErrors(info.Env(), "timer.stop", [&] { stop_->record(); });
    return info.Env().Undefined();
  }
  Napi::Value Done(const Napi::CallbackInfo& info) {
    live(info.Env());
    bool done = false;
    withErrors(info.Env(), "timer.done", [&] { done = stop_->done(); });
    return Napi::Boolean::New(info.Env(), done);
  }
  Napi::Value Ms(const Napi::CallbackInfo& info) {
    live(info.Env());
    float ms = 0;
    withErrors(info.Env(), "timer.ms", [&] {
      if (!stop_->done()) throw gpu::Error("timer.ms: the GPU has not passed stop() yet (ask done() first)");
      ms = stop_->msSince(*start_);
    });
    return Napi::Number::New(info.Env(), ms);
  }
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    start_.reset();
    stop_.reset();
    return info.Env().Undefined();
  }
};

// info.Data(): this env's Fence (or Timer) constructor.
Napi::Value Make(const Napi::CallbackInfo& info) {
  return static_cast<Napi::FunctionReference*>(info.Data())->New({});
}

}  // namespace

void RegisterFence(Napi::Env env, Napi::Object exports) {
  auto* fence = new Napi::FunctionReference(Napi::Persistent(Fence::Init(env)));
  auto* timer = new Napi::FunctionReference(Napi::Persistent(Timer::Init(env)));
  env.AddCleanupHook([fence, timer] {
    delete fence;
    delete timer;
  });
  exports["fence"] = Napi::Function::New<Make>(env, "fence", fence);
  exports["timer"] = Napi::Function::New<Make>(env, "timer", timer);
}

}  // namespace mstar
