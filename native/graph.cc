// The JS face of CUDA graphs (cuda/graph.cu does the CUDA side):
//   captureGraph(fn): begins stream capture, calls fn (which must only enqueue ops on
//     preallocated tensors), ends the capture and instantiates it. If fn throws, or the
//     capture fails, the capture is ended and discarded and the error thrown.
//   graph.replay(): launches it on the stream (returns at once); graph.dispose().
// A graph holds raw device pointers: every tensor its ops touched must outlive it.
#include "graph.h"

#include <string>

#include "gpu.h"
#include "tensor.h"

namespace mstar {
namespace {

class Graph : public Napi::ObjectWrap<Graph> {
 public:
  static Napi::Function Init(Napi::Env env) {
    return DefineClass(env, "Graph", {
      InstanceAccessor<&Graph::GetDisposed>("disposed"),
      InstanceAccessor<&Graph::GetNodes>("nodes"),
      InstanceMethod<&Graph::Replay>("replay"),
      InstanceMethod<&Graph::Dispose>("dispose"),
    });
  }

  explicit Graph(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Graph>(info) {}
  ~Graph() override { gpu::destroyGraph(graph_); }  // collected without dispose()

  void adopt(gpu::Graph* g) { graph_ = g; }

 private:
  gpu::Graph* graph_ = nullptr;

  void requireLive(Napi::Env env) const {
    if (!graph_) throw Napi::Error::New(env, "Graph was disposed");
  }
  Napi::Value GetDisposed(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), !graph_); }
  Napi::Value GetNodes(const Napi::CallbackInfo& info) {
    requireLive(info.Env());
    return Napi::Number::New(info.Env(), double(gpu::graphNodes(graph_)));
  }
  Napi::Value Replay(const Napi::CallbackInfo& info) {
    requireLive(info.Env());
    withErrors(info.Env(), "replay", [&] { gpu::launchGraph(graph_); });
    return info.Env().Undefined();
  }
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    gpu::destroyGraph(graph_);
    graph_ = nullptr;
    return info.Env().Undefined();
  }
};

// info.Data(): this env's Graph constructor.
Napi::Value CaptureGraph(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsFunction()) throw Napi::TypeError::New(env, "captureGraph(fn): fn must be a function");
  auto* ctor = static_cast<Napi::FunctionReference*>(info.Data());
  // Made first, so nothing after the capture can fail but the capture itself.
  Napi::Object obj = ctor->New({});
  withErrors(env, "captureGraph", [] { gpu::beginCapture(); });
  try {
    info[0].As<Napi::Function>().Call(env.Undefined(), {});
  } catch (...) {
    gpu::abortCapture();  // the error of fn says what was not capturable
    throw;
  }
  gpu::Graph* g = withErrors(env, "captureGraph", [] { return gpu::endCapture(); });
  Graph::Unwrap(obj)->adopt(g);
  return obj;
}

}  // namespace

void RegisterGraph(Napi::Env env, Napi::Object exports) {
  auto* ctor = new Napi::FunctionReference(Napi::Persistent(Graph::Init(env)));
  env.AddCleanupHook([ctor] { delete ctor; });
  exports["captureGraph"] = Napi::Function::New<CaptureGraph>(env, "captureGraph", ctor);
}

}  // namespace mstar
