// Device memory, copies, the process's stream, pinned staging and scratch: the CUDA
// runtime behind native/gpu.h. Everything initialises lazily on first use.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "common.cuh"

namespace mstar::gpu {

[[noreturn]] void throwCuda(cudaError_t e, const char* what) {
  throw Error(std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

int deviceCount(std::string* error) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (error) *error = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    cudaGetLastError();  // clear it, so it does not surface as some later call's error
    return -1;
  }
  return n;
}

namespace {

std::once_flag gInitOnce;
cudaStream_t gStream = nullptr;
int gSmCount = 0;
int gSharedPerSm = 0, gSharedReserved = 0;  // bytes: an SM's most shared memory; what each block costs besides its own
bool gDependentLaunch = false;
bool gWgmma = false;

// An environment switch turned off (0, false, off or no, as the TypeScript side reads them).
bool envOff(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return false;
  std::string s(v);
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s == "0" || s == "false" || s == "off" || s == "no";
}

// Which code the device runs for this library's kernels.
__global__ void probeKernel() {}
// 1 in code built for sm_90a (whose arch-specific instructions, wgmma, the other code lacks).
__device__ int gSm90aCode =
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    1;
#else
    0;
#endif

// The stream does not synchronise with the legacy default stream: every copy and kernel
// of the addon goes through it explicitly. The device's memory pool keeps freed scratch
// instead of returning it to the driver at every sync.
void init() {
  std::string why;
  int n = deviceCount(&why);
  if (n <= 0) throw Error("no CUDA device: " + (n < 0 ? why : std::string("none visible")));
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&gSmCount, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&gSharedPerSm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&gSharedReserved, cudaDevAttrReservedSharedMemoryPerBlock, dev), "cudaDeviceGetAttribute");
  // The kernels wait for their predecessor only where compiled for compute 9.0 or newer
  // (awaitPrior); the device may instead run them from sm_80 code (PTX compiled on load).
  cudaFuncAttributes code;
  check(cudaFuncGetAttributes(&code, probeKernel), "cudaFuncGetAttributes");
  gDependentLaunch = code.ptxVersion >= 90 && !envOff("MSTAR_PDL");
  int sm90a = 0;
  check(cudaMemcpyFromSymbol(&sm90a, gSm90aCode, sizeof sm90a), "cudaMemcpyFromSymbol");
  gWgmma = sm90a == 1 && !envOff("MSTAR_WGMMA");
  cudaMemPool_t pool;
  check(cudaDeviceGetDefaultMemPool(&pool, dev), "cudaDeviceGetDefaultMemPool");
  uint64_t keep = UINT64_MAX;
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute");
  check(cudaStreamCreateWithFlags(&gStream, cudaStreamNonBlocking), "cudaStreamCreate");
}

}  // namespace

cudaStream_t stream() {
  std::call_once(gInitOnce, init);  // a throw leaves it to be tried again
  return gStream;
}

bool wgmmaKernels() {
  stream();
  return gWgmma;
}

int smCount() {
  stream();
  return gSmCount;
}

int carveoutFor(int64_t blocks, size_t bytes) {
  stream();
  const int64_t need = blocks * (int64_t(bytes) + gSharedReserved);
  return int(std::min<int64_t>(100, (need * 100 + gSharedPerSm - 1) / gSharedPerSm));
}

int blocksPerSm(size_t bytes) {
  stream();
  return int(gSharedPerSm / (int64_t(bytes) + gSharedReserved));
}

bool dependentLaunch() {
  stream();
  return gDependentLaunch;
}

// Tensors come from the stream-ordered pool: every op runs on the one stream, so a free
// is ordered after the last kernel that used the memory and needs no device-wide wait
// (cudaFree would synchronise the device at every disposed activation).
void* alloc(size_t bytes) {
  cudaStream_t s = stream();
  void* p = nullptr;
  // Round up like the CPU storage; a zero-size tensor still gets a valid pointer.
  check(cudaMallocAsync(&p, bytes == 0 ? 256 : (bytes + 255) / 256 * 256, s), "cudaMallocAsync");
  try {
    noteAlloc(p);
  } catch (...) {
    if (cudaFreeAsync(p, s) != cudaSuccess) cudaGetLastError();
    throw;
  }
  return p;
}

