#include "storage.h"

#include <cstdlib>
#include <new>

namespace mstar {

// 64-byte alignment: cache lines on the CPU, and the vector loads the kernels use.
Storage::Storage(Device device, size_t bytes) : device(device), data(nullptr), bytes(bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  data = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!data) throw std::bad_alloc();
}

Storage::~Storage() { std::free(data); }

}  // namespace mstar
