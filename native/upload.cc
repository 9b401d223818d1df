// pinnedEmpty and upload: how an adapter's host image reaches the device without the
// engine waiting. The host cache keeps each adapter in page-locked memory, so a slot load
// copies its image into the pool's staging tensors asynchronously, on a side stream
// (gpu::upload), before the slot's scatter plan places it (native/scatter.cc).
#include <napi.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpu.h"
#include "region_args.h"
#include "tensor.h"

namespace mstar {
namespace {

enum Key { kDst, kSrc, kRow, kCol };

// Region i checked and turned into a copy (and dst's device); throws before anything is copied.
gpu::UploadRegion region(const RegionArgs& args, size_t i, Device* device) {
  Tensor* dst = args.tensor(i, kDst);
  Tensor* src = args.tensor(i, kSrc);
  *device = dst->device();
  if (src->device() != Device::CPU) args.fail(i, "src must be a cpu tensor, got a " + src->describe() + " on cuda");
  if (dst->rank() != 2 || src->rank() != 2) args.fail(i, "dst " + dst->describe() + " and src " + src->describe() + " must be 2-D");
  if (dst->dtype() != src->dtype()) args.fail(i, "src " + src->describe() + " must have dst's dtype (" + dst->describe() + ")");
  const int64_t row = args.offset(i, kRow), col = args.offset(i, kCol);
  if (row + src->dim(0) > dst->dim(0) || col + src->dim(1) > dst->dim(1))
    args.fail(i, "src " + src->describe() + " at (" + std::to_string(row) + ", " + std::to_string(col) + ") does not fit in dst " + dst->describe());
  const size_t elem = dtypeSize(dst->dtype());
  char* at = static_cast<char*>(dst->data()) + size_t(row * dst->dim(1) + col) * elem;
  return {at, size_t(dst->dim(1)) * elem, src->data(), size_t(src->dim(0)), size_t(src->dim(1)), elem};
}

// upload(regions): see lib/addon/types.ts. Every region's dst is on one device.
Napi::Value Upload(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const RegionArgs args(env, info[0], "upload", {"dst", "src", "row", "col"});
  if (!info[1].IsUndefined() && !info[1].IsBoolean()) throw Napi::TypeError::New(env, "upload: join must be a boolean");
  const bool join = !info[1].IsBoolean() || info[1].As<Napi::Boolean>().Value();
  std::vector<gpu::UploadRegion> regions;
  bool cuda = false;
  for (size_t i = 0; i < args.size(); ++i) {
    Device device;
    regions.push_back(region(args, i, &device));
    if (i == 0) cuda = device == Device::CUDA;
    else if (cuda != (device == Device::CUDA)) args.fail(i, "dst is on another device than region 0's");
  }
  if (regions.empty()) return env.Undefined();
  if (cuda) return withErrors(env, "upload", [&] { gpu::upload(regions.data(), regions.size(), join); return env.Undefined(); });
  for (const gpu::UploadRegion& r : regions) {
    const size_t width = r.cols * r.elemBytes;
    for (size_t y = 0; y < r.rows; ++y)
      std::memcpy(static_cast<char*>(r.dst) + y * r.dstPitch, static_cast<const char*>(r.src) + y * width, width);
  }
  return env.Undefined();
}

// awaitUploads(): see lib/addon/types.ts.
Napi::Value AwaitUploads(const Napi::CallbackInfo& info) {
  withErrors(info.Env(), "awaitUploads", [] { gpu::awaitUploads(); });
  return info.Env().Undefined();
}

}  // namespace

void RegisterUpload(Napi::Env env, Napi::Object exports) {
  exports["pinnedEmpty"] = Napi::Function::New<PinnedEmpty>(env, "pinnedEmpty");
  exports["upload"] = Napi::Function::New<Upload>(env, "upload");
  exports["awaitUploads"] = Napi::Function::New<AwaitUploads>(env, "awaitUploads");
}

}  // namespace mstar
