#include "op_checks.h"

#include <algorithm>
#include <string>

#include "gpu_ops.h"

namespace mstar {

DType expectRmsNorm(OpArgs& a, const Tensor& out, const Tensor& x, const Tensor& w) {
  DType act = a.expectAct(x, "x");
  a.expectAct(out, "out");
  a.expectFloat(w, "w");
  a.expectRank(w, 1, "w");
  int64_t d = w.dim(0);
  a.expect(d > 0, [&] { return "w " + w.describe() + " must not be empty"; });  // rows = x.numel() / d
  a.expect(x.rank() >= 1 && x.dim(x.rank() - 1) == d,
           [&] { return "x " + x.describe() + " must end in the length of w " + w.describe(); });
  a.expect(out.numel() == x.numel(),
           [&] { return "out " + out.describe() + " must have as many elements as x " + x.describe(); });
  return act;
}

DType expectSiluMul(OpArgs& a, const Tensor& out, const Tensor& gu, bool wider) {
  DType act = a.expectAct(gu, "gateUp");
  a.expectRank(gu, 2, "gateUp");
  a.expectAct(out, "out");
  a.expectRank(out, 2, "out");
  if (wider) {
    a.expect(out.dim(0) == gu.dim(0) && gu.dim(1) >= 2 * out.dim(1),
             [&] { return "gateUp " + gu.describe() + " must have out's rows and at least twice its columns, out " + out.describe(); });
    return act;
  }
  a.expect(gu.dim(1) % 2 == 0, [&] { return "gateUp " + gu.describe() + " must have an even width (gate, then up)"; });
  a.expectShape(out, {gu.dim(0), gu.dim(1) / 2}, "out");
  return act;
}

DType expectAddRmsNorm(OpArgs& a, const Tensor& res, const Tensor& x, const Tensor& w, const Tensor& out, bool wider) {
  DType act = DType::F32;
  for (auto [t, n] : {std::pair<const Tensor*, const char*>{&res, "residual"}, {&x, "x"}, {&out, "out"}}) {
    act = a.expectAct(*t, n);
    a.expectRank(*t, 2, n);
  }
  a.expectFloat(w, "w");
  a.expectRank(w, 1, "w");
  a.expectShape(res, {res.dim(0), w.dim(0)}, "residual");
  if (wider)
    a.expect(x.dim(0) == res.dim(0) && x.dim(1) >= w.dim(0),
             [&] { return "x " + x.describe() + " must have residual's rows and at least its columns, residual " + res.describe(); });
  else
    a.expectShape(x, {res.dim(0), w.dim(0)}, "x");
  a.expectShape(out, {res.dim(0), w.dim(0)}, "out");
  return act;
}

DType expectLinear(OpArgs& a, const Tensor& out, const Tensor& x, const Tensor& w, const Tensor* bias,
                   cpu::Weights* biasWeights, int64_t wCol) {
  DType act = a.expectAct(x, "x");
  a.expectRank(x, 2, "x");
  a.expectFloat(w, "w");
  a.expectRank(w, 2, "w");
  a.expect(wCol < 0 ? x.dim(1) == w.dim(1) : wCol + x.dim(1) <= w.dim(1),
           [&] { return "w is " + w.describe() + " ([out, in]) but x " + x.describe() + " has " + std::to_string(x.dim(1)) +
               " columns" + (wCol >= 0 ? " from column " + std::to_string(wCol) : std::string()); });
  a.expectAct(out, "out");
  a.expectShape(out, {x.dim(0), w.dim(0)}, "out");
  if (bias) *biasWeights = expectBias(a, *bias, w.dim(0), "bias");
  return act;
}

cpu::Weights expectBias(OpArgs& a, const Tensor& bias, int64_t rows, const char* name) {
  a.expectFloat(bias, name);
  a.expectShape(bias, {rows}, name);
  return a.weights(bias);
}

cpu::Weights linearWeights(const OpArgs& a, const Tensor& w, int64_t wCol) {
  cpu::Weights v = a.weights(w);
  v.data = static_cast<const char*>(v.data) + std::max<int64_t>(wCol, 0) * int64_t(dtypeSize(w.dtype()));
  v.ld = w.dim(1);
  return v;
}

int64_t wideWidth(const Tensor& a, int64_t in) { return gpu::wideRowWidth(in, a.dim(0), a.dim(1)); }

void expectSlotOfRow(const OpArgs& a, const Tensor& slots, int64_t rows, int64_t numSlots) {
  a.expectDType(slots, DType::I32, "slotOfRow");
  a.expectShape(slots, {rows}, "slotOfRow");
  if (slots.device() != Device::CPU) return;  // the kernels treat a slot out of range as slot 0
  const int32_t* p = slots.ptr<int32_t>();
  for (int64_t i = 0; i < rows; ++i)
    a.expect(p[i] >= 0 && p[i] < numSlots,
             [&] { return "slotOfRow[" + std::to_string(i) + "] = " + std::to_string(p[i]) +
                 " is not one of the " + std::to_string(numSlots) + " slots"; });
}

void expectShrink(OpArgs& a, const Tensor& t, const Tensor& x, const char* xName, const Tensor& w, const Tensor& slots,
                  bool wide) {
  a.expectAct(x, xName);
  a.expectRank(x, 2, xName);
  a.expectFloat(w, "a");
  a.expectRank(w, 3, "a");
  a.expect(w.dim(2) == x.dim(1) && w.dim(1) > 0,
           [&] { return "a " + w.describe() + " ([slots, slices * rank, in]) does not match " + xName + " " + x.describe(); });
  a.expectAct(t, "t");
  a.expectShape(t, {x.dim(0), wide ? wideWidth(w, x.dim(1)) : w.dim(1)}, wide ? "wide t" : "t");
  expectSlotOfRow(a, slots, x.dim(0), w.dim(0));
}

cpu::SliceStarts expectExpand(OpArgs& a, const Tensor& out, const Tensor& t, const Tensor& w, const Tensor& slots,
                              size_t startsArg) {
  a.expectAct(out, "out");
  a.expectRank(out, 2, "out");
  a.expectFloat(w, "b");
  a.expectRank(w, 3, "b");
  a.expect(w.dim(0) == out.dim(1),
           [&] { return "b " + w.describe() + " ([out, slots, slices * rank]) does not match out " + out.describe(); });
  const cpu::SliceStarts slices = a.sliceStarts(startsArg, "sliceStarts", out.dim(1));
  a.expect(w.dim(2) % slices.count == 0,
           [&] { return "b " + w.describe() + ": its last dimension must be slices * rank, with " +
               std::to_string(slices.count) + " slices"; });
  a.expectAct(t, "t");
  a.expectShape(t, {out.dim(0), w.dim(2)}, "t ([n, slices * rank])");
  expectSlotOfRow(a, slots, out.dim(0), w.dim(1));
  return slices;
}

cpu::LoraDelta expectLoraDelta(OpArgs& a, size_t i, const Tensor& y, int64_t ownCols, const char* yName) {
  Tensor* bT = a.optionalTensor(i, "bT");
  if (!bT) return {};
  Tensor &slots = a.tensor(i + 1, "slotOfRow"), &ranks = a.tensor(i + 3, "slotRanks");
  a.oneDevice();
  auto yDesc = [&] { return std::string(yName) + " " + y.describe(); };
  a.expect(y.dtype() == bT->dtype(), [&] { return "bT " + bT->describe() + " must have the dtype of " + yDesc(); });
  a.expectRank(*bT, 2, "bT");
  const int64_t bCols = y.dim(1) - ownCols;
  a.expect(bCols > 0 && bT->dim(0) == bCols && bT->dim(1) == ownCols,
           [&] { return "bT " + bT->describe() + " must be [" + std::to_string(y.dim(1) - ownCols) + ", " + std::to_string(ownCols) +
               "]: a row for each column of " + yDesc() + " after its " + std::to_string(ownCols) + " outputs"; });
  a.expectDType(ranks, DType::I32, "slotRanks");
  a.expectRank(ranks, 2, "slotRanks");
  const int64_t numSlots = ranks.dim(0), numSlices = ranks.dim(1);
  a.expect(numSlots * numSlices > 0 && bCols % (numSlots * numSlices) == 0,
           [&] { return "slotRanks " + ranks.describe() + " must split the " + std::to_string(bCols) + " shrink columns of " + yDesc() +
               " evenly into slots and slices"; });
  const int64_t rank = bCols / (numSlots * numSlices);
  const cpu::SliceStarts slices = a.sliceStarts(i + 2, "sliceStarts", ownCols);
  a.expect(slices.count == numSlices,
           [&] { return "sliceStarts has " + std::to_string(slices.count + 1) + " entries, but slotRanks " +
               ranks.describe() + " has " + std::to_string(numSlices) + " slices"; });
  expectSlotOfRow(a, slots, y.dim(0), numSlots);
  const size_t elem = dtypeSize(y.dtype());
  return {static_cast<const char*>(y.data()) + ownCols * elem, y.dim(1), bT->data(), ownCols, slots.ptr<int32_t>(),
          slices, numSlots, rank, expectSlotRanks(a, &ranks, numSlots, numSlices, rank)};
}

const int32_t* expectSlotRanks(const OpArgs& a, const Tensor* ranks, int64_t numSlots, int64_t slices, int64_t maxRank) {
  if (!ranks) return nullptr;
  a.expectDType(*ranks, DType::I32, "slotRanks");
  a.expectShape(*ranks, {numSlots, slices}, "slotRanks ([slots, slices])");
  if (ranks->device() == Device::CPU) {
    const int32_t* p = ranks->ptr<int32_t>();
    for (int64_t i = 0; i < ranks->numel(); ++i)
      a.expect(p[i] >= 0 && p[i] <= maxRank,
               [&] { return "slotRanks[" + std::to_string(i) + "] = " + std::to_string(p[i]) +
                   " is outside [0, " + std::to_string(maxRank) + "]"; });
  }
  return ranks->ptr<int32_t>();
}

}  // namespace mstar
