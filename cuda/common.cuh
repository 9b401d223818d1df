// What every kernel file shares: the stream, error checks, element conversions, warp and
// block reductions, and the dtype dispatch from the runtime DType to template types.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <functional>

#include "dtype.h"
#include "gpu.h"
#include "gpu_ops.h"
#include "stamps.cuh"

namespace mstar::gpu {

using bf16 = __nv_bfloat16;
using f16 = __half;

// The process's one stream, created on first use; every op is enqueued on it.
cudaStream_t stream();
// Multiprocessors of the current device (cached).
int smCount();
// Whether launch() lets kernels overlap the one before them (see below): where the device
// runs this library's compute 9.0 code, and MSTAR_PDL is not off.
bool dependentLaunch();
// Whether the device runs this library's sm_90a code (Hopper's wgmma kernels), and MSTAR_WGMMA
// is not off.
bool wgmmaKernels();

[[noreturn]] void throwCuda(cudaError_t e, const char* what);
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throwCuda(e, what);
}

// Stream-ordered scratch memory (from the device's pool), freed on the stream when it
// goes out of scope: later work on the stream may reuse it, never earlier work.
// Zero bytes allocate nothing (as<T>() is then null).
class Scratch {
 public:
  Scratch(size_t bytes, const char* what);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T> T* as() const { return static_cast<T*>(p_); }

 private:
  void* p_ = nullptr;
};

// Capture bookkeeping (graph.cu), for the runtime's allocations, frees and waits.
// Throws gpu::Error naming `what` while a graph is being captured.
void requireNotCapturing(const char* what);
// alloc() reports each allocation (during a capture it becomes graph memory).
void noteAlloc(void* p);
// True when p must not be freed now: the free is deferred to the end of the capture in
// progress, or p belongs to a failed capture. False: free it now.
bool holdRelease(void* p) noexcept;
// Runs f now, or once the capture in progress ends (host-side cleanup that would wait).
void runOrDefer(std::function<void()> f) noexcept;

// ---- programmatic dependent launch ------------------------------------------------------
// A step is hundreds of short kernels, each bound by its launch and its first memory round
// trip more than by bandwidth. On Hopper, a kernel launched by launch() may become resident
// while the kernel before it on the stream still runs: it can prefetch what no op writes
// (weights) meanwhile, and then starts as soon as the previous kernel ends.
//
// The rule: every block of a kernel launched so calls awaitPrior() before it touches memory
// an earlier op writes or reads (and before any return): the wait ends once the previous
// kernel has completed and its writes are visible, which by induction means every earlier
// op. Then it lets the next kernel launch (it becomes resident only once this kernel's
// blocks all are, so it never takes their place). A block that has read only what no op
// writes (weights, a step's inputs) may return before it where another block of its launch
// always waits: the launch still completes only after the one before. Built for sm_80 this
// is a no-op, and launch() then launches plainly.
__device__ __forceinline__ void awaitPrior() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  stampWaitEnd();
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Lets the next kernel launch before this one's wait, not only after it (awaitPrior): its
// blocks then become resident, and start what they do before their own wait, while this
// kernel's blocks still wait for the kernel before. Worth it only ahead of a kernel whose
// early work stays small (a tensor-core GEMV's first ring stages): a one-row GEMV prefetching
// its whole weight into L2 so early slows the projection still running before.
__device__ __forceinline__ void launchNextEarly() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Fetches the 128-byte line holding p into L2, without waiting for it.
__device__ __forceinline__ void prefetchL2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// The shared-memory carveout (percent of an SM's shared memory at most) that holds `blocks`
// blocks of `bytes` each (static and dynamic shared memory), for launchCarved. An SM's L1 is
// what its shared memory leaves, and an SM takes a new carveout only when idle: in a step's
// chain of early launches (awaitPrior) a kernel's blocks run under the carveout of the SM's
// kernels before them. A tensor-core GEMV left at the driver's choice (the most shared
// memory) left decode attention after it with ~28 KB of L1, too little to keep its key rows
// in flight: a third of its blocks ran ~25% longer (Qwen3-0.6B, 16 sequences of 4096 keys).
int carveoutFor(int64_t blocks, size_t bytes);
// Blocks of `bytes` shared memory each (static and dynamic) that one SM holds at most.
int blocksPerSm(size_t bytes);

