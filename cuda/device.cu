// CUDA runtime probes the addon needs before any kernel runs.
#include <cuda_runtime.h>

#include <cstdio>

// Number of visible CUDA devices, or -1 with the runtime's reason in `error`.
extern "C" int mstarCudaDeviceCount(char* error, int errorLen) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    std::snprintf(error, size_t(errorLen), "%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
    return -1;
  }
  return n;
}
