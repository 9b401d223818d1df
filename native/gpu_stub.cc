// The gpu:: entry points of a build without nvcc: no CUDA tensor can be made there
// (alloc throws), so the op stubs are unreachable; they exist so the bindings link.
#ifndef MSTAR_WITH_CUDA
#include "gpu.h"
#include "gpu_ops.h"

namespace mstar::gpu {
namespace {
[[noreturn]] void none() {
  throw Error("this build of the addon has no CUDA backend (nvcc was not found when it was built)");
}
}  // namespace

int deviceCount(std::string* error) {
  if (error) *error = "this build of the addon has no CUDA backend (nvcc was not found when it was built)";
  return -1;
}
void* alloc(size_t) { none(); }
void release(void*) noexcept {}
void memsetAsync(void*, int, size_t) { none(); }
void copyToDevice(void*, const void*, size_t) { none(); }
void copyToHost(void*, const void*, size_t) { none(); }
void copyOnDevice(void*, const void*, size_t) { none(); }
void copyToHostAsync(void*, const void*, size_t) { none(); }
void synchronize() {}
void memInfo(size_t*, size_t*) { none(); }
double readBandwidth(size_t, int) { none(); }
float timeOnStream(const std::function<void()>&, int) { none(); }
void* allocPinned(size_t) noexcept { return nullptr; }
void freePinned(void*) noexcept {}
void upload(const UploadRegion*, size_t, bool) { none(); }
void awaitUploads() {}
void scatter(const ScatterJob*, uint32_t, uint32_t, bool) { none(); }

struct Uploader::Impl {};
Uploader::Uploader(size_t) : impl_(nullptr) { none(); }
Uploader::~Uploader() {}
void* Uploader::buffer() { none(); }
void Uploader::send(void*, size_t) { none(); }

Staging::~Staging() {}
void* Staging::reserve(size_t) { none(); }
void Staging::send(void*, size_t) { none(); }

Fence::~Fence() {}
void Fence::record() { none(); }
void Fence::wait() {}
bool Fence::done() { return true; }
float Fence::msSince(const Fence&) const { none(); }

struct Graph {};
bool capturing() noexcept { return false; }
void beginCapture() { none(); }
Graph* endCapture() { none(); }
void abortCapture() noexcept {}
void launchGraph(Graph*) { none(); }
size_t graphNodes(const Graph*) noexcept { return 0; }
void destroyGraph(Graph*) noexcept {}

void embedding(DType, void*, Weights, int64_t, const int32_t*, int64_t, int64_t) { none(); }
void rmsNorm(DType, void*, const void*, Weights, int64_t, int64_t, float, int64_t) { none(); }
void addRmsNorm(DType, void*, const void*, Weights, void*, int64_t, int64_t, float, int64_t, const LoraDelta&, int64_t) {
  none();
}
void headRmsNorm(DType, void*, Weights, Weights, int64_t, HeadLayout, float) { none(); }
void linear(DType, void*, const void*, Weights, const Weights*, int64_t, int64_t, int64_t, bool, const WideRows&,
            const UnusedSlots&) {
  none();
}
void linearSiluMul(DType, void*, const void*, Weights, const Weights*, int64_t, int64_t, int64_t, void*) { none(); }
void rmsNormLinear(DType, void*, const void*, Weights, float, Weights, const Weights*, int64_t, int64_t, int64_t, void*,
                   void*) {
  none();
}
void rope(DType, void*, const int32_t*, const float*, int64_t, HeadLayout, int) { none(); }
void siluMul(DType, void*, const void*, int64_t, int64_t, int64_t, const LoraDelta&) { none(); }
void add(DType, void*, const void*, const void*, int64_t) { none(); }
void gatherRows(DType, void*, const void*, int64_t, const int32_t*, int64_t, int64_t) { none(); }
void feedTokens(int32_t*, int32_t*, const int32_t*, int64_t, const int32_t*, const int32_t*, int, int64_t) { none(); }
void kvWrite(DType, KvCache, const void*, const int32_t*, int64_t, HeadLayout) { none(); }
void ropeKvWrite(DType, void*, const int32_t*, const float*, int, const Weights*, const Weights*, float, KvCache, const int32_t*,
                 int64_t, HeadLayout, const LoraDelta&) {
  none();
}
void pagedAttention(DType, void*, const void*, KvCache, const int32_t*, int64_t, const int32_t*, const int32_t*,
                    int64_t, int64_t, HeadLayout, float) {
  none();
}
void pagedAttentionLinear(DType, void*, const void*, KvCache, const int32_t*, int64_t, const int32_t*, const int32_t*,
                          int64_t, int64_t, HeadLayout, float, void*, Weights, const Weights*, int64_t, bool,
                          const UnusedSlots&) {
  none();
}
void sample(DType, int32_t*, const void*, int64_t, int64_t, SamplingRows) { none(); }
void logprobs(DType, float*, int32_t*, float*, int64_t, const void*, const int32_t*, int64_t, int64_t) { none(); }
void loraShrink(DType, void*, const void*, Weights, int64_t, const int32_t*, int64_t, int64_t, int64_t, SlotRanks, bool) {
  none();
}
void loraExpand(DType, void*, const void*, Weights, int64_t, const int32_t*, const int32_t*, int64_t, int64_t, int64_t,
                int64_t, SlotRanks) {
  none();
}
void loraJoin(DType, void*, const void*, const void*, const int32_t*, int64_t, int64_t, int64_t, int64_t) { none(); }
void loraExpandAdd(DType, void*, const void*, const void*, Weights, int64_t, const int32_t*, const int32_t*, int64_t, int64_t,
                   int64_t, int64_t, SlotRanks) {
  none();
}
void linearExpand(DType, void*, const void*, Weights, const Weights*, int64_t, int64_t, int64_t, LoraExpandArgs, bool) {
  none();
}
void copyRegion(void*, DType, int64_t, const void*, DType, int64_t, int64_t, int64_t, int64_t, float, bool, int64_t) {
  none();
}
void fill(void*, DType, int64_t, float) { none(); }
void loraMerge(DType, void*, int64_t, const void*, const void*, int64_t, const void*, int64_t, int64_t, int64_t, int64_t) {
  none();
}
double maxAbsDiff(const void*, DType, const void*, DType, int64_t) { none(); }

}  // namespace mstar::gpu
#endif
