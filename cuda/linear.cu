// out[n, outF] = x[n, in] · w[outF, in]ᵀ (+ bias), f32 accumulation.
//  - n <= 4 (decode): a GEMV that streams each weight row once with 16-byte loads and
//    applies it to every input row; bound by reading the weights. linearExpand adds the
//    LoRA expand of each output there, before it is stored (no second pass, no launch).
//    bf16 rows go to the tensor-core GEMV (gemv_mma.cu) instead: 2-4 of any weight, up to 16
//    of a weight under 32 MiB (where cuBLASLt's fixed cost dominates), 32 if out <= in.
//  - larger n with bf16 activations and bf16 weights: cuBLASLt (bf16 x bf16, f32
//    accumulate, bf16 out), bias added after by a small kernel. (The GEMV measured 18% of
//    HBM bandwidth at n = 8 and 9% at n = 16 on an H200: every warp re-reads all of x.)
//  - otherwise (f32 activations, f16/f32 weights, no cuBLASLt): a plain tiled kernel.
#include <algorithm>

#include "common.cuh"
#include "cublaslt.h"
#include "gemv_mma.cuh"

namespace mstar::gpu {
namespace {

constexpr int kGemvWarps = 8;
constexpr int kMaxGemvRows = 4;

// How much of a weight the GEMV prefetches into L2 while the kernel before it runs: all of a
// weight up to kWholePrefetch (every warp then streams from L2), else the rows of its first
// blocks up to kPartPrefetch, about what HBM delivers while a norm or an activation runs.
// More competes with the loads of the blocks that did not prefetch, which end the kernel:
// bench/decode_step.mjs, Qwen3-8B at 1 row, GPU ms a step with 0 / 2 / 4 / 8 / 16 / 32 MiB:
// LoRA off 4.55 / 4.51 / 4.50 / 4.54 / 4.67 / 4.74, one adapter 4.80 / 4.76 / 4.72 / 4.69 /
// 4.77 / 4.84 (its delta ops are longer kernels to prefetch under); o, whose kernel before is
// attention, with 16-34 MiB: 4.55-4.58 against 4.52. Qwen3-0.6B's weights (at
// most 12.6 MB) are prefetched whole, which was fastest: 0.890 ms a step against 0.922 with
// none and 0.914 with 4 MiB.
constexpr int64_t kWholePrefetch = int64_t(16) << 20, kPartPrefetch = int64_t(8) << 20;

// One warp per output feature. VEC: each lane takes 8 consecutive elements per step (one
// 16-byte load of bf16 weights), which needs in % 8 == 0 and 16-byte aligned rows.
// Graph-timed on an H200 (bench/gemv.mjs, against a measured 4.3 TB/s): Qwen3-8B's
// projections at n = 1 reach 54-83% of HBM bandwidth, Qwen3-0.6B's 29-53%; at n = 4,
// 44-60% and 20-38%. Giving a narrow output's row to 2-8 warps measured slower; so did
// holding 4-16 runs a lane in registers, the first loaded before awaitPrior (n = 1 mostly
// equal, 0.6B's qkv 4.7 -> 3.2 us but 8B's down 34 -> 55 us; n = 4 up to 3x slower).
//
// accumulate: out += the projection rounded as linear would store it, then the sum rounded
// (a bf16 model's residual stream: transformers adds the layer's bf16 output to it).
//
// The LoRA expand of output feature o for each row's slot: lane k takes rank entries k,
// k + 32, ... . At decode, B comes from HBM behind two dependent loads (the row's slot, then
// its rank): done after the weights they were three round trips at the end of every GEMV,
// so a one-row GEMV loads the lane's first entry (all of a rank up to 32) before the
// weights stream, and adds it to the lane's partial sum after them.
template <typename T, int NR>
struct LaneExpand {
  float t[NR], b[NR];  // rank entry k = lane per row; 0 where there is none
  int slice;           // slices.count: a column outside every slice gets nothing

