// A block of memory a tensor's elements live in; views share it through shared_ptr.
#pragma once
#include <cstddef>
#include <memory>

namespace mstar {

enum class Device { CPU, CUDA };

struct Storage {
  Device device;
  void* data;
  size_t bytes;
  Storage(Device device, size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

}  // namespace mstar
