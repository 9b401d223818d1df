// N-API bindings of the LoRA ops and of what loading a slot needs: region copies, fills,
// and comparing a saved base-weight copy with the loaded base weight.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/ops.h"
#include "gpu_ops.h"
#include "op_args.h"
#include "op_checks.h"
#include "ops.h"

namespace mstar {
namespace {

// A shrink's slotRanks [slots, slices]: the slices come from its shape (a's rank rows must
// split evenly into them).
gpu::SlotRanks shrinkRanks(const OpArgs& a, const Tensor* ranks, const Tensor& w) {
  if (!ranks) return {};
  const int64_t slices = ranks->rank() == 2 ? ranks->dim(1) : 0;
  a.expect(slices > 0 && w.dim(1) % slices == 0,
           [&] { return "slotRanks " + ranks->describe() + " must be [slots, slices] with the " +
               std::to_string(w.dim(1)) + " rank rows of a split evenly over its slices"; });
  return {expectSlotRanks(a, ranks, w.dim(0), slices, w.dim(1) / slices), slices};
}

// Whether two tensors' elements share memory.
bool overlap(const Tensor& x, const Tensor& y) {
  const char *a = static_cast<const char*>(x.data()), *b = static_cast<const char*>(y.data());
  return a < b + y.bytes() && b < a + x.bytes();
}

// The shrink of x's rows on the CPU into t: narrow, or (wide) joined with x (cpu::joinWide).
void cpuShrink(const OpArgs& a, float* t, bool wide, const float* x, const Tensor& la, const Tensor& slots, int64_t n,
               int64_t in, const gpu::SlotRanks& sr) {
  std::vector<float> narrow(wide ? size_t(n * la.dim(1)) : 0);
  float* dst = wide ? narrow.data() : t;
  cpu::loraShrink(dst, x, a.weights(la), slots.ptr<int32_t>(), n, in, la.dim(1), sr.ranks, sr.ranks ? sr.slices : 1);
  if (wide) cpu::joinWide(t, x, dst, slots.ptr<int32_t>(), la.dim(0), n, in, la.dim(1));
}

// loraShrink(t, x [n, in], a [slots, S*R, in], slotOfRow [n], slotRanks? [slots, S]): t is
// [n, S*R] (each row's own slot), or wide, [n, in + slots*S*R]: x, then every slot's rank rows
// (the row's own, zeros in the others'), the input of a weight that carries b beside W.
Napi::Value LoraShrink(const Napi::CallbackInfo& info) {
  OpArgs a(info, "loraShrink");
  Tensor &t = a.tensor(0, "t"), &x = a.tensor(1, "x"), &w = a.tensor(2, "a"), &slots = a.tensor(3, "slotOfRow");
  Tensor* ranks = a.optionalTensor(4, "slotRanks");
  bool cuda = a.oneDevice();
  const bool wide = t.rank() == 2 && w.rank() == 3 && x.rank() == 2 && t.dim(1) == wideWidth(w, x.dim(1));
  expectShrink(a, t, x, "x", w, slots, wide);
  // The kernels read x where t is written only for a wide row made in place, which no caller asks for.
  a.expect(!overlap(x, t), [&] { return "x " + x.describe() + " and t " + t.describe() + " share memory"; });
  const gpu::SlotRanks sr = shrinkRanks(a, ranks, w);
  DType act = x.dtype();
  if (cuda) {
    a.run([&] {
      gpu::loraShrink(act, t.data(), x.data(), a.weights(w), w.dim(0), slots.ptr<int32_t>(), x.dim(0), x.dim(1), w.dim(1),
                      sr, wide);
    });
    return info.Env().Undefined();
  }
  cpuShrink(a, t.ptr<float>(), wide, x.ptr<float>(), w, slots, x.dim(0), x.dim(1), sr);
  return info.Env().Undefined();
}

// loraExpand(out [n, outF], t [n, S*R], b [outF, slots, S*R], slotOfRow [n], sliceStarts (Int32Array, S + 1),
// slotRanks? [slots, S])
// (b[o, slot] holds o's slice's R entries at that slice's place, zeros elsewhere: with t's rows
// spread over every slot's place and zero outside their own, the expand is one GEMM, see
// loraJoin.)
Napi::Value LoraExpand(const Napi::CallbackInfo& info) {
  OpArgs a(info, "loraExpand");
  Tensor &out = a.tensor(0, "out"), &t = a.tensor(1, "t"), &w = a.tensor(2, "b");
  Tensor& slots = a.tensor(3, "slotOfRow");
  Tensor* ranks = a.optionalTensor(5, "slotRanks");
  bool cuda = a.oneDevice();
  const cpu::SliceStarts slices = expectExpand(a, out, t, w, slots, 4);
  const int64_t rank = w.dim(2) / slices.count;
  const int32_t* sr = expectSlotRanks(a, ranks, w.dim(1), slices.count, rank);
  DType act = out.dtype();
  if (cuda) {
    a.run([&] {
      gpu::loraExpand(act, out.data(), t.data(), a.weights(w), w.dim(1), slots.ptr<int32_t>(), slices, out.dim(0),
                      out.dim(1), rank, {sr, slices.count});
    });
    return info.Env().Undefined();
  }
  cpu::loraExpand(out.ptr<float>(), t.ptr<float>(), a.weights(w), w.dim(1), slots.ptr<int32_t>(), slices, out.dim(0),
                  out.dim(1), rank, sr);
  return info.Env().Undefined();
}

// linearExpand(out, x, w, bias, t, b, slotOfRow, sliceStarts, accumulate?, slotRanks?): linear (out += with
// accumulate), then loraExpand into its output: on CUDA the expand is the decode GEMV's epilogue.
Napi::Value LinearExpand(const Napi::CallbackInfo& info) {
  OpArgs a(info, "linearExpand");
  Tensor &out = a.tensor(0, "out"), &x = a.tensor(1, "x"), &w = a.tensor(2, "w");
  Tensor* bias = a.optionalTensor(3, "bias");
  Tensor &t = a.tensor(4, "t"), &lb = a.tensor(5, "b"), &slots = a.tensor(6, "slotOfRow");
  const bool accumulate = a.flag(8);
  Tensor* ranks = a.optionalTensor(9, "slotRanks");
  bool cuda = a.oneDevice();
  cpu::Weights bw{};
  DType act = expectLinear(a, out, x, w, bias, &bw);
  const cpu::SliceStarts slices = expectExpand(a, out, t, lb, slots, 7);
  const int64_t rank = lb.dim(2) / slices.count;
  const int32_t* sr = expectSlotRanks(a, ranks, lb.dim(1), slices.count, rank);
  const int64_t n = x.dim(0), in = x.dim(1), outF = w.dim(0);
  if (cuda) {
    a.run([&] {
      gpu::linearExpand(act, out.data(), x.data(), linearWeights(a, w), bias ? &bw : nullptr, n, in, outF,
                        {t.data(), a.weights(lb), lb.dim(1), slots.ptr<int32_t>(), slices, rank, {sr, slices.count}},
                        accumulate);
    });
    return info.Env().Undefined();
  }
  // Accumulating, the delta (projection plus adapter) is made first and then added, in
  // transformers' order: residual + (base + lora).
  std::vector<float> delta(accumulate ? size_t(n * outF) : 0);
  float* y = accumulate ? delta.data() : out.ptr<float>();
  cpu::linear(y, x.ptr<float>(), linearWeights(a, w), bias ? &bw : nullptr, n, in, outF);
  cpu::loraExpand(y, t.ptr<float>(), a.weights(lb), lb.dim(1), slots.ptr<int32_t>(), slices, n, outF, rank, sr);
  if (accumulate) cpu::add(out.ptr<float>(), out.ptr<float>(), y, n * outF);
  return info.Env().Undefined();
}

// copyRegion(dst [R, C], src [r, c], rowOffset, colOffset, scale, transpose, srcCols?): srcCols
// copies only src's first srcCols columns (narrowing a wide weight back).
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
  const int64_t srcCols = a.given(6) ? a.integer(6, "srcCols", 1) : src.dim(1);
  a.expect(srcCols <= src.dim(1),
           [&] { return "srcCols " + std::to_string(srcCols) + " is past src " + src.describe(); });
  int64_t rows = transpose ? srcCols : src.dim(0), cols = transpose ? src.dim(0) : srcCols;
  a.expect(rowOffset + rows <= dst.dim(0) && colOffset + cols <= dst.dim(1),
           [&] { return "src " + src.describe() + (transpose ? " transposed" : "") + " at (" + std::to_string(rowOffset) + ", " +
               std::to_string(colOffset) + ") does not fit in dst " + dst.describe(); });
  if (cuda)
    a.run([&] {
      gpu::copyRegion(dst.data(), dst.dtype(), dst.dim(1), src.data(), src.dtype(), src.dim(0), srcCols, rowOffset,
                      colOffset, scale, transpose, src.dim(1));
    });
  else
    cpu::copyRegion(dst.data(), dst.dtype(), dst.dim(1), src.data(), src.dtype(), src.dim(0), srcCols, rowOffset,
                    colOffset, scale, transpose, src.dim(1));
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
  // The value converted once, then stored into every element. (Converting element by
  // element took ~0.25 s for an 8B adapter's 44 M-element host image.)
  if (dtypeSize(t.dtype()) == 4) {
    std::fill_n(t.ptr<float>(), t.numel(), v);
  } else {
    uint16_t bits;
    convertFloats(&bits, t.dtype(), &v, DType::F32, 1);
    std::fill_n(t.ptr<uint16_t>(), t.numel(), bits);
  }
  return info.Env().Undefined();
}

// loraJoin(wide [n, in + slots * W], x [n, in], s [n, slots * W], slotOfRow [n], slots): the wide row
// (see loraShrink) from x and a shrink by every slot's a at once (one GEMM): row r keeps only
// its slot's W columns of s (slot 0: none).
Napi::Value LoraJoin(const Napi::CallbackInfo& info) {
  OpArgs a(info, "loraJoin");
  Tensor &wide = a.tensor(0, "wide"), &x = a.tensor(1, "x"), &s = a.tensor(2, "s"), &slots = a.tensor(3, "slotOfRow");
  const int numSlots = a.integer(4, "slots", 1);
  bool cuda = a.oneDevice();
  const DType act = a.expectAct(x, "x");
  a.expectRank(x, 2, "x");
  a.expectAct(s, "s");
  a.expectRank(s, 2, "s");
  a.expect(s.dim(1) % numSlots == 0,
           [&] { return "s " + s.describe() + " must have slots * width columns, slots = " + std::to_string(numSlots); });
  a.expectShape(s, {x.dim(0), s.dim(1)}, "s");
  a.expectAct(wide, "wide");
  a.expectShape(wide, {x.dim(0), x.dim(1) + s.dim(1)}, "wide");
  expectSlotOfRow(a, slots, x.dim(0), numSlots);
  const int64_t n = x.dim(0), in = x.dim(1), width = s.dim(1) / numSlots;
  if (cuda) {
    a.run([&] { gpu::loraJoin(act, wide.data(), x.data(), s.data(), slots.ptr<int32_t>(), numSlots, n, in, width); });
    return info.Env().Undefined();
  }
  cpu::joinWide(wide.ptr<float>(), x.ptr<float>(), s.ptr<float>(), slots.ptr<int32_t>(), numSlots, n, in, width, true);
  return info.Env().Undefined();
}

// loraMerge(w [out, >= in], base [out, in], b [out, >= bCol + k], bCol, a [>= aRow + k, >= in], aRow, k): an
// adapter merged into its weight, w's first in columns = base + b's k columns from bCol · a's k
// rows from aRow (f32 sums, rounded once). b may be w itself (the pool's b sits beside W),
// from column in on.
Napi::Value LoraMerge(const Napi::CallbackInfo& info) {
  OpArgs a(info, "loraMerge");
  Tensor &w = a.tensor(0, "w"), &base = a.tensor(1, "base"), &b = a.tensor(2, "b");
  const int64_t bCol = a.integer(3, "bCol");
  Tensor& la = a.tensor(4, "a");
  const int64_t aRow = a.integer(5, "aRow"), k = a.integer(6, "k", 1);
  bool cuda = a.oneDevice();
  for (auto [t, name] : {std::pair<Tensor*, const char*>{&w, "w"}, {&base, "base"}, {&b, "b"}, {&la, "a"}}) {
    a.expectFloat(*t, name);
    a.expectRank(*t, 2, name);
    a.expect(t->dtype() == w.dtype(), [&] { return std::string(name) + " " + t->describe() + " is not of w's dtype"; });
  }
  const int64_t out = base.dim(0), in = base.dim(1);
  const auto at = [](int64_t x) { return std::to_string(x); };
  a.expect(w.dim(0) == out && w.dim(1) >= in, [&] { return "w " + w.describe() + " does not hold base " + base.describe(); });
  a.expect(b.dim(0) == out && bCol + k <= b.dim(1),
           [&] { return "b " + b.describe() + " has no " + at(k) + " columns from " + at(bCol) + " for " + at(out) + " rows"; });
  a.expect(aRow + k <= la.dim(0) && la.dim(1) >= in,
           [&] { return "a " + la.describe() + " has no " + at(k) + " rows of " + at(in) + " from row " + at(aRow); });
  // Sums of k floats for 8 rows sit in a kernel block's 48 KB of shared memory; its grid's rows are 8 a block.
  a.expect(k <= 1536 && out <= int64_t(8) * 65535, [&] { return "k " + at(k) + " or " + at(out) + " rows too many for loraMerge"; });
  a.expect(!overlap(w, base) && !overlap(w, la), [&] { return "w " + w.describe() + " shares memory with base or a"; });
  a.expect(!overlap(w, b) || (b.data() == w.data() && b.dim(1) == w.dim(1) && bCol >= in),
           [&] { return "b " + b.describe() + " overlaps w's first " + at(in) + " columns"; });
  const void* bp = static_cast<const char*>(b.data()) + bCol * int64_t(dtypeSize(b.dtype()));
  const void* ap = static_cast<const char*>(la.data()) + aRow * la.dim(1) * int64_t(dtypeSize(la.dtype()));
  if (cuda) a.run([&] { gpu::loraMerge(w.dtype(), w.data(), w.dim(1), base.data(), bp, b.dim(1), ap, la.dim(1), out, in, k); });
  else cpu::loraMerge(w.dtype(), w.data(), w.dim(1), base.data(), bp, b.dim(1), ap, la.dim(1), out, in, k);
  return info.Env().Undefined();
}

// maxAbsDiff(a, b): the largest |a - b| over two float tensors of one shape (NaN if any is NaN).
Napi::Value MaxAbsDiff(const Napi::CallbackInfo& info) {
  OpArgs a(info, "maxAbsDiff");
  Tensor &x = a.tensor(0, "a"), &y = a.tensor(1, "b");
  bool cuda = a.oneDevice();
  a.expectFloat(x, "a");
  a.expectFloat(y, "b");
  a.expect(x.shape() == y.shape(), [&] { return "a " + x.describe() + " and b " + y.describe() + " differ in shape"; });
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
  exports["linearExpand"] = Napi::Function::New<LinearExpand>(env, "linearExpand");
  exports["loraJoin"] = Napi::Function::New<LoraJoin>(env, "loraJoin");
  exports["copyRegion"] = Napi::Function::New<CopyRegion>(env, "copyRegion");
  exports["fill"] = Napi::Function::New<Fill>(env, "fill");
  exports["loraMerge"] = Napi::Function::New<LoraMerge>(env, "loraMerge");
  exports["maxAbsDiff"] = Napi::Function::New<MaxAbsDiff>(env, "maxAbsDiff");
}

}  // namespace mstar
