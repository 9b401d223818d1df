#include "file_read.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "gpu.h"
#include "tensor.h"

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

}  // namespace

Napi::Value ReadInto(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Tensor& dst = Tensor::From(info[0], "readInto: dst");
  int64_t dstOffset = info[1].As<Napi::Number>().Int64Value();
  std::string path = info[2].ToString().Utf8Value();
  int64_t fileOffset = info[3].As<Napi::Number>().Int64Value();
  DType src;
  try {
    src = parseDType(info[4].ToString().Utf8Value());
  } catch (const std::invalid_argument& e) {
    throw Napi::TypeError::New(env, std::string("readInto: ") + e.what());
  }
  int64_t count = info[5].As<Napi::Number>().Int64Value();
  if (dstOffset < 0 || count < 0 || dstOffset + count > dst.numel())
    throw Napi::RangeError::New(env, "readInto: elements [" + std::to_string(dstOffset) + ", " +
                                         std::to_string(dstOffset + count) + ") do not fit in " + dst.describe());
  if (isFloat(src) != isFloat(dst.dtype()) || (!isFloat(src) && src != dst.dtype()))
    throw Napi::TypeError::New(env, std::string("readInto: cannot store ") + dtypeName(src) + " data in a " +
                                        dtypeName(dst.dtype()) + " tensor");
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) throw Napi::Error::New(env, path + ": cannot open: " + std::strerror(errno));

  size_t srcSize = dtypeSize(src), dstSize = dtypeSize(dst.dtype());
  char* out = static_cast<char*>(dst.data()) + size_t(dstOffset) * dstSize;
  // Convert through a bounded staging buffer so huge tensors need no second full copy.
  const size_t chunk = (size_t(8) << 20) / std::max(srcSize, dstSize);
  try {
    if (dst.device() == Device::CUDA) {
      // Read (and convert) into one pinned buffer while the other is copied to the device.
      gpu::Uploader up(std::min<size_t>(chunk, size_t(count)) * dstSize);
      std::vector<char> staging(src == dst.dtype() ? 0 : std::min<size_t>(chunk, size_t(count)) * srcSize);
      for (int64_t done = 0; done < count;) {
        size_t n = std::min<size_t>(chunk, size_t(count - done));
        char* pinned = static_cast<char*>(up.buffer());
        off_t at = off_t(fileOffset + done * int64_t(srcSize));
        if (src == dst.dtype()) {
          preadAll(fd.fd, pinned, n * srcSize, at, path);
        } else {
          preadAll(fd.fd, staging.data(), n * srcSize, at, path);
          convertFloats(pinned, dst.dtype(), staging.data(), src, n);
        }
        up.send(out + size_t(done) * dstSize, n * dstSize);
        done += int64_t(n);
      }
    } else if (src == dst.dtype()) {
      preadAll(fd.fd, out, size_t(count) * srcSize, off_t(fileOffset), path);
    } else {
      std::vector<char> staging(std::min<size_t>(chunk, size_t(count)) * srcSize);
      for (int64_t done = 0; done < count;) {
        size_t n = std::min<size_t>(chunk, size_t(count - done));
        preadAll(fd.fd, staging.data(), n * srcSize, off_t(fileOffset + done * int64_t(srcSize)), path);
        convertFloats(out + size_t(done) * dstSize, dst.dtype(), staging.data(), src, n);
        done += int64_t(n);
      }
    }
  } catch (const gpu::Error& e) {
    throw Napi::Error::New(env, std::string("readInto: ") + e.what());
  } catch (const std::runtime_error& e) {
    throw Napi::Error::New(env, e.what());
  }
  return env.Undefined();
}

}  // namespace mstar
