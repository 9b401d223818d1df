// scatterPlan(regions): windows of tensors, each filled from a span of a source tensor on
// the same device, checked and laid out once (on cuda, a job table in device memory) and
// then run as often as needed, in stream order, by one kernel (gpu::scatter). It is how an
// adapter reaches a GPU slot: its host image is copied whole into a device staging tensor,
// and the slot's plan puts every module's A and B where the slot keeps them
// (lib/lora/slot_image.ts). run(true) zeroes the windows instead.
#include "scatter.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gpu.h"
#include "region_args.h"
#include "tensor.h"

namespace mstar {
namespace {

enum Key { kDst, kSrc, kAt, kRow, kCol, kRows, kCols, kTranspose };

// The widest unit (16 bytes down to 1) that divides every address and width of a copy.
uint32_t unitOf(const char* dst, uint64_t pitch, const char* src, uint64_t rowBytes) {
  const uint64_t all = reinterpret_cast<uintptr_t>(dst) | pitch | reinterpret_cast<uintptr_t>(src) | rowBytes;
  uint32_t unit = 16;
  while (unit > 1 && all % unit) unit /= 2;
  return unit;
}

// Region i checked and turned into a job (and its tensors); throws before anything is kept.
gpu::ScatterJob job(const RegionArgs& args, size_t i, Tensor** dstOut, Tensor** srcOut) {
  Tensor* dst = *dstOut = args.tensor(i, kDst);
  Tensor* src = *srcOut = args.tensor(i, kSrc);
  if (dst->rank() != 2) args.fail(i, "dst " + dst->describe() + " must be 2-D");
  if (src->device() != dst->device()) args.fail(i, "src and dst must be on one device");
  if (src->dtype() != dst->dtype()) args.fail(i, "src " + src->describe() + " must have dst's dtype (" + dst->describe() + ")");
  const Napi::Value& flag = args.get(i, kTranspose);
  if (!flag.IsUndefined() && !flag.IsBoolean()) args.fail(i, "transpose must be a boolean");
  const bool transpose = flag.IsBoolean() && flag.As<Napi::Boolean>().Value();
  const int64_t row = args.offset(i, kRow), col = args.offset(i, kCol);
  const int64_t rows = args.offset(i, kRows, dst->dim(0) - row), cols = args.offset(i, kCols, dst->dim(1) - col);
  const int64_t at = args.offset(i, kAt);
  if (rows < 0 || cols < 0 || row + rows > dst->dim(0) || col + cols > dst->dim(1))
    args.fail(i, "[" + std::to_string(rows) + ", " + std::to_string(cols) + "] at (" + std::to_string(row) + ", " +
                     std::to_string(col) + ") does not fit in dst " + dst->describe());
  if (at + rows * cols > src->numel())
    args.fail(i, std::to_string(rows * cols) + " elements from " + std::to_string(at) + " do not fit in src " + src->describe());
  const uint64_t elem = dtypeSize(dst->dtype());
  if (uint64_t(rows) * cols * elem >= (uint64_t(1) << 32)) args.fail(i, "a window must be under 4 GiB");
  gpu::ScatterJob j{};
  j.dst = static_cast<char*>(dst->data()) + (row * dst->dim(1) + col) * elem;
  j.src = static_cast<const char*>(src->data()) + at * elem;
  j.dstPitch = dst->dim(1) * elem;
  j.rows = uint32_t(rows);
  j.cols = uint32_t(cols);
  j.elemBytes = uint32_t(elem);
  j.transpose = transpose;
  j.unit = transpose ? j.elemBytes : unitOf(j.dst, j.dstPitch, j.src, cols * elem);
  return j;
}

// The windows on the host: the cpu backend's scatter.
void scatterOnHost(const std::vector<gpu::ScatterJob>& jobs, bool zero) {
  for (const gpu::ScatterJob& j : jobs) {
    const size_t width = size_t(j.cols) * j.elemBytes;
    for (uint32_t r = 0; r < j.rows; ++r) {
      char* d = j.dst + r * j.dstPitch;
      if (zero) std::memset(d, 0, width);
      else if (!j.transpose) std::memcpy(d, j.src + r * width, width);
      else
        for (uint32_t c = 0; c < j.cols; ++c) std::memcpy(d + c * j.elemBytes, j.src + (uint64_t(c) * j.rows + r) * j.elemBytes, j.elemBytes);
    }
  }
}

class ScatterPlan : public Napi::ObjectWrap<ScatterPlan> {
 public:
  static Napi::Function Init(Napi::Env env) {
    return DefineClass(env, "ScatterPlan", {
      InstanceMethod<&ScatterPlan::Run>("run"),
      InstanceMethod<&ScatterPlan::Dispose>("dispose"),
      InstanceAccessor<&ScatterPlan::Regions>("regions"),
    });
  }

