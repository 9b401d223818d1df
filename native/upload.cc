// pinnedEmpty and upload: how an adapter's host copy reaches its GPU slot without the
// engine waiting. The host cache keeps each adapter in page-locked memory, laid out as
// the slot holds it, so loading a slot is a batch of asynchronous region copies on a side
// stream (gpu::upload) instead of a synchronous copy and a kernel per tensor.
#include <napi.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpu.h"
#include "js_int.h"
#include "tensor.h"

namespace mstar {
namespace {

[[noreturn]] void fail(Napi::Env env, size_t i, const std::string& msg) {
  throw Napi::Error::New(env, "upload: region " + std::to_string(i) + ": " + msg);
}

// One region's fields as JS values, read first for every region: reading them may run JS
// (a getter) that could dispose a tensor already unwrapped.
struct RegionFields {
  Napi::Value dst, src, row, col, rows, cols;
};

RegionFields fields(Napi::Env env, const Napi::Value& v, size_t i) {
  if (!v.IsObject()) fail(env, i, "must be an object {dst, src?, row?, col?, rows?, cols?}");
  Napi::Object o = v.As<Napi::Object>();
  return {o.Get("dst"), o.Get("src"), o.Get("row"), o.Get("col"), o.Get("rows"), o.Get("cols")};
}

// A region's fields checked and turned into a region (and dst's device); runs no JS, and
// throws before anything is copied.
gpu::UploadRegion region(Napi::Env env, const RegionFields& f, size_t i, Device* device) {
  auto tensor = [&](const Napi::Value& t, const char* key) -> Tensor* {
    if (t.IsUndefined() || t.IsNull()) return nullptr;
    if (!Tensor::Is(t)) fail(env, i, std::string(key) + " must be a Tensor");
    Tensor* x = Tensor::Unwrap(t.As<Napi::Object>());
    if (x->disposed()) fail(env, i, std::string(key) + " is a disposed Tensor");
    return x;
  };
  auto offset = [&](const Napi::Value& n, const char* key) -> int64_t {
    if (n.IsUndefined()) return 0;
    const int64_t d = safeInteger(n, "upload: region " + std::to_string(i) + ": " + key);
    if (d < 0) fail(env, i, std::string(key) + " must be an integer >= 0");
    return d;
  };
  Tensor* dst = tensor(f.dst, "dst");
  if (!dst) fail(env, i, "dst is missing");
  *device = dst->device();
  Tensor* src = tensor(f.src, "src");
  const size_t elem = dtypeSize(dst->dtype());
  const bool window = !f.rows.IsUndefined() || !f.cols.IsUndefined();
  if (!src && !window) return {dst->data(), dst->bytes(), nullptr, 1, size_t(dst->numel()), elem};
  if (src && window) fail(env, i, "rows and cols are for a region without src (src gives its own shape)");
  if (src && src->device() != Device::CPU) fail(env, i, "src must be a cpu tensor, got a " + src->describe() + " on cuda");
  if (dst->rank() != 2 || (src && src->rank() != 2))
    fail(env, i, "dst " + dst->describe() + (src ? " and src " + src->describe() + " must" : " must") + " be 2-D");
  if (src && dst->dtype() != src->dtype()) fail(env, i, "src " + src->describe() + " must have dst's dtype (" + dst->describe() + ")");
  const int64_t row = offset(f.row, "row"), col = offset(f.col, "col");
  // Zeroing a window: rows x cols from (row, col), by default to dst's last row and column.
  const int64_t rows = src ? src->dim(0) : f.rows.IsUndefined() ? dst->dim(0) - row : offset(f.rows, "rows");
  const int64_t cols = src ? src->dim(1) : f.cols.IsUndefined() ? dst->dim(1) - col : offset(f.cols, "cols");
  if (row + rows > dst->dim(0) || col + cols > dst->dim(1))
    fail(env, i, (src ? "src " + src->describe() : "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]") + " at (" +
                     std::to_string(row) + ", " + std::to_string(col) + ") does not fit in dst " + dst->describe());
  char* at = static_cast<char*>(dst->data()) + size_t(row * dst->dim(1) + col) * elem;
  return {at, size_t(dst->dim(1)) * elem, src ? src->data() : nullptr, size_t(rows), size_t(cols), elem};
}

// upload(regions): see lib/addon/types.ts. Every region's dst is on one device.
Napi::Value Upload(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsArray()) throw Napi::TypeError::New(env, "upload: regions must be an array");
  Napi::Array list = info[0].As<Napi::Array>();
  std::vector<RegionFields> all;
  for (uint32_t i = 0; i < list.Length(); ++i) all.push_back(fields(env, list.Get(i), i));
  std::vector<gpu::UploadRegion> regions;
  bool cuda = false;
  for (size_t i = 0; i < all.size(); ++i) {
    Device device;
    regions.push_back(region(env, all[i], i, &device));
    if (i == 0) cuda = device == Device::CUDA;
    else if (cuda != (device == Device::CUDA)) fail(env, i, "dst is on another device than region 0's");
  }
  if (regions.empty()) return env.Undefined();
  if (cuda) return withErrors(env, "upload", [&] { gpu::upload(regions.data(), regions.size()); return env.Undefined(); });
  for (const gpu::UploadRegion& r : regions) {
    const size_t width = r.cols * r.elemBytes;
    for (size_t y = 0; y < r.rows; ++y) {
      char* d = static_cast<char*>(r.dst) + y * r.dstPitch;
      if (r.src) std::memcpy(d, static_cast<const char*>(r.src) + y * width, width);
      else std::memset(d, 0, width);
    }
  }
  return env.Undefined();
}

}  // namespace

void RegisterUpload(Napi::Env env, Napi::Object exports) {
  exports["pinnedEmpty"] = Napi::Function::New<PinnedEmpty>(env, "pinnedEmpty");
  exports["upload"] = Napi::Function::New<Upload>(env, "upload");
}

}  // namespace mstar