// kernel<<<grid, block, shared, stream()>>>(args...), as a dependent launch where the device
// has them, asking for `carveout` (carveoutFor; -1: the driver's choice); `what` names it in
// an error. The kernel must follow awaitPrior()'s rule.
template <typename... Params, typename... Args>
void launchCarved(const char* what, int carveout, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                  Args... args) {
  cudaLaunchAttribute attrs[2];
  unsigned n = 0;
  if (dependentLaunch()) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (carveout >= 0) {
    attrs[n].id = cudaLaunchAttributePreferredSharedMemoryCarveout;
    attrs[n++].val.sharedMemCarveout = unsigned(carveout);
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream();
  config.attrs = attrs;
  config.numAttrs = n;
  check(cudaLaunchKernelEx(&config, kernel, Params(args)...), what);
}

// launchCarved at the driver's carveout.
template <typename... Params, typename... Args>
void launch(const char* what, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, Args... args) {
  launchCarved(what, -1, kernel, grid, block, shared, args...);
}

inline unsigned blocksFor(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

// ---- elements -------------------------------------------------------------------------
__device__ __forceinline__ float toF(float v) { return v; }
__device__ __forceinline__ float toF(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float toF(f16 v) { return __half2float(v); }

template <typename T> __device__ __forceinline__ T fromF(float v);
template <> __device__ __forceinline__ float fromF<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16 fromF<bf16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ f16 fromF<f16>(float v) { return __float2half_rn(v); }

// SiLU(g) · u as siluMul takes gate and up (the CPU's formula g / (1 + e^-g) · u, with expf).
__device__ __forceinline__ float siluTimes(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// 2^x, one instruction (exp2f adds three to keep results below 2^-126, which a softmax
// weight below that does not need); 2^-inf = 0.
__device__ __forceinline__ float exp2Approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Reads N consecutive elements at p as f32 with the widest loads the size allows;
// p must be aligned to min(16, N * sizeof(T)) bytes.
template <typename T, int N>
__device__ __forceinline__ void loadVec(float (&dst)[N], const T* p) {
  constexpr int bytes = N * int(sizeof(T));
  if constexpr (bytes % 16 == 0) {
    uint4 raw[bytes / 16];
#pragma unroll
    for (int i = 0; i < bytes / 16; ++i) raw[i] = reinterpret_cast<const uint4*>(p)[i];
    const T* e = reinterpret_cast<const T*>(raw);
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = toF(e[i]);
  } else if constexpr (bytes == 8) {
    uint2 raw = *reinterpret_cast<const uint2*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = toF(e[i]);
  } else if constexpr (bytes == 4) {
    uint32_t raw = *reinterpret_cast<const uint32_t*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = toF(e[i]);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = toF(p[i]);
  }
}

// Writes N consecutive elements at p with 16-byte stores where N * sizeof(T) allows (p then
// aligned to 16 bytes), else one at a time.
template <typename T, int N>
__device__ __forceinline__ void storeVec(T* p, const T (&v)[N]) {
  constexpr int bytes = N * int(sizeof(T));
  if constexpr (bytes % 16 == 0) {
    uint4 raw[bytes / 16];
    memcpy(raw, v, bytes);
#pragma unroll
    for (int i = 0; i < bytes / 16; ++i) reinterpret_cast<uint4*>(p)[i] = raw[i];
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) p[i] = v[i];
  }
}

// From this many rows, a step with no LoRA delta is prefill-sized: siluMul takes a row (token)
// a block there, with wide loads, instead of its decode-sized layout (ropeKvWrite from fewer:
// rope_kv.cu's kRowsKernelFrom).
constexpr int64_t kPrefillRows = 128;

// Whether rows of `in` elements of `elem` bytes from p can be read in runs of 8 elements
// with 16-byte loads (the vec paths): p aligned, every row starting on a 16-byte boundary,
// and no run crossing a row's end (in % 8 == 0: an f32 row of 4k + 4 elements would pass
// the first two and read 4 elements past its end).
inline bool runsOf8(const void* p, int64_t in, size_t elem) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && in % 8 == 0 && (in * int64_t(elem)) % 16 == 0;
}

// Element i of a float tensor whose dtype is only known at run time (cold paths only).
__device__ __forceinline__ float loadAny(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::BF16: return toF(static_cast<const bf16*>(p)[i]);
    default: return toF(static_cast<const f16*>(p)[i]);
  }
}
__device__ __forceinline__ void storeAny(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::F32: static_cast<float*>(p)[i] = v; break;
    case DType::BF16: static_cast<bf16*>(p)[i] = fromF<bf16>(v); break;
    default: static_cast<f16*>(p)[i] = fromF<f16>(v); break;
  }
}

// ---- reductions -----------------------------------------------------------------------
template <typename T>
__device__ __forceinline__ T warpSum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
// `shared` holds 32 values; the block must reach this call together.
template <typename T>
__device__ T blockSum(T v, T* shared) {
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warpSum(v);
  __syncthreads();  // shared may still be read from a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T total = lane < warps ? shared[lane] : T(0);
  return warpSum(total);
}

// ---- dtype dispatch -------------------------------------------------------------------
// Calls f(T{}) with T the activation type: float or bf16.
template <typename F>
void withAct(DType t, F&& f) {
  if (t == DType::F32) f(float{});
  else f(bf16{});
}
// Calls f(W{}) with W the element type of a float tensor: float, bf16 or f16.
template <typename F>
void withFloat(DType t, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); break;
    case DType::BF16: f(bf16{}); break;
    default: f(f16{}); break;
  }
}

}  // namespace mstar::gpu
