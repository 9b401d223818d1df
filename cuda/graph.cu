// CUDA graphs: stream capture on the one stream, instantiation, replay; and the capture
// bookkeeping the rest of the runtime consults (runtime.cu's alloc/release, Staging,
// the synchronous copies). See native/gpu.h for the rules a capture follows.
//
// Mode: cudaStreamCaptureModeThreadLocal. Stream-ordered allocations (cudaMallocAsync /
// cudaFreeAsync on the capturing stream, e.g. attention's split-K scratch) are recorded
// as graph memory nodes; any call from this thread that could wait for the GPU would
// invalidate the capture, so the runtime refuses those with a clear error first.
#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "common.cuh"

namespace mstar::gpu {

struct Graph {
  cudaGraphExec_t exec;
  size_t nodes;
};

namespace {

// Never destroyed: tensors may still be released by finalizers after static destructors ran.
std::mutex& gMutex = *new std::mutex;
std::atomic<bool> gCapturing{false};
// Allocated during the capture (graph memory): freed inside it, or the capture fails.
std::unordered_set<void*>& gCaptureAllocs = *new std::unordered_set<void*>;
// Allocations of a failed capture: their addresses were never backed outside the graph,
// so their release is skipped (until the address is handed out again by alloc()).
std::unordered_set<void*>& gOrphans = *new std::unordered_set<void*>;
// Frees and destructions asked for during the capture, run once it ends.
std::vector<std::function<void()>>& gDeferred = *new std::vector<std::function<void()>>;

void freeNow(void* p) noexcept {
  if (cudaFreeAsync(p, stream()) != cudaSuccess) cudaGetLastError();
}

// Leaves capture mode: orphans what was allocated and not freed, runs what was deferred.
// Returns how many allocations were left over.
size_t finishCapture() noexcept {
  std::vector<std::function<void()>> deferred;
  size_t leftover = 0;
  {
    std::lock_guard<std::mutex> lock(gMutex);
    gCapturing = false;
    leftover = gCaptureAllocs.size();
    gOrphans.insert(gCaptureAllocs.begin(), gCaptureAllocs.end());
    gCaptureAllocs.clear();
    deferred.swap(gDeferred);
  }
  for (auto& f : deferred) f();
  return leftover;
}

}  // namespace

bool capturing() noexcept { return gCapturing.load(); }

void requireNotCapturing(const char* what) {
  if (gCapturing.load())
    throw Error(std::string(what) + " cannot run while a CUDA graph is being captured (it would wait for the GPU); "
                "do it before the capture or after it");
}

void noteAlloc(void* p) {
  std::lock_guard<std::mutex> lock(gMutex);
  gOrphans.erase(p);
  if (gCapturing.load()) gCaptureAllocs.insert(p);
}

bool holdRelease(void* p) noexcept {
  std::lock_guard<std::mutex> lock(gMutex);
  if (gOrphans.erase(p)) return true;
  if (!gCapturing.load() || gCaptureAllocs.erase(p)) return false;  // free now (recorded when capturing)
  try {
    gDeferred.emplace_back([p] { freeNow(p); });
  } catch (...) {
    // Out of host memory: leaking this block is the only safe choice left.
  }
  return true;
}

void runOrDefer(std::function<void()> f) noexcept {
  {
    std::lock_guard<std::mutex> lock(gMutex);
    if (gCapturing.load()) {
      try {
        gDeferred.push_back(std::move(f));
      } catch (...) {
      }
      return;
    }
  }
  f();
}

void beginCapture() {
  cudaStream_t s = stream();
  std::lock_guard<std::mutex> lock(gMutex);
  if (gCapturing.load()) throw Error("a CUDA graph is already being captured");
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  gCaptureAllocs.clear();
  gCapturing = true;
}

Graph* endCapture() {
  cudaGraph_t g = nullptr;
  cudaError_t e = cudaStreamEndCapture(stream(), &g);
  size_t leftover = finishCapture();
  auto discard = [&] {
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
  };
  if (e != cudaSuccess) {
    discard();
    throwCuda(e, "cudaStreamEndCapture (a call during the capture was not capturable, so it was discarded)");
  }
  if (!g) throw Error("cudaStreamEndCapture returned no graph");
  if (leftover) {
    discard();
    throw Error(std::to_string(leftover) + " device buffer(s) allocated during the capture were still alive at its end; "
                "a captured step may only allocate scratch it frees (preallocate the rest, e.g. a workspace)");
  }
  size_t nodes = 0;
  if (cudaGraphGetNodes(g, nullptr, &nodes) != cudaSuccess) {
    nodes = 0;
    cudaGetLastError();
  }
  cudaGraphExec_t exec = nullptr;
  e = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);  // the executable graph keeps what it needs
  if (e != cudaSuccess) {
    cudaGetLastError();
    throwCuda(e, "cudaGraphInstantiate");
  }
  return new Graph{exec, nodes};
}

void abortCapture() noexcept {
  cudaGraph_t g = nullptr;
  if (cudaStreamEndCapture(stream(), &g) == cudaSuccess && g) cudaGraphDestroy(g);
  cudaGetLastError();
  finishCapture();
}

void launchGraph(Graph* g) {
  requireNotCapturing("replay");
  check(cudaGraphLaunch(g->exec, stream()), "cudaGraphLaunch");
}

size_t graphNodes(const Graph* g) noexcept { return g->nodes; }

void destroyGraph(Graph* g) noexcept {
  if (!g) return;
  cudaGraphExec_t exec = g->exec;
  delete g;
  // An executable graph still running is freed by the driver once it completes.
  runOrDefer([exec] {
    if (cudaGraphExecDestroy(exec) != cudaSuccess) cudaGetLastError();
  });
}

}  // namespace mstar::gpu
