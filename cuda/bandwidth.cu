// The device's HBM read bandwidth as a decode step meets it: a kernel that only reads a
// buffer far larger than L2 with 16-byte loads (as the GEMV streams its weights), timed by
// CUDA events, best of several passes. `mstar bench --roofline` divides by it: the datasheet
// figure (4.8 TB/s on an H200) is more than any kernel reads.
#include <algorithm>

#include "common.cuh"
#include "gpu.h"

namespace mstar::gpu {
namespace {

// Every thread reads its 16-byte words grid-stride and folds them into one word, stored
// only where it could never be zero, so the compiler keeps every load.
__global__ void readKernel(const uint4* p, int64_t words, unsigned* sink) {
  unsigned acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < words; i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcs(p + i);  // streamed: nothing to keep in L2
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

}  // namespace

double readBandwidth(size_t bytes, int passes) {
  requireNotCapturing("readBandwidth");
  cudaStream_t s = stream();
  const int64_t words = int64_t(bytes / 16);
  // Straight from the driver, not the stream-ordered pool, which would keep the buffer
  // reserved once freed (and an engine started after this sizes its KV cache by free memory).
  void* buffer = nullptr;
  check(cudaMalloc(&buffer, size_t(words) * 16 + 256), "cudaMalloc (read bandwidth buffer)");
  unsigned* sink = reinterpret_cast<unsigned*>(static_cast<char*>(buffer) + words * 16);
  cudaEvent_t start = nullptr, stop = nullptr;
  float best = 0;
  try {
    memsetAsync(buffer, 0, size_t(words) * 16);  // every page touched before the timed passes
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    const unsigned grid = unsigned(smCount() * 8);
    for (int i = 0; i <= passes; ++i) {  // pass 0 warms up
      check(cudaEventRecord(start, s), "cudaEventRecord");
      readKernel<<<grid, 256, 0, s>>>(static_cast<const uint4*>(buffer), words, sink);
      check(cudaGetLastError(), "read bandwidth kernel");
      check(cudaEventRecord(stop, s), "cudaEventRecord");
      check(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      if (i > 0 && ms > 0) best = std::max(best, float(double(words) * 16 / (double(ms) * 1e-3) / 1e9));
    }
  } catch (...) {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    cudaFree(buffer);
    throw;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  check(cudaFree(buffer), "cudaFree (read bandwidth buffer)");
  return best;
}

}  // namespace mstar::gpu
