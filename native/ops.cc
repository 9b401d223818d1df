// N-API bindings of the op set: check every argument, then run the backend kernel of the
// device the tensors live on (all on one device). Ops write into caller-provided outputs,
// so a runner can keep static buffers. Values that live in device memory (ids, slots,
// block tables) are checked on the CPU only: reading them would wait for the GPU.
#include "ops.h"

#include "cpu/ops.h"
#include "gpu_ops.h"
#include "op_args.h"
#include "op_checks.h"

namespace mstar {
namespace {

cpu::HeadLayout headLayout(const OpArgs& a, size_t i) {
  cpu::HeadLayout l{a.integer(i, "numHeads", 1), a.integer(i + 1, "numKvHeads", 1), a.integer(i + 2, "headDim", 1)};
  a.expect(l.numHeads % l.numKvHeads == 0,
           [&] { return "numHeads (" + std::to_string(l.numHeads) +
               ") must be a multiple of numKvHeads (" + std::to_string(l.numKvHeads) + ")"; });
  return l;
}

// qkv [tokens, at least (numHeads + 2 * numKvHeads) * headDim]: rows that are wider (an
// adapted projection's, its shrink after them) set l's stride.
DType expectQkv(OpArgs& a, const Tensor& qkv, cpu::HeadLayout& l) {
  DType act = a.expectAct(qkv, "qkv");
  a.expectRank(qkv, 2, "qkv");
  a.expect(qkv.dim(1) >= l.rowWidth(),
           [&] { return "qkv " + qkv.describe() + " must have at least (numHeads + 2 * numKvHeads) * headDim = " +
               std::to_string(l.rowWidth()) + " columns"; });
  l.ld = qkv.dim(1);
  return act;
}

void expectIdsInRange(const OpArgs& a, const Tensor& ids, int64_t limit, const char* name) {
  if (ids.device() != Device::CPU) return;
  const int32_t* p = ids.ptr<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i)
    if (p[i] < 0 || p[i] >= limit)
      a.fail(std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(p[i]) + " is outside [0, " +
             std::to_string(limit) + ")");
}

// The cache's dtype: f32 on the CPU; f32 or bf16 on CUDA (independent of the activations).
DType expectCacheDType(const OpArgs& a, const Tensor& t, const char* name, bool cuda) {
  if (!cuda) a.expectDType(t, DType::F32, name);
  else if (t.dtype() != DType::F32 && t.dtype() != DType::BF16)
    a.fail(std::string(name) + " must be f32 or bf16 on cuda, got " + t.describe());
  return t.dtype();
}

gpu::KvCache kvCache(const OpArgs& a, Tensor& k, Tensor& v, cpu::HeadLayout l, bool cuda) {
  DType d = expectCacheDType(a, k, "kCache", cuda);
  a.expectRank(k, 4, "kCache");
  a.expectShape(k, {k.dim(0), k.dim(1), l.numKvHeads, l.headDim}, "kCache ([blocks, blockSize, numKvHeads, headDim])");
  a.expect(k.dim(1) > 0,
           [&] { return "kCache " + k.describe() + " must have a block size of at least 1"; });  // slots divide by it
  a.expectShape(v, {k.dim(0), k.dim(1), l.numKvHeads, l.headDim}, "vCache (the shape of kCache)");
  expectCacheDType(a, v, "vCache", cuda);
  a.expect(v.dtype() == d, [&] { return "vCache " + v.describe() + " must have the dtype of kCache " + k.describe(); });
  return {k.data(), v.data(), d, k.dim(0), k.dim(1)};
}

cpu::KvCache cpuCache(const gpu::KvCache& c) {
  return {static_cast<float*>(c.k), static_cast<float*>(c.v), c.numBlocks, c.blockSize};
}

void expectHeadNorms(const OpArgs& a, const Tensor& qw, const Tensor& kw, cpu::HeadLayout l) {
  a.expectFloat(qw, "qWeight");
  a.expectShape(qw, {l.headDim}, "qWeight");
  a.expectShape(kw, {l.headDim}, "kWeight");
  a.expect(kw.dtype() == qw.dtype(), "qWeight and kWeight must share a dtype");
}

// Returns the rotary half (invFreq's length).
int expectRope(const OpArgs& a, const Tensor& qkv, const Tensor& pos, const Tensor& inv, cpu::HeadLayout l) {
  a.expectDType(pos, DType::I32, "positions");
  a.expectShape(pos, {qkv.dim(0)}, "positions");
  a.expectDType(inv, DType::F32, "invFreq");
  a.expectRank(inv, 1, "invFreq");
  a.expect(inv.dim(0) >= 1 && 2 * inv.dim(0) <= l.headDim,
           [&] { return "invFreq has " + std::to_string(inv.dim(0)) + " entries; the rotary dims (2x that) must fit in headDim " +
               std::to_string(l.headDim); });
  return int(inv.dim(0));
}

// Slots live in device memory on CUDA (the kernel skips those past the cache); on the
// CPU each is checked.
void expectSlots(const OpArgs& a, const Tensor& slots, const Tensor& qkv, const gpu::KvCache& c) {
  a.expectDType(slots, DType::I32, "slots");
  a.expectShape(slots, {qkv.dim(0)}, "slots");
  if (slots.device() != Device::CPU) return;
  const int32_t* s = slots.ptr<int32_t>();
  for (int64_t i = 0; i < slots.numel(); ++i)
    a.expect(s[i] < c.numBlocks * c.blockSize,
             [&] { return "slots[" + std::to_string(i) + "] = " + std::to_string(s[i]) +
                 " is past the cache's " + std::to_string(c.numBlocks * c.blockSize) + " slots"; });
}

Napi::Value Embedding(const Napi::CallbackInfo& info) {
  OpArgs a(info, "embedding");
  Tensor &out = a.tensor(0, "out"), &table = a.tensor(1, "table"), &ids = a.tensor(2, "ids");
  bool cuda = a.oneDevice();
  a.expectFloat(table, "table");
  a.expectRank(table, 2, "table");
  a.expectDType(ids, DType::I32, "ids");
  DType act = a.expectAct(out, "out");
  a.expectShape(out, {ids.numel(), table.dim(1)}, "out");
  expectIdsInRange(a, ids, table.dim(0), "ids");
  if (cuda)
    a.run([&] { gpu::embedding(act, out.data(), a.weights(table), table.dim(0), ids.ptr<int32_t>(), ids.numel(), table.dim(1)); });
  else
    cpu::embedding(out.ptr<float>(), a.weights(table), ids.ptr<int32_t>(), ids.numel(), table.dim(1));
  return info.Env().Undefined();
}

Napi::Value RmsNorm(const Napi::CallbackInfo& info) {
  OpArgs a(info, "rmsNorm");
  Tensor &out = a.tensor(0, "out"), &x = a.tensor(1, "x"), &w = a.tensor(2, "w");
  float eps = float(a.number(3, "eps"));
  const int64_t next = a.given(4) ? a.integer(4, "next") : 0;
  bool cuda = a.oneDevice();
  DType act = expectRmsNorm(a, out, x, w);
  const int64_t d = w.dim(0);
  if (cuda) a.run([&] { gpu::rmsNorm(act, out.data(), x.data(), a.weights(w), x.numel() / d, d, eps, next); });
  else cpu::rmsNorm(out.ptr<float>(), x.ptr<float>(), a.weights(w), x.numel() / d, d, eps);
  return info.Env().Undefined();
}

Napi::Value AddRmsNorm(const Napi::CallbackInfo& info) {
  OpArgs a(info, "addRmsNorm");
  Tensor &res = a.tensor(0, "residual"), &x = a.tensor(1, "x"), &w = a.tensor(2, "w");
  float eps = float(a.number(3, "eps"));
  Tensor& out = a.tensor(4, "out");
  // then next alone, or a LoraDelta and optionally next
  const size_t nextAt = a.isNumber(5) ? 5 : 9;
  const int64_t next = a.given(nextAt) ? a.integer(nextAt, "next") : 0;
  bool cuda = a.oneDevice();
  const bool adapted = nextAt == 9 && a.optionalTensor(5, "bT");
  DType act = expectAddRmsNorm(a, res, x, w, out, adapted);
  const cpu::LoraDelta d = adapted ? expectLoraDelta(a, 5, x, w.dim(0), "x") : cpu::LoraDelta{};
  const int64_t ldx = x.dim(1);
  if (cuda)
    a.run([&] {
      gpu::addRmsNorm(act, res.data(), x.data(), a.weights(w), out.data(), res.dim(0), w.dim(0), eps, ldx, d, next);
    });
  else
    cpu::addRmsNorm(res.ptr<float>(), x.ptr<float>(), a.weights(w), out.ptr<float>(), res.dim(0), w.dim(0), eps, ldx, d);
  return info.Env().Undefined();
}

Napi::Value HeadRmsNorm(const Napi::CallbackInfo& info) {
  OpArgs a(info, "headRmsNorm");
  Tensor &qkv = a.tensor(0, "qkv"), &qw = a.tensor(1, "qWeight"), &kw = a.tensor(2, "kWeight");
  cpu::HeadLayout l = headLayout(a, 3);
  float eps = float(a.number(6, "eps"));
  bool cuda = a.oneDevice();
  DType act = expectQkv(a, qkv, l);
  expectHeadNorms(a, qw, kw, l);
  if (cuda) a.run([&] { gpu::headRmsNorm(act, qkv.data(), a.weights(qw), a.weights(kw), qkv.dim(0), l, eps); });
  else cpu::headRmsNorm(qkv.ptr<float>(), a.weights(qw), a.weights(kw), qkv.dim(0), l, eps);
  return info.Env().Undefined();
}

// An extended projection's shrink rows (gpu::UnusedSlots): slotOfRow, then from and perSlot at
// a's arguments `at` and `at + 1`; none without slotOfRow.
gpu::UnusedSlots unusedSlots(const OpArgs& a, const Tensor* slots, size_t at, const Tensor& x, const Tensor& w) {
  if (!slots) return {};
  const int64_t from = a.integer(at, "from"), perSlot = a.integer(at + 1, "perSlot", 1);
  a.expect(from <= w.dim(0),
           [&] { return "from " + std::to_string(from) + " is past w's " + std::to_string(w.dim(0)) + " rows"; });
  expectSlotOfRow(a, *slots, x.dim(0), (w.dim(0) - from + perSlot - 1) / perSlot);
  return {slots->ptr<int32_t>(), from, perSlot};
}

Napi::Value Linear(const Napi::CallbackInfo& info) {
  OpArgs a(info, "linear");
  Tensor &out = a.tensor(0, "out"), &x = a.tensor(1, "x"), &w = a.tensor(2, "w");
  Tensor* bias = a.optionalTensor(3, "bias");
  const bool accumulate = a.flag(4);
  const int64_t wCol = a.given(5) ? a.integer(5, "wCol") : -1;
  // then optionally slotOfRow, from, perSlot: an extended projection's shrink rows (gpu::UnusedSlots)
  Tensor* slots = a.given(6) ? &a.tensor(6, "slotOfRow") : nullptr;
  bool cuda = a.oneDevice();
  cpu::Weights b{};
  DType act = expectLinear(a, out, x, w, bias, &b, wCol);
  const cpu::Weights weights = linearWeights(a, w, wCol);
  const gpu::UnusedSlots unused = unusedSlots(a, slots, 7, x, w);
  if (cuda)
    a.run([&] {
      gpu::linear(act, out.data(), x.data(), weights, bias ? &b : nullptr, x.dim(0), x.dim(1), w.dim(0), accumulate, {},
                  unused);
    });
  else
    cpu::linear(out.ptr<float>(), x.ptr<float>(), weights, bias ? &b : nullptr, x.dim(0), x.dim(1), w.dim(0),
                accumulate);
  return info.Env().Undefined();
}

// linearWide(out, x, w, bias, accumulate, slotOfRow, in, slots): linear of a wide row x (see
// loraShrink): its first `in` columns, then `slots` blocks of equal width, each row's nonzero
// only in its own slot's. The same result as linear; the decode GEMV reads only the rows'
// own slots' columns of w.
Napi::Value LinearWide(const Napi::CallbackInfo& info) {
  OpArgs a(info, "linearWide");
  Tensor &out = a.tensor(0, "out"), &x = a.tensor(1, "x"), &w = a.tensor(2, "w");
  Tensor* bias = a.optionalTensor(3, "bias");
  const bool accumulate = a.flag(4);
  Tensor& slots = a.tensor(5, "slotOfRow");
  const int64_t in = a.integer(6, "in", 1);
  const int numSlots = a.integer(7, "slots", 1);
  bool cuda = a.oneDevice();
  cpu::Weights b{};
  DType act = expectLinear(a, out, x, w, bias, &b, 0);  // the widened weight's rows may be padded past x
  a.expect(in <= x.dim(1) && (x.dim(1) - in) % numSlots == 0,
           [&] { return "x " + x.describe() + " must be " + std::to_string(in) + " columns, then " + std::to_string(numSlots) +
               " slots' columns of one width"; });
  expectSlotOfRow(a, slots, x.dim(0), numSlots);
  const cpu::Weights weights = linearWeights(a, w);
  if (cuda) {
    const gpu::WideRows wide{slots.ptr<int32_t>(), in, (x.dim(1) - in) / numSlots, numSlots};
    a.run([&] {
      gpu::linear(act, out.data(), x.data(), weights, bias ? &b : nullptr, x.dim(0), x.dim(1), w.dim(0), accumulate, wide);
    });
  } else {
    cpu::linear(out.ptr<float>(), x.ptr<float>(), weights, bias ? &b : nullptr, x.dim(0), x.dim(1), w.dim(0), accumulate);
  }
  return info.Env().Undefined();
}

// linearSiluMul(out, x, w, bias, gateUp): out = SiLU(gate) · up of x · wᵀ (+ bias), w being
// [gate; up] (its rows may be wider than x, as a pool widens them: their first columns count);
// gateUp [rows, 2 · inter] is scratch where the two run one by one (the CPU; CUDA past decode sizes).
Napi::Value LinearSiluMul(const Napi::CallbackInfo& info) {
  OpArgs a(info, "linearSiluMul");
  Tensor &out = a.tensor(0, "out"), &x = a.tensor(1, "x"), &w = a.tensor(2, "w");
  Tensor* bias = a.optionalTensor(3, "bias");
  Tensor& gu = a.tensor(4, "gateUp");
  const bool cuda = a.oneDevice();
  const DType act = a.expectAct(x, "x");
  a.expectRank(x, 2, "x");
  a.expectFloat(w, "w");
  a.expectRank(w, 2, "w");
  const int64_t n = x.dim(0), in = x.dim(1), inter = w.dim(0) / 2;
  a.expect(w.dim(0) % 2 == 0 && w.dim(1) >= in, [&] {
    return "w " + w.describe() + " must be [gate and up rows of one count, at least x's " + std::to_string(in) + " columns]";
  });
  a.expectAct(out, "out");
  a.expectShape(out, {n, inter}, "out ([rows of x, half of w's rows])");
  a.expectAct(gu, "gateUp");
  a.expectShape(gu, {n, 2 * inter}, "gateUp ([rows of x, w's rows])");
  const cpu::Weights b = bias ? expectBias(a, *bias, 2 * inter, "bias ([w's rows])") : cpu::Weights{};
  const cpu::Weights weights = linearWeights(a, w, 0);
  if (cuda) {
    a.run([&] { gpu::linearSiluMul(act, out.data(), x.data(), weights, bias ? &b : nullptr, n, in, inter, gu.data()); });
    return info.Env().Undefined();
  }
  cpu::linear(gu.ptr<float>(), x.ptr<float>(), weights, bias ? &b : nullptr, n, in, 2 * inter);
  cpu::siluMul(out.ptr<float>(), gu.ptr<float>(), n, inter);
  return info.Env().Undefined();
}

// rmsNormLinear(out, residual, normW, eps, w, bias, x, gateUp?): out = rmsNorm(residual) · wᵀ
// (+ bias), w's first columns (a pool may widen its rows); with gateUp, w is [gate; up] and out
// takes SiLU(gate) · up (linearSiluMul). x [rows, in] (and gateUp) are scratch where the ops
// run one by one (the CPU; CUDA past the tensor-core GEMV's sizes): x then holds the norm.
Napi::Value RmsNormLinear(const Napi::CallbackInfo& info) {
  OpArgs a(info, "rmsNormLinear");
  Tensor &out = a.tensor(0, "out"), &res = a.tensor(1, "residual"), &nw = a.tensor(2, "normW");
  const float eps = float(a.number(3, "eps"));
  Tensor& w = a.tensor(4, "w");
  Tensor* bias = a.optionalTensor(5, "bias");
  Tensor& x = a.tensor(6, "x");
  Tensor* gu = a.optionalTensor(7, "gateUp");
  const bool cuda = a.oneDevice();
  const DType act = a.expectAct(res, "residual");
  a.expectRank(res, 2, "residual");
  const int64_t n = res.dim(0), in = res.dim(1);
  a.expectFloat(nw, "normW");
  a.expectShape(nw, {in}, "normW ([residual's columns])");
  a.expectFloat(w, "w");
  a.expectRank(w, 2, "w");
  a.expect(w.dim(1) >= in && (!gu || w.dim(0) % 2 == 0), [&] {
    return "w " + w.describe() + " must be [" + (gu ? "gate and up rows of one count" : "out") +
        ", at least residual's " + std::to_string(in) + " columns]";
  });
  const int64_t outF = gu ? w.dim(0) / 2 : w.dim(0);
  a.expectAct(out, "out");
  a.expectShape(out, {n, outF}, gu ? "out ([rows of residual, half of w's rows])" : "out ([rows of residual, w's rows])");
  a.expectAct(x, "x");
  a.expectShape(x, {n, in}, "x (residual's shape)");
  if (gu) {
    a.expectAct(*gu, "gateUp");
    a.expectShape(*gu, {n, w.dim(0)}, "gateUp ([rows of residual, w's rows])");
  }
  const cpu::Weights b = bias ? expectBias(a, *bias, w.dim(0), "bias ([w's rows])") : cpu::Weights{};
  const cpu::Weights weights = linearWeights(a, w, 0);
  if (cuda) {
    a.run([&] {
      gpu::rmsNormLinear(act, out.data(), res.data(), a.weights(nw), eps, weights, bias ? &b : nullptr, n, in, outF,
                         x.data(), gu ? gu->data() : nullptr);
    });
    return info.Env().Undefined();
  }
  cpu::rmsNorm(x.ptr<float>(), res.ptr<float>(), a.weights(nw), n, in, eps);
  if (!gu) {
    cpu::linear(out.ptr<float>(), x.ptr<float>(), weights, bias ? &b : nullptr, n, in, outF);
    return info.Env().Undefined();
  }
  cpu::linear(gu->ptr<float>(), x.ptr<float>(), weights, bias ? &b : nullptr, n, in, 2 * outF);
  cpu::siluMul(out.ptr<float>(), gu->ptr<float>(), n, outF);
  return info.Env().Undefined();
}

Napi::Value Rope(const Napi::CallbackInfo& info) {
  OpArgs a(info, "rope");
  Tensor &qkv = a.tensor(0, "qkv"), &pos = a.tensor(1, "positions"), &inv = a.tensor(2, "invFreq");
  cpu::HeadLayout l = headLayout(a, 3);
  bool cuda = a.oneDevice();
  DType act = expectQkv(a, qkv, l);
  int half = expectRope(a, qkv, pos, inv, l);
  if (cuda) a.run([&] { gpu::rope(act, qkv.data(), pos.ptr<int32_t>(), inv.ptr<float>(), qkv.dim(0), l, half); });
  else cpu::rope(qkv.ptr<float>(), pos.ptr<int32_t>(), inv.ptr<float>(), qkv.dim(0), l, half);
  return info.Env().Undefined();
}

Napi::Value SiluMul(const Napi::CallbackInfo& info) {
  OpArgs a(info, "siluMul");
  Tensor &out = a.tensor(0, "out"), &gu = a.tensor(1, "gateUp");
  bool cuda = a.oneDevice();
  const bool adapted = a.optionalTensor(2, "bT");
  DType act = expectSiluMul(a, out, gu, adapted);
  const int64_t inter = adapted ? out.dim(1) : gu.dim(1) / 2, ldg = gu.dim(1);
  const cpu::LoraDelta d = expectLoraDelta(a, 2, gu, 2 * inter, "gateUp");
  if (cuda) a.run([&] { gpu::siluMul(act, out.data(), gu.data(), gu.dim(0), inter, ldg, d); });
  else cpu::siluMul(out.ptr<float>(), gu.ptr<float>(), gu.dim(0), inter, ldg, d);
  return info.Env().Undefined();
}

Napi::Value Add(const Napi::CallbackInfo& info) {
  OpArgs a(info, "add");
  Tensor &out = a.tensor(0, "out"), &x = a.tensor(1, "a"), &y = a.tensor(2, "b");
  bool cuda = a.oneDevice();
  DType act = DType::F32;
  for (auto [t, n] : {std::pair<Tensor*, const char*>{&out, "out"}, {&x, "a"}, {&y, "b"}}) act = a.expectAct(*t, n);
  a.expect(x.numel() == out.numel() && y.numel() == out.numel(),
           [&] { return "a " + x.describe() + ", b " + y.describe() + " and out " + out.describe() + " must have as many elements"; });
  if (cuda) a.run([&] { gpu::add(act, out.data(), x.data(), y.data(), out.numel()); });
  else cpu::add(out.ptr<float>(), x.ptr<float>(), y.ptr<float>(), out.numel());
  return info.Env().Undefined();
}

Napi::Value GatherRows(const Napi::CallbackInfo& info) {
  OpArgs a(info, "gatherRows");
  Tensor &out = a.tensor(0, "out"), &x = a.tensor(1, "x"), &idx = a.tensor(2, "indices");
  bool cuda = a.oneDevice();
  DType act = a.expectAct(x, "x");
  a.expectRank(x, 2, "x");
  a.expectDType(idx, DType::I32, "indices");
  a.expectAct(out, "out");
  a.expectShape(out, {idx.numel(), x.dim(1)}, "out");
  expectIdsInRange(a, idx, x.dim(0), "indices");
  if (cuda)
    a.run([&] { gpu::gatherRows(act, out.data(), x.data(), x.dim(0), idx.ptr<int32_t>(), idx.numel(), x.dim(1)); });
  else
    cpu::gatherRows(out.ptr<float>(), x.ptr<float>(), idx.ptr<int32_t>(), idx.numel(), x.dim(1));
  return info.Env().Undefined();
}

// feedTokens(tokens, embedRows, sampled, from, rowSlots, vocab): where from[i] >= 0,
// tokens[i] = sampled[from[i]] and embedRows[i] = rowSlots[i] * vocab + tokens[i].
Napi::Value FeedTokens(const Napi::CallbackInfo& info) {
  OpArgs a(info, "feedTokens");
  Tensor &tokens = a.tensor(0, "tokens"), &embedRows = a.tensor(1, "embedRows"), &sampled = a.tensor(2, "sampled");
  Tensor &from = a.tensor(3, "from"), &rowSlots = a.tensor(4, "rowSlots");
  const int vocab = a.integer(5, "vocab", 1);
  bool cuda = a.oneDevice();
  for (auto [t, name] : {std::pair<Tensor*, const char*>{&tokens, "tokens"}, {&embedRows, "embedRows"},
                         {&sampled, "sampled"}, {&from, "from"}, {&rowSlots, "rowSlots"}}) {
    a.expectDType(*t, DType::I32, name);
    if (t != &sampled)
      a.expect(t->numel() == tokens.numel(),
               [&] { return std::string(name) + " " + t->describe() + " must have one entry per token"; });
  }
  const int64_t n = tokens.numel();
  if (!cuda) {
    const int32_t* f = from.ptr<int32_t>();
    for (int64_t i = 0; i < n; ++i)
      a.expect(f[i] < sampled.numel(),
               [&] { return "from[" + std::to_string(i) + "] = " + std::to_string(f[i]) + " is past the " +
                   std::to_string(sampled.numel()) + " samples"; });
    cpu::feedTokens(tokens.ptr<int32_t>(), embedRows.ptr<int32_t>(), sampled.ptr<int32_t>(), f,
                    rowSlots.ptr<int32_t>(), vocab, n);
  } else {
    a.run([&] {
      gpu::feedTokens(tokens.ptr<int32_t>(), embedRows.ptr<int32_t>(), sampled.ptr<int32_t>(), sampled.numel(),
                      from.ptr<int32_t>(), rowSlots.ptr<int32_t>(), vocab, n);
    });
  }
  return info.Env().Undefined();
}

Napi::Value KvWrite(const Napi::CallbackInfo& info) {
  OpArgs a(info, "kvWrite");
  Tensor &k = a.tensor(0, "kCache"), &v = a.tensor(1, "vCache"), &qkv = a.tensor(2, "qkv"), &slots = a.tensor(3, "slots");
  cpu::HeadLayout l = headLayout(a, 4);
  bool cuda = a.oneDevice();
  gpu::KvCache c = kvCache(a, k, v, l, cuda);
  DType act = expectQkv(a, qkv, l);
  expectSlots(a, slots, qkv, c);
  if (cuda) a.run([&] { gpu::kvWrite(act, c, qkv.data(), slots.ptr<int32_t>(), qkv.dim(0), l); });
  else cpu::kvWrite(cpuCache(c), qkv.ptr<float>(), slots.ptr<int32_t>(), qkv.dim(0), l);
  return info.Env().Undefined();
}

// headRmsNorm (with both norm weights, or neither), rope and kvWrite as one op.
Napi::Value RopeKvWrite(const Napi::CallbackInfo& info) {
  OpArgs a(info, "ropeKvWrite");
  Tensor &qkv = a.tensor(0, "qkv"), &pos = a.tensor(1, "positions"), &inv = a.tensor(2, "invFreq");
  Tensor &k = a.tensor(3, "kCache"), &v = a.tensor(4, "vCache"), &slots = a.tensor(5, "slots");
  Tensor *qw = a.optionalTensor(6, "qWeight"), *kw = a.optionalTensor(7, "kWeight");
  cpu::HeadLayout l = headLayout(a, 8);
  float eps = float(a.number(11, "eps"));
  bool cuda = a.oneDevice();
  gpu::KvCache c = kvCache(a, k, v, l, cuda);
  DType act = expectQkv(a, qkv, l);
  int half = expectRope(a, qkv, pos, inv, l);
  expectSlots(a, slots, qkv, c);
  a.expect((qw == nullptr) == (kw == nullptr), "qWeight and kWeight must be given together");
  cpu::Weights qn{}, kn{};
  if (qw) {
    expectHeadNorms(a, *qw, *kw, l);
    qn = a.weights(*qw);
    kn = a.weights(*kw);
  }
  const cpu::LoraDelta d = expectLoraDelta(a, 12, qkv, l.rowWidth(), "qkv");
  const int32_t* p = pos.ptr<int32_t>();
  if (cuda) {
    a.run([&] {
      gpu::ropeKvWrite(act, qkv.data(), p, inv.ptr<float>(), half, qw ? &qn : nullptr, kw ? &kn : nullptr, eps, c,
                       slots.ptr<int32_t>(), qkv.dim(0), l, d);
    });
    return info.Env().Undefined();
  }
  float* x = qkv.ptr<float>();
  cpu::addLoraDelta(x, l.stride(), qkv.dim(0), l.rowWidth(), d);
  if (qw) cpu::headRmsNorm(x, qn, kn, qkv.dim(0), l, eps);
  cpu::rope(x, p, inv.ptr<float>(), qkv.dim(0), l, half);
  cpu::kvWrite(cpuCache(c), x, slots.ptr<int32_t>(), qkv.dim(0), l);
  return info.Env().Undefined();
}

// pagedAttention's arguments, a's first 11 (the first, its output, "attn" where a projection
// follows): read first, checked once every tensor of the op is read (oneDevice).
struct Attention {
  const char *outName, *outShape;
  Tensor &out, &qkv, &k, &v, &tables, &starts, &lens;
  cpu::HeadLayout l;
  float scale;
  // set by check():
  gpu::KvCache c{};
  DType act{};
  int64_t seqs = 0, maxBlocks = 0;

