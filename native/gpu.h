// The CUDA runtime as the addon's C++ side sees it: device memory, copies and the one
// stream. Plain C++ declarations (no CUDA headers), so native/*.cc compile with g++;
// cuda/runtime.cu implements them, native/gpu_stub.cc does in a build without nvcc.
// Nothing here runs at module load: the first call initialises CUDA, so a machine with
// no GPU loads the addon and only a CUDA tensor fails (with the runtime's reason).
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>

namespace mstar::gpu {

// A failed CUDA (or cuBLASLt) call: "<what>: <cudaErrorName>: <description>".
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Number of visible devices, or -1 with the runtime's reason in *error. Never throws.
int deviceCount(std::string* error);

void* alloc(size_t bytes);           // cudaMalloc; throws Error
void release(void* p) noexcept;      // cudaFree; errors at process teardown are ignored
void memsetAsync(void* p, int value, size_t bytes);

// Copies between a host buffer (pageable) and device memory on the stream. Both return
// once the host buffer may be reused or read, so they wait for the stream.
void copyToDevice(void* dst, const void* src, size_t bytes);
void copyToHost(void* dst, const void* src, size_t bytes);
void copyOnDevice(void* dst, const void* src, size_t bytes);  // asynchronous
void synchronize();  // waits for every op enqueued so far (no-op before the first CUDA call)

// Streams host data to the device through two pinned buffers: fill one while the other
// copies. Holds a process-wide lock for its lifetime; the destructor waits for the copies.
class Uploader {
 public:
  explicit Uploader(size_t chunkBytes);
  ~Uploader();
  Uploader(const Uploader&) = delete;
  Uploader& operator=(const Uploader&) = delete;
  // The next pinned buffer to fill (at least chunkBytes), once its previous copy is done.
  void* buffer();
  // Enqueues a copy of the first `bytes` of the buffer last returned by buffer() to dst.
  void send(void* dst, size_t bytes);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace mstar::gpu
