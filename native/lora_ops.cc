// N-API bindings of the LoRA ops and of what loading a slot needs: region copies, fills,
// and comparing a saved base-weight copy with the loaded base weight.
#include <cmath>

#include "cpu/ops.h"
#include "gpu_ops.h"
#include "op_args.h"
#include "ops.h"

namespace mstar {
namespace {

void expectSlots(const OpArgs& a, const Tensor& slots, int64_t rows, int64_t numSlots) {
  a.expectDType(slots, DType::I32, "slotOfRow");
  a.expectShape(slots, {rows}, "slotOfRow");
  if (slots.device() != Device::CPU) return;  // the kernels treat a slot out of range as slot 0
  const int32_t* p = slots.ptr<int32_t>();
  for (int64_t i = 0; i < rows; ++i)
    a.expect(p[i] >= 0 && p[i] < numSlots, "slotOfRow[" + std::to_string(i) + "] = " + std::to_string(p[i]) +
                                               " is not one of the " + std::to_string(numSlots) + " slots");
}

// loraShrink(t [n, S*R], x [n, in], a [slots, S*R, in], slotOfRow [n])
Napi::Value LoraShrink(const Napi::CallbackInfo& info) {
  OpArgs a(info, "loraShrink");
  Tensor &t = a.tensor(0, "t"), &x = a.tensor(1, "x"), &w = a.tensor(2, "a"), &slots = a.tensor(3, "slotOfRow");
  bool cuda = a.oneDevice();
  DType act = a.expectAct(x, "x");
  a.expectRank(x, 2, "x");
  a.expectFloat(w, "a");
  a.expectRank(w, 3, "a");
  a.expect(w.dim(2) == x.dim(1), "a " + w.describe() + " ([slots, slices * rank, in]) does not match x " + x.describe());
  a.expectAct(t, "t");
  a.expectShape(t, {x.dim(0), w.dim(1)}, "t");
  expectSlots(a, slots, x.dim(0), w.dim(0));
  if (cuda) {
    a.run([&] {
      gpu::loraShrink(act, t.data(), x.data(), a.weights(w), w.dim(0), slots.ptr<int32_t>(), x.dim(0), x.dim(1), w.dim(1));
    });
    return info.Env().Undefined();
  }
  cpu::loraShrink(t.ptr<float>(), x.ptr<float>(), a.weights(w), slots.ptr<int32_t>(), x.dim(0), x.dim(1), w.dim(1));
  return info.Env().Undefined();
}

// loraExpand(out [n, outF], t [n, S*R], b [slots, outF, R], slotOfRow [n], sliceStarts [S+1])
Napi::Value LoraExpand(const Napi::CallbackInfo& info) {
  OpArgs a(info, "loraExpand");
  Tensor &out = a.tensor(0, "out"), &t = a.tensor(1, "t"), &w = a.tensor(2, "b");
  Tensor &slots = a.tensor(3, "slotOfRow"), &starts = a.tensor(4, "sliceStarts");
  bool cuda = a.oneDevice();
  DType act = a.expectAct(out, "out");
  a.expectRank(out, 2, "out");
  a.expectFloat(w, "b");
  a.expectRank(w, 3, "b");
  a.expect(w.dim(1) == out.dim(1), "b " + w.describe() + " ([slots, out, rank]) does not match out " + out.describe());
  a.expectDType(starts, DType::I32, "sliceStarts");
  a.expectRank(starts, 1, "sliceStarts");
  int64_t numSlices = starts.dim(0) - 1, rank = w.dim(2);
  a.expect(numSlices >= 1, "sliceStarts needs at least 2 entries");
  const int32_t* st = starts.ptr<int32_t>();
  if (!cuda) {  // on CUDA the values stay on the device; columns outside every slice get nothing
    a.expect(st[0] == 0 && st[numSlices] == out.dim(1), "sliceStarts must run from 0 to out's width");
    for (int64_t s = 0; s < numSlices; ++s) a.expect(st[s] <= st[s + 1], "sliceStarts must not decrease");
  }
  a.expectAct(t, "t");
  a.expectShape(t, {out.dim(0), numSlices * rank}, "t ([n, slices * rank])");
  expectSlots(a, slots, out.dim(0), w.dim(0));
  if (cuda) {
    a.run([&] {
      gpu::loraExpand(act, out.data(), t.data(), a.weights(w), w.dim(0), slots.ptr<int32_t>(), st, numSlices,
                      out.dim(0), out.dim(1), rank);
    });
    return info.Env().Undefined();
  }
  cpu::loraExpand(out.ptr<float>(), t.ptr<float>(), a.weights(w), slots.ptr<int32_t>(), st, numSlices, out.dim(0),
                  out.dim(1), rank);
  return info.Env().Undefined();
}

// copyRegion(dst [R, C], src [r, c], rowOffset, colOffset, scale, transpose)
Napi::Value CopyRegion(const Napi::CallbackInfo& info) {
  OpArgs a(info, "copyRegion");
  Tensor &dst = a.tensor(0, "dst"), &src = a.tensor(1, "src");
  int rowOffset = a.integer(2, "rowOffset"), colOffset = a.integer(3, "colOffset");
  float scale = float(a.number(4, "scale"));
  bool transpose = info[5].ToBoolean();
  bool cuda = a.oneDevice();
  a.expectFloat(dst, "dst");
  a.expectFloat(src, "src");
  a.expectRank(dst, 2, "dst");
  a.expectRank(src, 2, "src");
  int64_t rows = transpose ? src.dim(1) : src.dim(0), cols = transpose ? src.dim(0) : src.dim(1);
  a.expect(rowOffset + rows <= dst.dim(0) && colOffset + cols <= dst.dim(1),
           "src " + src.describe() + (transpose ? " transposed" : "") + " at (" + std::to_string(rowOffset) + ", " +
               std::to_string(colOffset) + ") does not fit in dst " + dst.describe());
  if (cuda)
    a.run([&] {
      gpu::copyRegion(dst.data(), dst.dtype(), dst.dim(1), src.data(), src.dtype(), src.dim(0), src.dim(1), rowOffset,
                      colOffset, scale, transpose);
    });
  else
    cpu::copyRegion(dst.data(), dst.dtype(), dst.dim(1), src.data(), src.dtype(), src.dim(0), src.dim(1), rowOffset,
                    colOffset, scale, transpose);
  return info.Env().Undefined();
}

// fill(t, value): every element of a float tensor set to value.
Napi::Value Fill(const Napi::CallbackInfo& info) {
  OpArgs a(info, "fill");
  Tensor& t = a.tensor(0, "t");
  float v = float(a.number(1, "value"));
  bool cuda = a.oneDevice();
  a.expectFloat(t, "t");
  if (cuda) {
    a.run([&] { gpu::fill(t.data(), t.dtype(), t.numel(), v); });
    return info.Env().Undefined();
  }
  float one = v;
  for (int64_t i = 0; i < t.numel(); ++i) convertFloats(static_cast<char*>(t.data()) + i * dtypeSize(t.dtype()), t.dtype(), &one, DType::F32, 1);
  return info.Env().Undefined();
}

// maxAbsDiff(a, b): the largest |a - b| over two float tensors of one shape (NaN if any is NaN).
Napi::Value MaxAbsDiff(const Napi::CallbackInfo& info) {
  OpArgs a(info, "maxAbsDiff");
  Tensor &x = a.tensor(0, "a"), &y = a.tensor(1, "b");
  bool cuda = a.oneDevice();
  a.expectFloat(x, "a");
  a.expectFloat(y, "b");
  a.expect(x.shape() == y.shape(), "a " + x.describe() + " and b " + y.describe() + " differ in shape");
  if (cuda) {
    double m = 0;
    a.run([&] { m = gpu::maxAbsDiff(x.data(), x.dtype(), y.data(), y.dtype(), x.numel()); });
    return Napi::Number::New(info.Env(), m);
  }
  double m = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    double d = std::fabs(double(loadFloat(x.data(), x.dtype(), size_t(i))) - loadFloat(y.data(), y.dtype(), size_t(i)));
    if (std::isnan(d)) return Napi::Number::New(info.Env(), NAN);
    m = std::max(m, d);
  }
  return Napi::Number::New(info.Env(), m);
}

}  // namespace

void RegisterLoraOps(Napi::Env env, Napi::Object exports) {
  exports["loraShrink"] = Napi::Function::New<LoraShrink>(env, "loraShrink");
  exports["loraExpand"] = Napi::Function::New<LoraExpand>(env, "loraExpand");
  exports["copyRegion"] = Napi::Function::New<CopyRegion>(env, "copyRegion");
  exports["fill"] = Napi::Function::New<Fill>(env, "fill");
  exports["maxAbsDiff"] = Napi::Function::New<MaxAbsDiff>(env, "maxAbsDiff");
}

}  // namespace mstar