  // Row r's rank in this slice and where its B row starts; 0: the row has no adapter.
  __device__ int64_t rowRank(const LoraExpandArgs& e, int r, int64_t o, int64_t outF, int64_t& bRow) const {
    const int32_t slot = e.slotOfRow[r];
    if (slice == e.slices.count || slot <= 0 || slot >= e.numSlots) return 0;
    bRow = ((o * e.numSlots + slot) * e.slices.count + slice) * e.rank;  // b: [outF, slots, slices * rank]
    return e.ranks.ranks ? min(e.rank, int64_t(e.ranks.ranks[int64_t(slot) * e.ranks.slices + slice])) : e.rank;
  }

  __device__ void load(const LoraExpandArgs& e, int64_t o, int n, int64_t outF, int lane) {
    slice = e.slices.of(o);
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      t[r] = b[r] = 0;
      int64_t bRow;
      if (r < n && lane < rowRank(e, r, o, outF, bRow)) {
        t[r] = toF(static_cast<const T*>(e.t)[(r * e.slices.count + slice) * e.rank + lane]);
        b[r] = loadAny(e.b.data, e.b.dtype, bRow + lane);
      }
    }
  }

  // acc[r] += this lane's entries of row r's expand, in k's order (ranks above 32 read the
  // rest now: the slot and rank again, from L1).
  __device__ void addTo(float (&acc)[NR], const LoraExpandArgs& e, int64_t o, int n, int64_t outF, int lane) const {
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      acc[r] += t[r] * b[r];
      if (e.rank <= 32 || r >= n) continue;
      int64_t bRow;
      const int64_t used = rowRank(e, r, o, outF, bRow);
      for (int64_t k = lane + 32; k < used; k += 32)
        acc[r] += toF(static_cast<const T*>(e.t)[(r * e.slices.count + slice) * e.rank + k]) *
                  loadAny(e.b.data, e.b.dtype, bRow + k);
    }
  }
};

// An extended projection's shrink rows (UnusedSlots) at one row: the grid holds W's blocks,
// then perSlot / kGemvWarps blocks for the row's slot; block b's first output, or -1 where the
// row has no adapter (slot 0, or a slot out of range). Every slot's rows had made Qwen3-8B's
// one-row qkv 768 + 24 blocks against 768 with no adapter, 3.3 us a layer longer in the stamps
// (bench/stamps.mjs); bench/decode_step.mjs on an H200, one adapter at one row, 4 slots, GPU ms a
// step, every slot's -> the row's: Qwen3-8B (12 layers) 1.672 -> 1.661 and 1.672 -> 1.661 (LoRA
// off 1.643), Llama-3.2-1B 0.934 -> 0.932.
__device__ __forceinline__ int64_t gemvFirstOutput(const UnusedSlots& u, int64_t outF) {
  const int64_t b = blockIdx.x;
  if (!u.slotOfRow || b < u.from / kGemvWarps) return b * kGemvWarps;
  const int64_t slot = u.slotOfRow[0];
  if (!u.holds(slot, outF)) return -1;
  return u.from + slot * u.perSlot + (b - u.from / kGemvWarps) * kGemvWarps;
}

