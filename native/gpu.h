// The CUDA runtime as the addon's C++ side sees it: device memory, copies and the one
// stream. Plain C++ declarations (no CUDA headers), so native/*.cc compile with g++;
// cuda/runtime.cu implements them, native/gpu_stub.cc does in a build without nvcc.
// Nothing here runs at module load: the first call initialises CUDA, so a machine with
// no GPU loads the addon and only a CUDA tensor fails (with the runtime's reason).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
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
// Device to host without waiting: dst must be pinned (allocPinned); read it once a fence
// recorded after this call has passed.
void copyToHostAsync(void* dst, const void* src, size_t bytes);
void synchronize();  // waits for every op enqueued so far (no-op before the first CUDA call)

// Page-locked host memory, so host-to-device copies from it are asynchronous; nullptr where
// there is no CUDA device (the caller falls back to ordinary memory). freePinned first waits
// for the uploads that may still read it.
void* allocPinned(size_t bytes) noexcept;
void freePinned(void* p) noexcept;

// One region of an upload: rows x cols elements of elemBytes from src (rows contiguous)
// into dst, whose rows are dstPitch bytes apart.
struct UploadRegion {
  void* dst;
  size_t dstPitch;
  const void* src;
  size_t rows, cols, elemBytes;
};
// Copies the regions on a side stream that first waits for every op enqueued so far; join:
// the stream waits for the copies before any op enqueued later (the host does not wait, and
// the compute stream runs on until it needs the data); else only once awaitUploads() says.
void upload(const UploadRegion* regions, size_t count, bool join);
// Every op enqueued from now on waits for the uploads enqueued so far. Not while capturing.
void awaitUploads();
// One window of a scatter (native/scatter.cc): rows x cols elements of elemBytes into dst
// (rows dstPitch bytes apart) from src, read contiguously (transposed: src holds the window
// as [cols, rows]). unit: the bytes one thread moves, a power of two that divides every
// address and width involved (elemBytes when transposed). Its blocks are those from
// firstBlock to the next job's.
struct ScatterJob {
  char* dst;
  const char* src;
  uint64_t dstPitch;
  uint32_t rows, cols, elemBytes, unit, transpose, firstBlock;
};
// Units of a job one block moves (the launcher's blocks per job follow from it).
constexpr uint32_t kScatterBlockUnits = 4096;
// Runs the jobs (in device memory, `count` of them, `blocks` blocks in all) on the stream:
// one kernel; zero: writes zeros instead of reading src.
void scatter(const ScatterJob* jobs, uint32_t count, uint32_t blocks, bool zero);
// Free and total bytes of the current device (cudaMemGetInfo); throws Error without one.
void memInfo(size_t* freeBytes, size_t* totalBytes);
// GB/s of the best of `passes` timed reads of a `bytes` buffer (after one to warm up), by a
// kernel that only reads, as a decode step reads its weights; throws Error without a device.
double readBandwidth(size_t bytes, int passes);
// Milliseconds a call of the work `enqueue` puts on the stream, over `reps` calls after one
// to warm up (events on the stream; waits for it). Not while capturing.
float timeOnStream(const std::function<void()>& enqueue, int reps);

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

// Host→device copies that return at once (copyFromAsync): the bytes go through a pinned
// buffer owned by this object, which is refilled only after its previous copy ran (an
// event guards it), so a caller that writes a tensor once per step never waits.
class Staging {
 public:
  Staging() = default;
  ~Staging();  // waits for a pending copy before freeing the pinned buffer
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  // The pinned buffer (at least `bytes`), once its previous copy is done.
  void* reserve(size_t bytes);
  // Enqueues a copy of its first `bytes` to dst on the stream and records the guard event.
  void send(void* dst, size_t bytes);

 private:
  void* pinned_ = nullptr;
  size_t capacity_ = 0;
  void* done_ = nullptr;  // cudaEvent_t
  bool pending_ = false;
};

// A marker in the stream (a CUDA event): record() marks the ops enqueued so far, wait()
// returns once they ran, done() says whether they have without waiting. A timed fence also
// tells the GPU time between two of them (msSince). None may be called while a graph is
// being captured.
class Fence {
 public:
  explicit Fence(bool timed = false) : timed_(timed) {}
  ~Fence();
  Fence(const Fence&) = delete;
  Fence& operator=(const Fence&) = delete;
  void record();
  void wait();  // returns at once if never recorded
  bool done();  // true if never recorded
  // Milliseconds from `earlier` to this one; both timed, recorded and passed.
  float msSince(const Fence& earlier) const;

 private:
  void* event_ = nullptr;  // cudaEvent_t
  bool recorded_ = false;
  bool timed_;
};

// ---- CUDA graphs ------------------------------------------------------------------------
// Stream capture on the one stream (cudaStreamCaptureModeThreadLocal). While capturing:
//  - kernels and stream-ordered allocations/frees are recorded, not run;
//  - anything that waits for the GPU (copyToDevice, copyToHost, synchronize, Staging,
//    Uploader) throws instead of invalidating the capture;
//  - memory allocated before the capture and released during it (a tensor collected by
//    the GC, say) is freed once the capture ends, not inside the graph.
// Memory allocated during the capture must be released during it (scratch); endCapture
// fails otherwise, since the graph would hand out that memory on every replay.
struct Graph;
bool capturing() noexcept;
void beginCapture();
// Ends the capture and instantiates the graph; throws (the capture discarded) on failure.
Graph* endCapture();
// Ends a capture whose recording failed, discarding it. Never throws.
void abortCapture() noexcept;
void launchGraph(Graph* g);                // asynchronous on the stream
size_t graphNodes(const Graph* g) noexcept;  // nodes of the captured graph (kernels, memsets, ...)
void destroyGraph(Graph* g) noexcept;      // safe while a launch is in flight

}  // namespace mstar::gpu
