// A block of memory a tensor's elements live in, in host or device memory; views share it
// through shared_ptr, and the last one to go frees it.
#pragma once
#include <cstddef>
#include <memory>

#include "gpu.h"

namespace mstar {

enum class Device { CPU, CUDA };

struct Storage {
  Device device;
  void* data;
  size_t bytes;
  // CUDA only, made on the first copyFromAsync: the pinned buffer its uploads go through.
  std::unique_ptr<gpu::Staging> staging;
  // CPU only: page-locked where a CUDA device exists, so uploads from it do not wait.
  bool pinned = false;
  Storage(Device device, size_t bytes, bool pinned = false);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

}  // namespace mstar