  Attention(const OpArgs& a, bool projected)
      : outName(projected ? "attn" : "out"),
        outShape(projected ? "attn ([tokens, numHeads * headDim])" : "out ([tokens, numHeads * headDim])"),
        out(a.tensor(0, outName)), qkv(a.tensor(1, "qkv")), k(a.tensor(2, "kCache")), v(a.tensor(3, "vCache")),
        tables(a.tensor(4, "blockTables")), starts(a.tensor(5, "queryStarts")), lens(a.tensor(6, "contextLens")),
        l(headLayout(a, 7)), scale(float(a.number(10, "scale"))) {}

  // The shapes and dtypes; on the CPU the query starts, lengths and tables too (in device
  // memory the kernels guard them).
  void check(OpArgs& a, bool cuda) {
    c = kvCache(a, k, v, l, cuda);
    act = expectQkv(a, qkv, l);
    a.expectAct(out, outName);
    a.expectShape(out, {qkv.dim(0), int64_t(l.numHeads) * l.headDim}, outShape);
    a.expectDType(lens, DType::I32, "contextLens");
    a.expectRank(lens, 1, "contextLens");
    seqs = lens.dim(0);
    a.expectDType(starts, DType::I32, "queryStarts");
    a.expectShape(starts, {seqs + 1}, "queryStarts ([sequences + 1])");
    a.expectDType(tables, DType::I32, "blockTables");
    a.expectRank(tables, 2, "blockTables");
    a.expect(tables.dim(0) == seqs,
             [&] { return "blockTables " + tables.describe() + " needs one row per sequence (" + std::to_string(seqs) + ")"; });
    maxBlocks = tables.dim(1);
    if (cuda) {
      a.expect(l.headDim <= 256,
               [&] { return "headDim " + std::to_string(l.headDim) + " is above the 256 the cuda kernel supports"; });
      return;
    }
    const int32_t *qs = starts.ptr<int32_t>(), *cl = lens.ptr<int32_t>(), *bt = tables.ptr<int32_t>();
    a.expect(qs[0] == 0 && qs[seqs] == qkv.dim(0),
             [&] { return "queryStarts must run from 0 to the number of tokens (" + std::to_string(qkv.dim(0)) + ")"; });
    for (int64_t s = 0; s < seqs; ++s) {
      int64_t qLen = qs[s + 1] - qs[s];
      a.expect(qLen >= 0 && qLen <= cl[s],
               [&] { return "sequence " + std::to_string(s) + " has " + std::to_string(qLen) +
                   " new tokens but a context of " + std::to_string(cl[s]); });
      int64_t used = (int64_t(cl[s]) + c.blockSize - 1) / c.blockSize;
      a.expect(used <= maxBlocks,
               [&] { return "sequence " + std::to_string(s) + " needs " + std::to_string(used) +
                   " blocks but blockTables has " + std::to_string(maxBlocks) + " columns"; });
      for (int64_t b = 0; b < used; ++b)
        a.expect(bt[s * maxBlocks + b] >= 0 && bt[s * maxBlocks + b] < c.numBlocks,
                 [&] { return "blockTables[" + std::to_string(s) + "][" + std::to_string(b) + "] = " +
                     std::to_string(bt[s * maxBlocks + b]) + " is not a block of the cache"; });
    }
  }

