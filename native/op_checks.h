// Argument checks that more than one op binding shares: the plain ops (ops.cc) and the
// LoRA ops (lora_ops.cc) check the same operands the same way.
#pragma once
#include "cpu/ops.h"
#include "op_args.h"

namespace mstar {

// out and x [..., dim] activations of as many elements; w [dim]. Returns the activation dtype.
DType expectRmsNorm(OpArgs& a, const Tensor& out, const Tensor& x, const Tensor& w);

// gateUp [n, 2 * inter] and out [n, inter] activations; wider: gateUp's rows may carry more
// columns after gate and up. Returns the activation dtype.
DType expectSiluMul(OpArgs& a, const Tensor& out, const Tensor& gateUp, bool wider = false);

// residual, x and out [rows, dim] activations; w [dim]; wider: x's rows may carry more
// columns after their dim. Returns the activation dtype.
DType expectAddRmsNorm(OpArgs& a, const Tensor& res, const Tensor& x, const Tensor& w, const Tensor& out,
                       bool wider = false);

// The adapter delta an op adds to y, a projection's output (cpu::LoraDelta), from its
// arguments i .. i + 3: bT [slots * slices * rank, ownCols], slotOfRow [rows of y],
// sliceStarts (an Int32Array of slices + 1) and slotRanks [slots, slices]. y's rows are its ownCols outputs,
// then its t (slots * slices * rank columns). Absent (argument i null or undefined): no delta.
cpu::LoraDelta expectLoraDelta(OpArgs& a, size_t i, const Tensor& y, int64_t ownCols, const char* yName);

// out [n, outF] = x [n, in] · w [outF, wCol .. wCol + in]ᵀ (+ bias [outF]). With a window
// (wCol >= 0) w may be wider than x (a projection's weight with every adapter slot's b beside
// it); without (wCol < 0) x must be as wide as w. Returns the activation dtype; *bias is the
// bias operand or stays empty.
DType expectLinear(OpArgs& a, const Tensor& out, const Tensor& x, const Tensor& w, const Tensor* bias,
                   cpu::Weights* biasWeights, int64_t wCol = -1);
// A bias of `rows` floats (named `name` in errors), as its weights operand.
cpu::Weights expectBias(OpArgs& a, const Tensor& bias, int64_t rows, const char* name);
// w's columns from wCol (< 0: from 0) as a linear's weight operand (rows w.dim(1) apart).
cpu::Weights linearWeights(const OpArgs& a, const Tensor& w, int64_t wCol = 0);

// slotOfRow: i32 [rows]; on the CPU each entry must be one of numSlots.
void expectSlotOfRow(const OpArgs& a, const Tensor& slots, int64_t rows, int64_t numSlots);

// A wide row [x (in) | every slot's rank rows]: its width for a [slots, rankRows, in].
int64_t wideWidth(const Tensor& a, int64_t in);
// t [n, S*R] = x [n, in] · a [slots, S*R, in] per row's slot; xName: what the op calls x.
// wide: t is [n, in + slots*S*R] (x, then every slot's rank rows).
void expectShrink(OpArgs& a, const Tensor& t, const Tensor& x, const char* xName, const Tensor& w, const Tensor& slots,
                  bool wide = false);

// out [n, outF] += t [n, S*R] · b [outF, slots, S*R] per row's slot and column's slice
// (sliceStarts, argument startsArg: S + 1 entries). Returns the slices.
cpu::SliceStarts expectExpand(OpArgs& a, const Tensor& out, const Tensor& t, const Tensor& w, const Tensor& slots,
                              size_t startsArg);

// slotRanks (optional): i32 [numSlots, slices], each slot's rank per slice, at most maxRank
// (checked on the CPU). Returns its data, or null when absent.
const int32_t* expectSlotRanks(const OpArgs& a, const Tensor* ranks, int64_t numSlots, int64_t slices, int64_t maxRank);

}  // namespace mstar