void release(void* p) noexcept {
  if (!p || holdRelease(p)) return;  // during a capture: freed once it ends
  // At process exit the runtime may be gone already; there is nothing to do about an error.
  if (cudaFreeAsync(p, gStream) != cudaSuccess) cudaGetLastError();
}

void memsetAsync(void* p, int value, size_t bytes) {
  if (bytes) check(cudaMemsetAsync(p, value, bytes, stream()), "cudaMemsetAsync");
}

void copyToDevice(void* dst, const void* src, size_t bytes) {
  requireNotCapturing("a synchronous copy to the device");
  if (!bytes) return;
  cudaStream_t s = stream();
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpy (host to device)");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");  // the host buffer is pageable
}

void copyToHost(void* dst, const void* src, size_t bytes) {
  requireNotCapturing("a copy to the host");
  if (!bytes) return;
  cudaStream_t s = stream();
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpy (device to host)");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

void copyToHostAsync(void* dst, const void* src, size_t bytes) {
  requireNotCapturing("an asynchronous copy to the host");
  if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()), "cudaMemcpyAsync (device to host)");
}

void copyOnDevice(void* dst, const void* src, size_t bytes) {
  if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()), "cudaMemcpy (device to device)");
}

void memInfo(size_t* freeBytes, size_t* totalBytes) {
  stream();  // the context exists from here on
  check(cudaMemGetInfo(freeBytes, totalBytes), "cudaMemGetInfo");
}

void synchronize() {
  requireNotCapturing("synchronize");
  if (!gStream) return;  // nothing was ever enqueued
  check(cudaStreamSynchronize(gStream), "cudaStreamSynchronize");
  dumpStamps();  // a stamps build's profile (stamps.cuh); else nothing
}