  void runCpu() const {
    cpu::pagedAttention(out.ptr<float>(), qkv.ptr<float>(), cpuCache(c), tables.ptr<int32_t>(), maxBlocks,
                        starts.ptr<int32_t>(), lens.ptr<int32_t>(), seqs, l, scale);
  }
};

Napi::Value PagedAttention(const Napi::CallbackInfo& info) {
  OpArgs a(info, "pagedAttention");
  Attention t(a, false);
  const bool cuda = a.oneDevice();
  t.check(a, cuda);
  if (!cuda) {
    t.runCpu();
    return info.Env().Undefined();
  }
  a.run([&] {
    gpu::pagedAttention(t.act, t.out.data(), t.qkv.data(), t.c, t.tables.ptr<int32_t>(), t.maxBlocks, t.starts.ptr<int32_t>(),
                        t.lens.ptr<int32_t>(), t.seqs, t.qkv.dim(0), t.l, t.scale);
  });
  return info.Env().Undefined();
}

// pagedAttentionLinear(attn, qkv, kCache, vCache, blockTables, queryStarts, contextLens,
// numHeads, numKvHeads, headDim, scale, out, w, bias, accumulate[, slotOfRow, from, perSlot]):
// pagedAttention into attn, then linear(out, attn, w, bias, accumulate, 0[, slotOfRow, from,
// perSlot]). At decode sizes CUDA's o projection merges attention's key splits itself and attn
// is left as it was: scratch.
Napi::Value PagedAttentionLinear(const Napi::CallbackInfo& info) {
  OpArgs a(info, "pagedAttentionLinear");
  Attention t(a, true);
  Tensor &out = a.tensor(11, "out"), &w = a.tensor(12, "w");
  Tensor* bias = a.optionalTensor(13, "bias");
  const bool accumulate = a.flag(14);
  Tensor* slots = a.given(15) ? &a.tensor(15, "slotOfRow") : nullptr;
  const bool cuda = a.oneDevice();
  t.check(a, cuda);
  cpu::Weights b{};
  const DType act = expectLinear(a, out, t.out, w, bias, &b, 0);
  const cpu::Weights weights = linearWeights(a, w, 0);
  const gpu::UnusedSlots unused = unusedSlots(a, slots, 16, t.out, w);
  const int64_t n = t.qkv.dim(0), in = t.out.dim(1);
  if (!cuda) {
    t.runCpu();
    cpu::linear(out.ptr<float>(), t.out.ptr<float>(), weights, bias ? &b : nullptr, n, in, w.dim(0), accumulate);
    return info.Env().Undefined();
  }
  a.run([&] {
    gpu::pagedAttentionLinear(act, t.out.data(), t.qkv.data(), t.c, t.tables.ptr<int32_t>(), t.maxBlocks,
                              t.starts.ptr<int32_t>(), t.lens.ptr<int32_t>(), t.seqs, n, t.l, t.scale, out.data(), weights,
                              bias ? &b : nullptr, w.dim(0), accumulate, unused);
  });
  return info.Env().Undefined();
}

Napi::Value Sample(const Napi::CallbackInfo& info) {
  OpArgs a(info, "sample");
  Tensor &ids = a.tensor(0, "outIds"), &logits = a.tensor(1, "logits"), &temp = a.tensor(2, "temperature");
  Tensor &topK = a.tensor(3, "topK"), &topP = a.tensor(4, "topP"), &seeds = a.tensor(5, "seeds"), &steps = a.tensor(6, "steps");
  bool cuda = a.oneDevice();
  DType act = a.expectAct(logits, "logits");
  a.expectRank(logits, 2, "logits");
  int64_t n = logits.dim(0);
  a.expect(logits.dim(1) > 0, "logits must have a vocabulary");
  for (auto [t, d, name] : {std::tuple<Tensor*, DType, const char*>{&ids, DType::I32, "outIds"}, {&temp, DType::F32, "temperature"},
                            {&topK, DType::I32, "topK"}, {&topP, DType::F32, "topP"}, {&seeds, DType::I64, "seeds"},
                            {&steps, DType::I32, "steps"}}) {
    a.expectDType(*t, d, name);
    a.expectShape(*t, {n}, name);
  }
  cpu::SamplingRows rows{temp.ptr<float>(), topK.ptr<int32_t>(), topP.ptr<float>(), seeds.ptr<int64_t>(), steps.ptr<int32_t>()};
  if (cuda) a.run([&] { gpu::sample(act, ids.ptr<int32_t>(), logits.data(), n, logits.dim(1), rows); });
  else cpu::sample(ids.ptr<int32_t>(), logits.ptr<float>(), n, logits.dim(1), rows);
  return info.Env().Undefined();
}

Napi::Value Logprobs(const Napi::CallbackInfo& info) {
  OpArgs a(info, "logprobs");
  Tensor &chosenLp = a.tensor(0, "chosenLogprobs"), &topIds = a.tensor(1, "topIds"), &topLp = a.tensor(2, "topLogprobs");
  Tensor &logits = a.tensor(3, "logits"), &chosen = a.tensor(4, "chosen");
  bool cuda = a.oneDevice();
  DType act = a.expectAct(logits, "logits");
  a.expectRank(logits, 2, "logits");
  int64_t n = logits.dim(0), vocab = logits.dim(1);
  a.expectDType(chosen, DType::I32, "chosen");
  a.expectShape(chosen, {n}, "chosen");
  expectIdsInRange(a, chosen, vocab, "chosen");
  a.expectDType(chosenLp, DType::F32, "chosenLogprobs");
  a.expectShape(chosenLp, {n}, "chosenLogprobs");
  a.expectDType(topIds, DType::I32, "topIds");
  a.expectRank(topIds, 2, "topIds");
  int64_t k = topIds.dim(1);
  a.expect(k <= vocab,
           [&] { return "topIds asks for " + std::to_string(k) + " tokens of a " + std::to_string(vocab) + "-token vocabulary"; });
  a.expectShape(topIds, {n, k}, "topIds");
  a.expectDType(topLp, DType::F32, "topLogprobs");
  a.expectShape(topLp, {n, k}, "topLogprobs");
  if (cuda)
    a.run([&] {
      gpu::logprobs(act, chosenLp.ptr<float>(), topIds.ptr<int32_t>(), topLp.ptr<float>(), k, logits.data(),
                    chosen.ptr<int32_t>(), n, vocab);
    });
  else
    cpu::logprobs(chosenLp.ptr<float>(), topIds.ptr<int32_t>(), topLp.ptr<float>(), k, logits.ptr<float>(),
                  chosen.ptr<int32_t>(), n, vocab);
  return info.Env().Undefined();
}

}  // namespace