template <typename T, typename W, int NR, bool VEC>
__global__ __launch_bounds__(kGemvWarps * 32) void gemvKernel(T* out, const T* x, const W* w, const void* bias,
                                                               DType biasType, int n, int64_t in, int64_t ldw,
                                                               int64_t outF, LoraExpandArgs lora, bool accumulate,
                                                               unsigned prefetchBlocks, WideRows wide, UnusedSlots u) {
  // One row's slot (slotOfRow, a step's input: read before the wait). For four rows its code
  // took the kernel from 48 to 60 registers a thread.
  int64_t first = int64_t(blockIdx.x) * kGemvWarps;
  if constexpr (NR == 1) first = gemvFirstOutput(u, outF);
  if (first < 0) return;
  int64_t o = first + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  const W* wr = w + o * ldw;
  // A wide row: the loop below takes its first columns; each row's own slot's after.
  const int64_t main = wide.slotOfRow ? wide.in : in;
  // While the kernel before this one finishes (a dependent launch), the warp's weight row
  // heads for L2 (no op of a step writes weights), so that the loop below reads it from
  // there: a wide row's b columns too, every slot's (which slot a row runs is not read
  // yet), or the loads after the loop went to HBM, a round trip at the end of the kernel.
  // Only the first prefetchBlocks blocks (see kPartPrefetch).
  const int64_t cols = wide.slotOfRow ? wide.in + wide.numSlots * wide.slotCols : in;
  if (blockIdx.x < prefetchBlocks && o < outF)
    for (int64_t byte = lane * 128; byte < cols * int64_t(sizeof(W)); byte += 32 * 128)
      prefetchL2(reinterpret_cast<const char*>(wr) + byte);
  awaitPrior();
  if (o >= outF) return;
  int32_t slot[NR];  // loaded before the weights stream: read after them, it would be a round trip more
#pragma unroll
  for (int r = 0; r < NR; ++r) slot[r] = wide.slotOfRow && r < n ? wide.slotOfRow[r] : 0;
  // What out holds already is read first, so its latency hides behind the weight loads.
  float before = accumulate && lane < n ? toF(out[lane * outF + o]) : 0.0f;
  // One row (decode at c=1) loads its expand terms before the weights stream; for more
  // rows, holding them through the loop cost 20 registers a thread (3 blocks an SM, not 5).
  LaneExpand<T, NR> expand;
  if (NR == 1 && lora.t) expand.load(lora, o, n, outF, lane);
  float acc[NR];
#pragma unroll
  for (int r = 0; r < NR; ++r) acc[r] = 0;
  if constexpr (VEC) {
    // Several weight loads in flight per lane.
#pragma unroll 4
    for (int64_t i = int64_t(lane) * 8; i < main; i += 32 * 8) {
      float wv[8];
      loadVec<W, 8>(wv, wr + i);
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        if (r < n) {
          float xv[8];
          loadVec<T, 8>(xv, x + r * in + i);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[r] += wv[j] * xv[j];
        }
      }
    }
  } else {
    for (int64_t i = lane; i < main; i += 32) {
      float wv = toF(wr[i]);
#pragma unroll
      for (int r = 0; r < NR; ++r)
        if (r < n) acc[r] += wv * toF(x[r * in + i]);
    }
  }
  // Each row's own slot's columns of a wide row (the others' are zeros: skipped, not read).
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    if (slot[r] <= 0 || slot[r] >= wide.numSlots) continue;
    const int64_t c0 = wide.in + int64_t(slot[r]) * wide.slotCols;
    for (int64_t k = lane; k < wide.slotCols; k += 32) acc[r] += toF(wr[c0 + k]) * toF(x[r * in + c0 + k]);
  }
  if (lora.t) {
    if (NR > 1) expand.load(lora, o, n, outF, lane);
    expand.addTo(acc, lora, o, n, outF, lane);
  }
  float b = bias ? loadAny(bias, biasType, o) : 0.0f;
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    float v = warpSum(acc[r]);
    if (lane == r && r < n) {
      T y = fromF<T>(v + b);
      out[r * outF + o] = accumulate ? fromF<T>(before + toF(y)) : y;
    }
  }
}

// 64 x 64 output tile per block, 16-deep k steps through shared memory (widened to f32),
// 4 x 4 outputs per thread.
constexpr int kBM = 64, kBN = 64, kBK = 16;

template <typename T, typename W>
__global__ __launch_bounds__(256) void gemmKernel(T* out, const T* x, const W* w, int64_t ldw, const void* bias,
                                                  DType biasType, int64_t n, int64_t in, int64_t outF,
                                                  bool accumulate) {
  awaitPrior();
  __shared__ float xs[kBK][kBM + 4];
  __shared__ float ws[kBK][kBN + 4];
  int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  int64_t m0 = int64_t(blockIdx.y) * kBM, n0 = int64_t(blockIdx.x) * kBN;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < in; k0 += kBK) {
    for (int e = threadIdx.x; e < kBM * kBK; e += 256) {
      int r = e / kBK, k = e % kBK;
      int64_t gm = m0 + r, gn = n0 + r, gk = k0 + k;
      xs[k][r] = gm < n && gk < in ? toF(x[gm * in + gk]) : 0.0f;
      ws[k][r] = gn < outF && gk < in ? toF(w[gn * ldw + gk]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kBK; ++k) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = xs[k][ty * 4 + i];
        b[i] = ws[k][tx * 4 + i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    int64_t gm = m0 + ty * 4 + i;
    if (gm >= n) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      int64_t gn = n0 + tx * 4 + j;
      if (gn >= outF) continue;
      T* dst = out + gm * outF + gn;
      T y = fromF<T>(acc[i][j] + (bias ? loadAny(bias, biasType, gn) : 0.0f));
      *dst = accumulate ? fromF<T>(toF(*dst) + toF(y)) : y;
    }
  }
}

