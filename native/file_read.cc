#include "file_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gpu.h"
#include "tensor.h"
#include "js_int.h"

namespace mstar {
namespace {

struct Fd {
  int fd;
  explicit Fd(int fd) : fd(fd) {}
  ~Fd() { if (fd >= 0) ::close(fd); }
};

void preadAll(int fd, char* dst, size_t n, off_t offset, const std::string& path) {
  while (n > 0) {
    ssize_t got = ::pread(fd, dst, n, offset);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw std::runtime_error(path + ": read failed at byte " + std::to_string(offset) + ": " + std::strerror(errno));
    if (got == 0) throw std::runtime_error(path + ": unexpected end of file at byte " + std::to_string(offset) + " (truncated?)");
    dst += got;
    n -= size_t(got);
    offset += got;
  }
}

// Throws before anything is read when the file ends before fileOffset + bytes: a read that
// failed halfway would leave dst half written (a refused call changes nothing).
void checkFileHolds(int fd, const std::string& path, int64_t fileOffset, int64_t bytes) {
  struct stat st;
  if (::fstat(fd, &st) != 0) throw std::runtime_error(path + ": cannot stat: " + std::strerror(errno));
  if (int64_t(st.st_size) < fileOffset || int64_t(st.st_size) - fileOffset < bytes)
    throw std::runtime_error(path + ": unexpected end of file: bytes [" + std::to_string(fileOffset) + ", " +
                             std::to_string(fileOffset + bytes) + ") were asked for, the file has " +
                             std::to_string(int64_t(st.st_size)) + " (truncated?)");
}

}  // namespace

namespace {

// One readInto call's arguments, checked.
struct ReadArgs {
  Tensor* dst;
  int64_t dstOffset;
  std::string path;
  int64_t fileOffset;
  DType src;
  int64_t count;
  // Each element is multiplied by it before the rounding into dst (a LoRA B takes its
  // adapter's alpha / r this way: one rounding, as a copy with scale on the device does).
  float scale;
};

ReadArgs parseRead(const Napi::CallbackInfo& info, const char* op) {
  Napi::Env env = info.Env();
  const std::string o(op);
  // Every argument that can run JS (a toString, a getter) is read before dst is unwrapped:
  // such code could dispose dst under us.
  if (!info[2].IsString()) throw Napi::TypeError::New(env, o + ": path must be a string");
  if (!info[4].IsString()) throw Napi::TypeError::New(env, o + ": dtype must be a string");
  std::string path = info[2].As<Napi::String>().Utf8Value();
  DType src;
  try {
    src = parseDType(info[4].As<Napi::String>().Utf8Value());
  } catch (const std::invalid_argument& e) {
    throw Napi::TypeError::New(env, o + ": " + e.what());
  }
  const int64_t dstOffset = safeInteger(info[1], o + ": dstOffset");
  const int64_t fileOffset = safeInteger(info[3], o + ": fileOffset");
  const int64_t count = safeInteger(info[5], o + ": count");
  if (fileOffset < 0) throw Napi::RangeError::New(env, o + ": fileOffset must be >= 0");
  std::string name = o + ": dst";
  Tensor& dst = Tensor::From(info[0], name.c_str());
  if (dstOffset < 0 || count < 0 || dstOffset > dst.numel() || count > dst.numel() - dstOffset)
    throw Napi::RangeError::New(env, std::string(op) + ": elements [" + std::to_string(dstOffset) + ", " +
                                         std::to_string(dstOffset + count) + ") do not fit in " + dst.describe());
  if (isFloat(src) != isFloat(dst.dtype()) || (!isFloat(src) && src != dst.dtype()))
    throw Napi::TypeError::New(env, std::string(op) + ": cannot store " + dtypeName(src) + " data in a " +
                                        dtypeName(dst.dtype()) + " tensor");
  const bool noScale = info[6].IsUndefined() || info[6].IsNull();
  if (!noScale && !info[6].IsNumber()) throw Napi::TypeError::New(env, std::string(op) + ": scale must be a number");
  const float scale = noScale ? 1.0f : float(info[6].As<Napi::Number>().DoubleValue());
  if (scale != 1.0f && !isFloat(src))
    throw Napi::TypeError::New(env, std::string(op) + ": a scale needs float data, got " + dtypeName(src));
  return {&dst, dstOffset, path, fileOffset, src, count, scale};
}

// n float elements of src (type s) times scale, rounded into dst (type d).
void convertScaled(char* dst, DType d, const char* src, DType s, size_t n, float scale) {
  if (scale == 1.0f) return convertFloats(dst, d, src, s, n);
  for (size_t i = 0; i < n; ++i) storeFloat(dst, d, i, scale * loadFloat(src, s, i));
}

// Reads into host memory; throws std::runtime_error naming the file.
void readToHost(char* out, DType dstType, int fd, const std::string& path, int64_t fileOffset, DType src, int64_t count,
                float scale) {
  size_t srcSize = dtypeSize(src), dstSize = dtypeSize(dstType);
  if (src == dstType && scale == 1.0f) {
    preadAll(fd, out, size_t(count) * srcSize, off_t(fileOffset), path);
    return;
  }
  // Convert through a bounded staging buffer so huge tensors need no second full copy.
  const size_t chunk = (size_t(8) << 20) / std::max(srcSize, dstSize);
  std::vector<char> staging(std::min<size_t>(chunk, size_t(count)) * srcSize);
  for (int64_t done = 0; done < count;) {
    size_t n = std::min<size_t>(chunk, size_t(count - done));
    preadAll(fd, staging.data(), n * srcSize, off_t(fileOffset + done * int64_t(srcSize)), path);
    convertScaled(out + size_t(done) * dstSize, dstType, staging.data(), src, n, scale);
    done += int64_t(n);
  }
}

// The index of the first of n values of a float dtype that is NaN or ±Inf, or -1.
int64_t firstNonFinite(const char* p, DType d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (d == DType::F32) {
      if (!std::isfinite(reinterpret_cast<const float*>(p)[i])) return i;
      continue;
    }
    const uint16_t v = reinterpret_cast<const uint16_t*>(p)[i];
    const uint16_t exponent = d == DType::BF16 ? 0x7F80 : 0x7C00;  // all ones: Inf or NaN
    if ((v & exponent) == exponent) return i;
  }
  return -1;
}

// readIntoAsync's work on the libuv pool: the tensor's storage is held until it is done.
class ReadWorker : public Napi::AsyncWorker {
 public:
  ReadWorker(Napi::Env env, const ReadArgs& a)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), storage_(a.dst->storage()),
        out_(static_cast<char*>(a.dst->data()) + size_t(a.dstOffset) * dtypeSize(a.dst->dtype())),
        dstType_(a.dst->dtype()), path_(a.path), fileOffset_(a.fileOffset), src_(a.src), count_(a.count), scale_(a.scale) {}