float timeOnStream(const std::function<void()>& enqueue, int reps) {
  requireNotCapturing("timeOnStream");
  cudaEvent_t start = nullptr, stop = nullptr;
  float ms = 0;
  try {
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    enqueue();
    check(cudaEventRecord(start, stream()), "cudaEventRecord");
    for (int i = 0; i < reps; ++i) enqueue();
    check(cudaEventRecord(stop, stream()), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  } catch (...) {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    throw;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / float(std::max(reps, 1));
}

// ---- Pinned host memory and adapter uploads ----------------------------------------------
namespace {
std::once_flag gUploadOnce;
cudaStream_t gUploadStream = nullptr;
cudaEvent_t gComputeMark = nullptr, gUploaded = nullptr;

void initUpload() {
  stream();
  check(cudaStreamCreateWithFlags(&gUploadStream, cudaStreamNonBlocking), "cudaStreamCreate (uploads)");
  check(cudaEventCreateWithFlags(&gComputeMark, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventCreateWithFlags(&gUploaded, cudaEventDisableTiming), "cudaEventCreate");
}
}  // namespace

void* allocPinned(size_t bytes) noexcept {
  try {
    stream();
  } catch (const Error&) {
    return nullptr;  // no device: ordinary memory serves
  }
  void* p = nullptr;
  if (cudaMallocHost(&p, bytes) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}

void freePinned(void* p) noexcept {
  // An upload from p may still be queued; waiting and freeing are not capturable.
  runOrDefer([p] {
    if (gUploadStream && cudaStreamSynchronize(gUploadStream) != cudaSuccess) cudaGetLastError();
    if (cudaFreeHost(p) != cudaSuccess) cudaGetLastError();
  });
}

void upload(const UploadRegion* regions, size_t count, bool joinAfter) {
  requireNotCapturing("an upload to the device");
  std::call_once(gUploadOnce, initUpload);
  cudaStream_t compute = stream();
  // The side stream starts after the ops already enqueued (a step may still read the slot).
  check(cudaEventRecord(gComputeMark, compute), "cudaEventRecord");
  check(cudaStreamWaitEvent(gUploadStream, gComputeMark, 0), "cudaStreamWaitEvent");
  // The compute stream waits for whatever went to the side stream; also, best effort, when a
  // region's copy throws: the caller may then free a slot the earlier copies still write.
  struct Join {
    cudaStream_t compute;
    bool joined = false;
    ~Join() {
      if (joined) return;
      if (cudaEventRecord(gUploaded, gUploadStream) != cudaSuccess || cudaStreamWaitEvent(compute, gUploaded, 0) != cudaSuccess)
        cudaGetLastError();
    }
  } join{compute};
  for (size_t i = 0; i < count; ++i) {
    const UploadRegion& r = regions[i];
    const size_t width = r.cols * r.elemBytes;
    if (r.rows == 0 || width == 0) continue;
    // Whole rows are one contiguous run: a 2-D copy of narrow rows would move them one DMA
    // row at a time.
    if (r.dstPitch == width)
      check(cudaMemcpyAsync(r.dst, r.src, width * r.rows, cudaMemcpyHostToDevice, gUploadStream),
            "cudaMemcpyAsync (host to device)");
    else
      check(cudaMemcpy2DAsync(r.dst, r.dstPitch, r.src, width, width, r.rows, cudaMemcpyHostToDevice, gUploadStream),
            "cudaMemcpy2DAsync (host to device)");
  }
  check(cudaEventRecord(gUploaded, gUploadStream), "cudaEventRecord");
  if (joinAfter) check(cudaStreamWaitEvent(compute, gUploaded, 0), "cudaStreamWaitEvent");
  join.joined = true;
}

void awaitUploads() {
  requireNotCapturing("waiting for uploads");
  if (gUploadStream) check(cudaStreamWaitEvent(stream(), gUploaded, 0), "cudaStreamWaitEvent");
}

Scratch::Scratch(size_t bytes, const char* what) {
  if (bytes) check(cudaMallocAsync(&p_, bytes, stream()), what);
}

Scratch::~Scratch() {
  if (p_ && cudaFreeAsync(p_, gStream) != cudaSuccess) cudaGetLastError();
}

// ---- Uploader -------------------------------------------------------------------------
namespace {
std::mutex gStagingMutex;
void* gPinned[2] = {nullptr, nullptr};
size_t gPinnedBytes = 0;
cudaEvent_t gDone[2] = {nullptr, nullptr};
}  // namespace

struct Uploader::Impl {
  std::unique_lock<std::mutex> lock{gStagingMutex};
  int current = 1;
  bool pending[2] = {false, false};
};

Uploader::Uploader(size_t chunkBytes) : impl_(nullptr) {
  requireNotCapturing("an upload to the device");
  impl_ = new Impl;
  try {
    stream();
    if (gPinnedBytes < chunkBytes) {
      for (void*& p : gPinned) {
        if (p) cudaFreeHost(p);
        p = nullptr;
      }
      gPinnedBytes = 0;
      for (void*& p : gPinned) check(cudaMallocHost(&p, chunkBytes), "cudaMallocHost");
      gPinnedBytes = chunkBytes;
    }
    for (cudaEvent_t& e : gDone)
      if (!e) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  } catch (...) {
    delete impl_;
    throw;
  }
}

Uploader::~Uploader() {
  for (int i = 0; i < 2; ++i)
    if (impl_->pending[i] && cudaEventSynchronize(gDone[i]) != cudaSuccess) cudaGetLastError();
  delete impl_;
}

void* Uploader::buffer() {
  int next = 1 - impl_->current;
  if (impl_->pending[next]) {
    impl_->pending[next] = false;
    check(cudaEventSynchronize(gDone[next]), "cudaEventSynchronize");
  }
  impl_->current = next;
  return gPinned[next];
}

void Uploader::send(void* dst, size_t bytes) {
  int i = impl_->current;
  check(cudaMemcpyAsync(dst, gPinned[i], bytes, cudaMemcpyHostToDevice, stream()), "cudaMemcpy (pinned to device)");
  check(cudaEventRecord(gDone[i], stream()), "cudaEventRecord");
  impl_->pending[i] = true;
}

// ---- Fence -----------------------------------------------------------------------------
void Fence::record() {
  requireNotCapturing("recording a fence");
  if (!event_) {
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, timed_ ? cudaEventDefault : cudaEventDisableTiming), "cudaEventCreate");
    event_ = e;
  }
  check(cudaEventRecord(static_cast<cudaEvent_t>(event_), stream()), "cudaEventRecord");
  recorded_ = true;
}

float Fence::msSince(const Fence& earlier) const {
  if (!timed_ || !earlier.timed_) throw Error("fence.msSince: both fences must be timed");
  if (!recorded_ || !earlier.recorded_) throw Error("fence.msSince: both fences must be recorded");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(earlier.event_), static_cast<cudaEvent_t>(event_)),
        "cudaEventElapsedTime");
  return ms;
}