// After cuBLASLt: y = its product (+ bias), rounded as linear stores it; out = y, or out += y.
template <typename T>
__global__ void epilogueKernel(T* out, const T* product, const void* bias, DType biasType, int64_t n, int64_t outF,
                               bool accumulate) {
  awaitPrior();
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < n * outF; j += int64_t(gridDim.x) * blockDim.x) {
    T y = bias ? fromF<T>(toF(product[j]) + loadAny(bias, biasType, j % outF)) : product[j];
    out[j] = accumulate ? fromF<T>(toF(out[j]) + toF(y)) : y;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T, typename W, int NR>
void launchGemv(T* out, const T* x, const W* w, int64_t ldw, const Weights* bias, int64_t n, int64_t in, int64_t outF,
                const LoraExpandArgs& lora, bool accumulate, const WideRows& wide, const UnusedSlots& unused) {
  // One row, whole blocks a slot, W's rows before them: the grid takes only the row's slot.
  // (Rows of 2-4, bf16, go to the tensor-core GEMV, which skips unused slots itself.)
  const bool skips = NR == 1 && unused.wholeBlocks(outF, kGemvWarps);
  const UnusedSlots u = skips ? unused : UnusedSlots{};
  const unsigned grid = blocksFor(skips ? u.from + u.perSlot : outF, kGemvWarps);
  const int64_t blockBytes = kGemvWarps * in * int64_t(sizeof(W));
  const int64_t weightBytes = outF * in * int64_t(sizeof(W));
  const int64_t budget = weightBytes <= kWholePrefetch ? weightBytes : kPartPrefetch;
  const unsigned prefetch = blockBytes ? unsigned(std::min<int64_t>(grid, (budget + blockBytes - 1) / blockBytes)) : 0;
  const void* b = bias ? bias->data : nullptr;
  DType bt = bias ? bias->dtype : DType::F32;
  const bool vec = in % 8 == 0 && ldw % 8 == 0 && (wide.slotOfRow ? wide.in : in) % 8 == 0 && aligned16(x) &&
                   aligned16(w);
  launch("linear GEMV kernel", vec ? gemvKernel<T, W, NR, true> : gemvKernel<T, W, NR, false>, grid, kGemvWarps * 32,
      0, out, x, w, b, bt, int(n), in, ldw, outF, lora, accumulate, prefetch, wide, u);
}

// n <= kMaxGemvRows rows; lora.t null: no LoRA.
void gemv(DType act, void* out, const void* x, Weights w, const Weights* bias, int64_t n, int64_t in, int64_t outF,
          const LoraExpandArgs& lora, bool accumulate, const WideRows& wide = {}, const UnusedSlots& unused = {}) {
  withAct(act, [&](auto t) {
    withFloat(w.dtype, [&](auto wt) {
      using T = decltype(t);
      using W = decltype(wt);
      T* o = static_cast<T*>(out);
      const T* xp = static_cast<const T*>(x);
      const W* wp = static_cast<const W*>(w.data);
      const int64_t ldw = w.ld ? w.ld : in;
      if (n == 1) launchGemv<T, W, 1>(o, xp, wp, ldw, bias, n, in, outF, lora, accumulate, wide, unused);
      else launchGemv<T, W, kMaxGemvRows>(o, xp, wp, ldw, bias, n, in, outF, lora, accumulate, wide, unused);
    });
  });
}

}  // namespace