void RegisterOps(Napi::Env env, Napi::Object exports) {
  exports["embedding"] = Napi::Function::New<Embedding>(env, "embedding");
  exports["rmsNorm"] = Napi::Function::New<RmsNorm>(env, "rmsNorm");
  exports["addRmsNorm"] = Napi::Function::New<AddRmsNorm>(env, "addRmsNorm");
  exports["headRmsNorm"] = Napi::Function::New<HeadRmsNorm>(env, "headRmsNorm");
  exports["linear"] = Napi::Function::New<Linear>(env, "linear");
  exports["linearWide"] = Napi::Function::New<LinearWide>(env, "linearWide");
  exports["rope"] = Napi::Function::New<Rope>(env, "rope");
  exports["linearSiluMul"] = Napi::Function::New<LinearSiluMul>(env, "linearSiluMul");
  exports["rmsNormLinear"] = Napi::Function::New<RmsNormLinear>(env, "rmsNormLinear");
  exports["siluMul"] = Napi::Function::New<SiluMul>(env, "siluMul");
  exports["add"] = Napi::Function::New<Add>(env, "add");
  exports["gatherRows"] = Napi::Function::New<GatherRows>(env, "gatherRows");
  exports["feedTokens"] = Napi::Function::New<FeedTokens>(env, "feedTokens");
  exports["kvWrite"] = Napi::Function::New<KvWrite>(env, "kvWrite");
  exports["ropeKvWrite"] = Napi::Function::New<RopeKvWrite>(env, "ropeKvWrite");
  exports["pagedAttention"] = Napi::Function::New<PagedAttention>(env, "pagedAttention");
  exports["pagedAttentionLinear"] = Napi::Function::New<PagedAttentionLinear>(env, "pagedAttentionLinear");
  exports["sample"] = Napi::Function::New<Sample>(env, "sample");
  exports["logprobs"] = Napi::Function::New<Logprobs>(env, "logprobs");
}

}  // namespace mstar
