// Kernel stamps, for profiling builds only (MSTAR_CUDA_STAMPS=ON; off in the package): block 0
// of every launch notes the %globaltimer when its awaitPrior() wait ends, that is when the
// launch before it completed. Consecutive stamps are then each kernel's time on the step's
// critical path, in context: what a step's chain of early launches costs kernel by kernel,
// which neither Nsight Compute (one kernel alone) nor dropping ops (bench/decode_step.mjs
// DROP) tells. cuBLASLt's kernels do not wait, so they have no stamp of their own (their time
// falls to the stamp before). MSTAR_STAMPS=FILE: each synchronize() appends its stamps there
// and starts afresh (bench/stamps.mjs). A stamp sits on the critical path (an atomic, a timer
// read and two stores after each wait): Qwen3-0.6B's decode step at one sequence took 0.87 ms
// in a stamps build against 0.78 (H200), so compare stamps with stamps.
#pragma once
#include <cstdint>

namespace mstar::gpu {

#ifdef MSTAR_CUDA_STAMPS
// Without relocatable device code, each .cu file has its own copy of these; each registers
// them at load, and the dump merges them by time.
constexpr unsigned kStamps = 16384;
static __device__ unsigned long long gStampTime[kStamps];
static __device__ unsigned gStampGrid[kStamps];
static __device__ unsigned gStampCount;
void registerStamps(const char* file, const void* time, const void* grid, const void* count);
namespace {
[[maybe_unused]] const bool gStampsRegistered =
    (registerStamps(__BASE_FILE__, gStampTime, gStampGrid, &gStampCount), true);
}  // namespace
#endif

__device__ __forceinline__ void stampWaitEnd() {
#ifdef MSTAR_CUDA_STAMPS
  if (threadIdx.x | threadIdx.y | threadIdx.z | blockIdx.x | blockIdx.y | blockIdx.z) return;
  const unsigned i = atomicAdd(&gStampCount, 1u);
  if (i >= kStamps) return;
  unsigned long long now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  gStampTime[i] = now;
  gStampGrid[i] = gridDim.x * gridDim.y * gridDim.z;
#endif
}

// With MSTAR_STAMPS=FILE in a stamps build: the stamps since the last call, appended to FILE
// as "sync N" and N lines "ns-since-the-first blocks source.cu", by time; else nothing.
void dumpStamps();

}  // namespace mstar::gpu