void linear(DType act, void* out, const void* x, Weights w, const Weights* bias, int64_t n, int64_t in, int64_t outF,
            bool accumulate, const WideRows& wide, const UnusedSlots& unused) {
  if (n == 0 || outF == 0) return;
  if (!wide.slotOfRow && gemvMma(act, out, x, w, bias, n, in, outF, accumulate, unused)) return;
  if (n <= kMaxGemvRows) return gemv(act, out, x, w, bias, n, in, outF, LoraExpandArgs{}, accumulate, wide, unused);
  if (act == DType::BF16 && w.dtype == DType::BF16 && in > 0) {
    // Accumulating without a bias, cuBLASLt adds to out itself (beta = 1): one kernel, no
    // scratch pass over [n, outF] (a residual stream taking o or down, an adapter's expand).
    if (accumulate && !bias && cublaslt::gemmBf16(out, x, w.data, n, in, outF, stream(), true, w.ld)) return;
    // cuBLASLt writes out itself, or (accumulating) a scratch product that the epilogue adds.
    Scratch product(accumulate ? size_t(n * outF) * sizeof(bf16) : 0, "linear scratch");
    void* dst = accumulate ? product.as<void>() : out;
    if (cublaslt::gemmBf16(dst, x, w.data, n, in, outF, stream(), false, w.ld)) {
      if (bias || accumulate) {
        unsigned grid = unsigned(std::min<int64_t>(blocksFor(n * outF, 256), smCount() * 8));
        launch("linear epilogue kernel", epilogueKernel<bf16>, grid, 256, 0, static_cast<bf16*>(out),
            static_cast<const bf16*>(dst),
            bias ? bias->data : nullptr, bias ? bias->dtype : DType::F32, n, outF, accumulate);
      }
      return;
    }
  }
  withAct(act, [&](auto t) {
    withFloat(w.dtype, [&](auto wt) {
      using T = decltype(t);
      using W = decltype(wt);
      dim3 grid(blocksFor(outF, kBN), blocksFor(n, kBM));
      launch("linear kernel", gemmKernel<T, W>, grid, 256, 0, static_cast<T*>(out), static_cast<const T*>(x),
          static_cast<const W*>(w.data), w.ld ? w.ld : in,
          bias ? bias->data : nullptr, bias ? bias->dtype : DType::F32, n, in, outF, accumulate);
    });
  });
}

// At decode sizes the tensor-core GEMV stores SiLU(gate) · up itself (gemvMma's gated form): a
// layer's SiLU·mul had been a launch and a round trip of its own, ~1.8 us a layer of
// Qwen3-0.6B's one-row step for a few KB. bench/decode_step.mjs on an H200, LoRA off, GPU ms a
// step, the two ops -> this (same process): Qwen3-0.6B 1 row 0.700 -> 0.683, 8 rows 0.772 ->
// 0.738, 16 rows 0.891 -> 0.866 (32 rows, cuBLASLt's, equal); Qwen3-8B (12 layers) 2 rows 1.765
// -> 1.728, 4 rows 1.888 -> 1.821; Llama-3.2-1B 2 rows 0.930 -> 0.884. Its one-row GEMV of a
// large weight (linear.cu's own) and cuBLASLt still take the two ops.
void linearSiluMul(DType act, void* out, const void* x, Weights w, const Weights* bias, int64_t n, int64_t in,
                   int64_t inter, void* gateUp) {
  if (n == 0 || inter == 0) return;
  if (gemvMma(act, out, x, w, bias, n, in, inter, false, {}, true)) return;  // declines a bias
  linear(act, gateUp, x, w, bias, n, in, 2 * inter);
  siluMul(act, out, gateUp, n, inter);
}

void linearExpand(DType act, void* out, const void* x, Weights w, const Weights* bias, int64_t n, int64_t in,
                  int64_t outF, LoraExpandArgs lora, bool accumulate) {
  if (n == 0 || outF == 0) return;
  if (n <= kMaxGemvRows) return gemv(act, out, x, w, bias, n, in, outF, lora, accumulate);
  if (!accumulate) {
    linear(act, out, x, w, bias, n, in, outF);
    loraExpand(act, out, lora.t, lora.b, lora.numSlots, lora.slotOfRow, lora.slices, n, outF, lora.rank, lora.ranks);
    return;
  }
  // Accumulating, the adapter's delta joins the projection before the sum (added to a bf16
  // residual on its own, a small delta would mostly round away): the projection goes to
  // scratch, and one kernel adds projection + adapter to out.
  Scratch delta(size_t(n * outF) * dtypeSize(act), "linearExpand scratch");
  linear(act, delta.as<void>(), x, w, bias, n, in, outF);
  loraExpandAdd(act, out, delta.as<void>(), lora.t, lora.b, lora.numSlots, lora.slotOfRow, lora.slices, n, outF,
                lora.rank, lora.ranks);
}

}  // namespace mstar::gpu