  Napi::Promise promise() { return deferred_.Promise(); }

  void Execute() override {
    Fd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.fd < 0) return SetError(path_ + ": cannot open: " + std::strerror(errno));
    try {
      checkFileHolds(fd.fd, path_, fileOffset_, count_ * int64_t(dtypeSize(src_)));
      readToHost(out_, dstType_, fd.fd, path_, fileOffset_, src_, count_, scale_);
      const int64_t bad = isFloat(dstType_) ? firstNonFinite(out_, dstType_, count_) : -1;
      if (bad >= 0)
        return SetError(path_ + ": value " + std::to_string(bad) + " of the " + std::to_string(count_) + " read at byte " +
                        std::to_string(fileOffset_) + " is not finite (NaN or ±Inf" +
                        (scale_ != 1.0f || dstType_ != src_ ? " once scaled and stored as " + std::string(dtypeName(dstType_)) : "") + ")");
    } catch (const std::runtime_error& e) {
      SetError(e.what());
    }
  }
  void OnOK() override { deferred_.Resolve(Env().Undefined()); }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  std::shared_ptr<Storage> storage_;
  char* out_;
  DType dstType_;
  std::string path_;
  int64_t fileOffset_;
  DType src_;
  int64_t count_;
  float scale_;
};

}  // namespace

// readIntoAsync(...readInto's arguments): the same read on a libuv thread, into a host
// tensor; resolves when the bytes are in place, rejects when one of the values is not finite
// (there, or once scaled and rounded). Adapters load this way so a disk read never stalls the
// engine's steps; a NaN in one adapter's b would reach every row of a step (each row's GEMM
// multiplies the other slots' b by zeros).
Napi::Value ReadIntoAsync(const Napi::CallbackInfo& info) {
  ReadArgs a = parseRead(info, "readIntoAsync");
  if (a.dst->device() != Device::CPU) throw Napi::TypeError::New(info.Env(), "readIntoAsync: dst must be a cpu tensor");
  auto* w = new ReadWorker(info.Env(), a);
  Napi::Promise p = w->promise();
  w->Queue();
  return p;
}

Napi::Value ReadInto(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ReadArgs a = parseRead(info, "readInto");
  Tensor& dst = *a.dst;
  const std::string& path = a.path;
  int64_t fileOffset = a.fileOffset, count = a.count, dstOffset = a.dstOffset;
  DType src = a.src;
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) throw Napi::Error::New(env, path + ": cannot open: " + std::strerror(errno));

  size_t srcSize = dtypeSize(src), dstSize = dtypeSize(dst.dtype());
  char* out = static_cast<char*>(dst.data()) + size_t(dstOffset) * dstSize;
  // Convert through a bounded staging buffer so huge tensors need no second full copy.
  const size_t chunk = (size_t(8) << 20) / std::max(srcSize, dstSize);
  try {
    checkFileHolds(fd.fd, path, fileOffset, count * int64_t(srcSize));
    if (dst.device() == Device::CUDA) {
      // Read (and convert) into one pinned buffer while the other is copied to the device.
      gpu::Uploader up(std::min<size_t>(chunk, size_t(count)) * dstSize);
      std::vector<char> staging(src == dst.dtype() && a.scale == 1.0f ? 0 : std::min<size_t>(chunk, size_t(count)) * srcSize);
      for (int64_t done = 0; done < count;) {
        size_t n = std::min<size_t>(chunk, size_t(count - done));
        char* pinned = static_cast<char*>(up.buffer());
        off_t at = off_t(fileOffset + done * int64_t(srcSize));
        if (src == dst.dtype() && a.scale == 1.0f) {
          preadAll(fd.fd, pinned, n * srcSize, at, path);
        } else {
          preadAll(fd.fd, staging.data(), n * srcSize, at, path);
          convertScaled(pinned, dst.dtype(), staging.data(), src, n, a.scale);
        }
        up.send(out + size_t(done) * dstSize, n * dstSize);
        done += int64_t(n);
      }
    } else {
      readToHost(out, dst.dtype(), fd.fd, path, fileOffset, src, count, a.scale);
    }
  } catch (const gpu::Error& e) {
    throw Napi::Error::New(env, std::string("readInto: ") + e.what());
  } catch (const std::runtime_error& e) {
    throw Napi::Error::New(env, e.what());
  }
  return env.Undefined();
}

}  // namespace mstar