  explicit ScatterPlan(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ScatterPlan>(info) {}

  // Takes the checked jobs and the storages they point into (kept alive with the plan).
  void build(Napi::Env env, std::vector<gpu::ScatterJob> jobs, std::vector<std::shared_ptr<Storage>> keep, bool cuda) {
    uint32_t blocks = 0;
    for (gpu::ScatterJob& j : jobs) {
      const uint64_t units = uint64_t(j.rows) * (j.transpose ? j.cols : uint64_t(j.cols) * j.elemBytes / j.unit);
      const uint64_t more = (units + gpu::kScatterBlockUnits - 1) / gpu::kScatterBlockUnits;
      if (blocks + more >= (uint64_t(1) << 31)) throw Napi::Error::New(env, "scatterPlan: the windows are too large for one kernel");
      j.firstBlock = blocks;
      blocks += uint32_t(more);
    }
    if (cuda && !jobs.empty()) {
      const size_t bytes = jobs.size() * sizeof(gpu::ScatterJob);
      withErrors(env, "scatterPlan", [&] {
        table_ = std::make_shared<Storage>(Device::CUDA, bytes);
        gpu::copyToDevice(table_->data, jobs.data(), bytes);
      });
    }
    jobs_ = std::move(jobs);
    keep_ = std::move(keep);
    cuda_ = cuda;
    blocks_ = blocks;
    live_ = true;
  }

 private:
  std::vector<gpu::ScatterJob> jobs_;
  std::vector<std::shared_ptr<Storage>> keep_;  // every dst and src: their memory outlives the plan's use
  std::shared_ptr<Storage> table_;              // cuda: jobs_ in device memory
  bool cuda_ = false, live_ = false;
  uint32_t blocks_ = 0;

  Napi::Value Run(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!live_) throw Napi::Error::New(env, "ScatterPlan was disposed");
    if (!info[0].IsUndefined() && !info[0].IsBoolean()) throw Napi::TypeError::New(env, "scatterPlan.run: zero must be a boolean");
    const bool zero = info[0].IsBoolean() && info[0].As<Napi::Boolean>().Value();
    if (!cuda_) scatterOnHost(jobs_, zero);
    else if (table_)
      withErrors(env, "scatterPlan.run", [&] {
        gpu::scatter(static_cast<const gpu::ScatterJob*>(table_->data), uint32_t(jobs_.size()), blocks_, zero);
      });
    return env.Undefined();
  }
  Napi::Value Regions(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), double(jobs_.size())); }
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    live_ = false;
    jobs_.clear();
    keep_.clear();
    table_.reset();
    return info.Env().Undefined();
  }
};

// info.Data(): this env's ScatterPlan constructor.
Napi::Value MakeScatterPlan(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const RegionArgs args(env, info[0], "scatterPlan", {"dst", "src", "at", "row", "col", "rows", "cols", "transpose"});
  std::vector<gpu::ScatterJob> jobs;
  std::vector<std::shared_ptr<Storage>> keep;
  bool cuda = false;
  for (size_t i = 0; i < args.size(); ++i) {
    Tensor *dst, *src;
    const gpu::ScatterJob j = job(args, i, &dst, &src);
    if (i == 0) cuda = dst->device() == Device::CUDA;
    else if (cuda != (dst->device() == Device::CUDA)) args.fail(i, "dst is on another device than region 0's");
    keep.push_back(dst->storage());
    keep.push_back(src->storage());
    if (j.rows && j.cols) jobs.push_back(j);
  }
  Napi::Object plan = static_cast<Napi::FunctionReference*>(info.Data())->New({});
  ScatterPlan::Unwrap(plan)->build(env, std::move(jobs), std::move(keep), cuda);
  return plan;
}

}  // namespace

void RegisterScatter(Napi::Env env, Napi::Object exports) {
  auto* ctor = new Napi::FunctionReference(Napi::Persistent(ScatterPlan::Init(env)));
  env.AddCleanupHook([ctor] { delete ctor; });
  exports["scatterPlan"] = Napi::Function::New<MakeScatterPlan>(env, "scatterPlan", ctor);
}

}  // namespace mstar