void Fence::wait() {
  requireNotCapturing("waiting for a fence");
  if (recorded_) check(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)), "cudaEventSynchronize");
}

bool Fence::done() {
  requireNotCapturing("querying a fence");
  if (!recorded_) return true;
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event_));
  if (e == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: clear it, so no later check reads it
    return false;
  }
  check(e, "cudaEventQuery");
  return true;
}

Fence::~Fence() {
  cudaEvent_t e = static_cast<cudaEvent_t>(event_);
  if (e) runOrDefer([e] { if (cudaEventDestroy(e) != cudaSuccess) cudaGetLastError(); });
}

// ---- Staging ---------------------------------------------------------------------------
void* Staging::reserve(size_t bytes) {
  requireNotCapturing("copyFromAsync");
  if (pending_) {
    // Only this buffer's previous copy is waited for; in a step loop it ran long ago.
    check(cudaEventSynchronize(static_cast<cudaEvent_t>(done_)), "cudaEventSynchronize");
    pending_ = false;
  }
  if (!done_) {
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    done_ = e;
  }
  if (capacity_ < bytes) {
    // Doubling: eager steps upload a little more now and then, and each new pinned buffer
    // (and cudaFreeHost of the old one) costs far more than the copy.
    const size_t want = std::max<size_t>({bytes, 256, 2 * capacity_});
    if (pinned_ && cudaFreeHost(pinned_) != cudaSuccess) cudaGetLastError();
    pinned_ = nullptr;
    capacity_ = 0;
    check(cudaMallocHost(&pinned_, want), "cudaMallocHost");
    capacity_ = want;
  }
  return pinned_;
}

void Staging::send(void* dst, size_t bytes) {
  if (!bytes) return;
  cudaStream_t s = stream();
  check(cudaMemcpyAsync(dst, pinned_, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (pinned to device)");
  check(cudaEventRecord(static_cast<cudaEvent_t>(done_), s), "cudaEventRecord");
  pending_ = true;
}

Staging::~Staging() {
  void* pinned = pinned_;
  cudaEvent_t done = static_cast<cudaEvent_t>(done_);
  bool pending = pending_;
  if (!pinned && !done) return;
  // Waiting and freeing pinned memory are not capturable: during a capture, done after it.
  runOrDefer([pinned, done, pending] {
    if (pending && cudaEventSynchronize(done) != cudaSuccess) cudaGetLastError();
    if (pinned && cudaFreeHost(pinned) != cudaSuccess) cudaGetLastError();
    if (done && cudaEventDestroy(done) != cudaSuccess) cudaGetLastError();
  });
}

}  // namespace mstar::gpu
