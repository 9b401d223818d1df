#include "storage.h"

#include <cstdlib>
#include <new>

#include "gpu.h"

namespace mstar {

// CPU: 64-byte alignment (cache lines, and the vector loads the kernels use).
// CUDA: cudaMalloc, which aligns to 256 bytes; throws gpu::Error with the runtime's reason.
// Pinned (CPU): cudaMallocHost when a device exists, else ordinary memory.
Storage::Storage(Device device, size_t bytes, bool wantPinned) : device(device), data(nullptr), bytes(bytes) {
  if (device == Device::CUDA) {
    data = gpu::alloc(bytes);
    return;
  }
  size_t rounded = (bytes + 63) / 64 * 64;
  if (wantPinned) {
    data = gpu::allocPinned(rounded == 0 ? 64 : rounded);
    pinned = data != nullptr;
    if (pinned) return;
  }
  data = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!data) throw std::bad_alloc();
}

Storage::~Storage() {
  staging.reset();  // its pending upload into data finishes first (or after a capture)
  if (device == Device::CUDA) gpu::release(data);
  else if (pinned) gpu::freePinned(data);
  else std::free(data);
}

}  // namespace mstar
