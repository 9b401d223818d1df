// The decode GEMM on tensor cores for few rows: 2 to 4 of any weight; of weights under
// 32 MiB 1 to 16 rows, or 32 where out <= in. Like the GEMV it reads each weight once, but
// it multiplies on tensor cores, so a weight element's cost does not grow with the rows: the
// GEMV re-reads every row of x through L1 for each weight load. Graph-timed on an H200
// (bench/gemv.mjs, µs):
//   Qwen3-8B, 2 rows, this kernel / the register-batched one before it: qkv 16.5 / 18.3,
//     o 12.5 / 15.6, gate_up 57.3 / 59.0, down 34.6 / 40.6; at 8 rows cuBLASLt is faster on
//     qkv, gate_up and down (16.5 / 18.0, 52.6 / 61.4, 30.6 / 35.5), hence 4 rows there.
//   Qwen3-0.6B, 8 rows, this kernel / cuBLASLt: qkv 3.8 / 5.1, o 3.3 / 5.9, gate_up 5.2 /
//     6.3, down 4.4 / 6.9 (16 rows: 4.6 / 5.1, 4.1 / 5.9, 6.1 / 6.5, 5.6 / 8.5; at 32 rows
//     cuBLASLt wins where x is read through L1): cuBLASLt's few microseconds of fixed cost
//     dominate small weights.
//   x through the ring too, where out <= in, against x through L1 (cuBLASLt at 32 rows):
//     0.6B o 3.30 / 2.60 at 8 rows, 5.93 / 4.14 at 32; down 4.47 / 3.25, 8.1 / 5.55; 8B o
//     12.6 / 12.0 at 2 rows, down 35.9 / 33.6. Where out > in it lost (0.6B gate_up at 2
//     rows 4.7 / 6.2): its ring holds fewer weight stages, and more blocks re-read x.
// One row of a small weight too, launched early by the decode norm before it (norm.cu):
//   Qwen3-0.6B's decode step at one row, GPU ms (bench/decode_step.mjs), the GEMV / this
//     kernel: 0.778 / 0.695 LoRA off, 0.852 / 0.797 one adapter; without the norm's early
//     launch this kernel gained only 0.778 -> 0.761.
// It also starts early (programmatic dependent launch): its first weight stages stream while
// the kernel before it ends, which cuBLASLt's kernels do not allow. It prefetches nothing
// more to L2 before the wait, as the GEMV does: the ring's stages already keep HBM busy, and
// the first 16 MiB of the weight prefetched so had slowed every decode step it ran
// (bench/decode_step.mjs, GPU ms a step, with / without: Qwen3-8B 2 rows 5.07 / 4.86, 4 rows
// 5.28 / 5.09; Qwen3-0.6B 2 rows 0.94 / 0.91, 8 rows 1.016 / 0.996, 32 rows 1.443 / 1.435;
// one adapter 0.5-1.2% faster).
//
// A block takes 16 outputs (weight rows) and all of `in`; its warps take turns along k, 32
// at a time, so that together they read 512 neighbouring bytes of each row (each warp a span
// of its own ran 20-40% slower on 8B's gate_up and down). A warp's mma.m16n8k16 takes 16
// weight rows × 16 k as A and 8 rows of x as B. A dot product sums over k in any order, so
// each lane's k are the 8 consecutive elements it loads with one 16-byte load (lanes
// 4g..4g+3: 32 consecutive k of row g), fed to the fragment's k slots the same way for W
// and for x: no shuffle. The weights (and x, see above) go through a ring of cp.async stages
// in shared memory, each lane's slots its own; the warps' partial sums meet in shared memory
// at the end. (Persistent blocks, each taking tiles in turn with its ring running on across
// them, measured no faster than this: the loop they need slowed most shapes by up to 12%.)
#include "gemv_mma.cuh"

#include <algorithm>

#include "cp_async.cuh"
#include "mma.cuh"

namespace mstar::gpu {
namespace {

constexpr int kWarps = 8;
// Rows a weight takes here; cuBLASLt takes more. Weights under kSmallWeightBytes take more
// rows (cuBLASLt's fixed cost is most of its time there), and more again where x goes
// through the ring (where out ≤ in).
constexpr int64_t kSmallWeightBytes = int64_t(32) << 20;
constexpr int kMaxRows = 4, kMaxRowsSmall = 16, kMaxRowsSmallXRing = 32;
// One row of a large weight goes to the GEMV, which prefetches it into L2 ahead of its wait;
// one row of a small one comes here (see gemvMmaFit).
constexpr int kMinRowsLarge = 2;

// A lane's 16-byte slots a stage: weight rows g and g + 8, and with XR one of x for each
// group of 8 rows. A lane reads back only what it copied itself, so no barrier guards them.
__host__ __device__ constexpr int slotsFor(int ng, bool xr) { return 2 + (xr ? ng : 0); }
// 32-k steps each lane has in flight: 8 (4 and 12 were slower), or fewer where 8 stages'
// slots pass 24 a lane (96 KB a block, two blocks an SM). cp.async needs no register per
// load in flight (a register batch got 32 registers from ptxas whatever its size, so not all
// of its loads were in flight).
__host__ __device__ constexpr int stagesFor(int ng, bool xr) {
  const int fit = 24 / slotsFor(ng, xr);
  return fit < 8 ? fit : 8;
}
// The ring's bytes: its stages, or fewer where the steps (in / 256) are fewer (see launchGemvMma).
constexpr size_t ringBytes(int ng, bool xr, int64_t steps = INT64_MAX) {
  return size_t(std::min<int64_t>(stagesFor(ng, xr), steps)) * kWarps * slotsFor(ng, xr) * 32 * sizeof(uint4);
}
// The warps' partial sums at the end (static shared memory).
__host__ __device__ constexpr size_t partialBytes(int ng) { return size_t(kWarps) * ng * 4 * 32 * sizeof(float); }
// With a norm: the warps' sums of squares of x's rows (static), and the norm weight after the
// ring (dynamic, in / 8 runs of 8).
__host__ __device__ constexpr size_t squaresBytes(int ng) { return size_t(kWarps) * ng * 8 * sizeof(float); }
constexpr size_t normBytes(int64_t in) { return size_t(in) * sizeof(bf16); }
// With MERGE: x's n rows, merged from attention's partials, after the ring; each row 16 bytes
// longer than in, so that the 8 rows a warp's lanes read at one step start in different banks.
__host__ __device__ constexpr int64_t mergedPitch(int64_t in) { return in + 8; }
constexpr size_t mergedBytes(int n, int64_t in) { return size_t(n) * mergedPitch(in) * sizeof(bf16); }
// MERGE's rows: a thread merges at most kMaxMergeRuns runs of 8 of x (attention_split.cuh's
// mergeRuns), all their loads in flight at once. One run after another, a round trip each, had
// made the o projection at 2 and 4 rows of Qwen3-0.6B slower than attention's own merge had been.
static_assert(kWarps * 32 == kMergeThreads, "mergeRuns counts this kernel's threads");
constexpr int64_t kMaxMergeIn = int64_t(kMaxMergeRuns) * kMergeThreads * 8;
// The most MERGE's rows take: n · in <= kMaxMergeIn, n <= kMaxRowsSmall (x through L1's rows).
constexpr size_t kMaxMergedBytes = size_t(kMaxMergeIn + 8 * kMaxRowsSmall) * sizeof(bf16);

// x's 8 elements times the norm weight's, each product rounded to bf16 (exact in f32, then one
// rounding: as the separate norm rounds its output once).
__device__ __forceinline__ uint4 timesWeight(uint4 x, uint4 w) {
  auto mul = [](unsigned a, unsigned b) {
    const __nv_bfloat162 p = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a), *reinterpret_cast<const __nv_bfloat162*>(&b));
    return *reinterpret_cast<const unsigned*>(&p);
  };
  return make_uint4(mul(x.x, w.x), mul(x.y, w.y), mul(x.z, w.z), mul(x.w, w.w));
}

// The sum of the squares of x's 8 elements, in f32.
__device__ __forceinline__ float sumSquares(uint4 x) {
  const unsigned v[4] = {x.x, x.y, x.z, x.w};
  float s = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v[i]));
    s += f.x * f.x + f.y * f.y;
  }
  return s;
}

// An extended projection's grid (see UnusedSlots): first the blocks of the slots its rows use,
// perSlot / 16 for each of at most min(n, slots) slots, then W's rows (from / 16). A grid over
// every slot's A had cost one adapter's decode step in proportion to the pool, and a grid of
// every slot whose unused slots' blocks exit had cost 2% at 1-4 slots (their reads of
// slotOfRow delayed the used slot's block). bench/decode_step.mjs, one adapter, GPU ms a step,
// every slot's blocks -> these: Qwen3-0.6B one row 0.799 / 0.798 / 0.809 / 0.852 -> 0.797 /
// 0.797 / 0.796 / 0.800 with 1 / 3 / 4 / 8 slots, 8 rows 0.952 -> 0.893 (8 slots); Qwen3-8B
// 4 rows 1.975 -> 1.908 (4 slots).
//
// The block's first output (u.slotOfRow null: block b takes outputs 16 b), or -1 where its slot
// is past the slots the rows use. The slots' blocks come first so that their reads of slotOfRow
// go out before W's blocks fill the memory system. n <= 32: a lane a row.
__device__ __forceinline__ int64_t firstOutput(const UnusedSlots& u, int64_t outF, int n, int lane) {
  const unsigned slotBlocks = u.slotOfRow ? gridDim.x - unsigned(u.from / 16) : 0;
  if (blockIdx.x >= slotBlocks) return int64_t(blockIdx.x - slotBlocks) * 16;
  const int perSlotBlocks = int(u.perSlot / 16), k = int(blockIdx.x) / perSlotBlocks;
  const int s = lane < n ? u.slotOfRow[lane] : 0;
  // Lanes holding the first row of each slot with shrink rows (a slot past the table must not take
  // the blocks of one after it).
  const unsigned same = __match_any_sync(~0u, s);
  unsigned firsts = __ballot_sync(~0u, u.holds(s, outF) && (same & ((1u << lane) - 1)) == 0);
  if (__popc(firsts) <= k) return -1;
  for (int i = 0; i < k; ++i) firsts &= firsts - 1;  // the k-th such lane is now the lowest bit
  const int slot = __shfl_sync(~0u, s, __ffs(firsts) - 1);
  return u.from + slot * u.perSlot + (blockIdx.x % perSlotBlocks) * 16;
}

// NG: groups of 8 rows of x (n <= 8 NG). XR: x through the ring too; otherwise each step
// loads x through L1 (every block reads the same x), which is faster where out > in.
// GATED: a block's 16 weight rows are 8 of gate and the same 8 of up, so that a lane's D holds
// a gate output and its up output (rows g and g + 8 of the 16), and the block stores SiLU(gate)
// · up, 8 outputs: a decode layer's SiLU·mul then costs no launch and no round trip of its own.
// NORM: x is the residual stream and the block norms it itself (see RowNorm), so that a decode
// layer's two norms cost no launch: the norm weight comes into shared memory before the wait
// (the separate norm's trick: a weight in the loop would come from HBM, a step at a time, as
// a fortieth-session prototype that read it there measured), each lane sums the squares of
// the x it loads anyway, and the warps' sums meet with their partial sums.
// MERGE: x is attention's output, left as its splits' partials (attention_split.cuh): after the
// wait the block merges x's rows into shared memory (MERGE runs of 8 a thread, 1 or 2, every
// split's loads at once) and reads x there, so attention need not merge a short context's
// splits, which had cost it a round trip and a ticket after its keys (attention_linear.cu).
// x through L1's path (no XR).
template <int NG, bool XR, bool GATED, bool NORM, int MERGE>
__global__ __launch_bounds__(kWarps * 32) void gemvMmaKernel(bf16* out, const bf16* x, const bf16* w, int64_t ldw,
                                                             const void* bias, DType biasType, int n, int64_t in,
                                                             int64_t outF, bool accumulate, UnusedSlots u,
                                                             RowNorm norm, SplitPartials merge) {
  static_assert(!MERGE || (!XR && !GATED && !NORM), "x merged into shared memory is read as x through L1");
  constexpr int kStages = stagesFor(NG, XR), kSlots = slotsFor(NG, XR);
  extern __shared__ uint4 ring[];  // [kStages][kWarps][kSlots][32], then with NORM the norm weight
  __shared__ float partial[kWarps][NG * 4][32];
  __shared__ float squares[NORM ? kWarps : 1][NORM ? NG * 8 : 1];
  static_assert(sizeof(partial) == partialBytes(NG), "the launch's carveout counts partialBytes");
  static_assert(!NORM || sizeof(squares) == squaresBytes(NG), "the launch's carveout counts squaresBytes");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  // The warp's k: `steps` runs of 32 elements, `stride` apart, from 32 · warp.
  const int64_t o0 = GATED ? int64_t(blockIdx.x) * 8 : firstOutput(u, outF, n, lane), stride = 32 * kWarps;
  if (o0 < 0) return;
  const int64_t steps = in / stride;
  // The norm weight's runs of 8 (after the stages the launch gave the ring), copied as a group
  // of its own before the weight stages' groups; or MERGE's rows of x there.
  uint4* const normRuns = ring + (steps < kStages ? steps : kStages) * kWarps * kSlots * 32;
  bf16* const merged = reinterpret_cast<bf16*>(normRuns);
  // MERGE: each row's splits, from step inputs (known before the wait), a thread a row.
  __shared__ int splitsOfRow[MERGE ? kMaxRowsSmall : 1];
  if constexpr (MERGE) {
    if (threadIdx.x < n) splitsOfRow[threadIdx.x] = merge.splitsOf(threadIdx.x);
    __syncthreads();
  }
  if constexpr (NORM) {
    for (int64_t r = threadIdx.x; r < in / 8; r += blockDim.x)
      copy16(normRuns + r, static_cast<const bf16*>(norm.w) + 8 * r);
    commitCopies();
  }
  // Weight row r of the block's 16 (gated: gate's o0 + r, then up's o0 + r - 8). Rows past the
  // outputs read the last (valid memory); their outputs are not stored.
  auto row = [&](int r) {
    const int64_t o = GATED ? (r / 8) * outF + min(o0 + r % 8, outF - 1) : min(o0 + r, outF - 1);
    return w + o * ldw + 32 * warp;
  };
  const bf16* w0 = row(g) + 8 * q;
  const bf16* w8 = row(g + 8) + 8 * q;
  const bf16* xr[NG];  // row 8 gi + g of x at the lane's k (null past n), once x is written
  auto slot = [&](int64_t step, int h) { return ring + (((step % kStages) * kWarps + warp) * kSlots + h) * 32 + lane; };
  // Step j's x copies (zeros for rows past n).
  auto issueX = [&](int64_t j) {
#pragma unroll
    for (int gi = 0; gi < NG; ++gi) copy16(slot(j, 2 + gi), xr[gi] ? xr[gi] + j * stride : x, xr[gi]);
  };
  // Step j's copies into its slots, as one group (an empty group past the last step, so that
  // there is one group a step and awaitCopies counts steps).
  auto issue = [&](int64_t j, bool withX) {
    if (j < steps) {
      copy16(slot(j, 0), w0 + j * stride);
      copy16(slot(j, 1), w8 + j * stride);
      if (withX) issueX(j);
    }
    commitCopies();
  };
  // The first stages' weights stream while the kernel before ends (no op of a step writes
  // weights); x is that kernel's output, so x's copies for those stages wait, a group a
  // stage. Step j < kStages - 1 then needs groups j and kStages - 1 + j, a later step j its
  // group kStages - 1 + j: either way all but the kStages - 1 latest groups.
  for (int j = 0; j < kStages - 1; ++j) issue(j, false);
  awaitPrior();
  if constexpr (NORM) {  // the norm weight's group, the oldest: every thread's copies landed
    awaitCopies<kStages - 1>();
    __syncthreads();
  }
  // The outputs this thread stores at the end: v = threadIdx.x + i · 256 of the block's NG · 4 · 32.
  // D's element k of lane l is row accColumn(l, k) of its group of x, output accRow(l, k) of the 16.
  constexpr int kOuts = (NG * 4 * 32 + kWarps * 32 - 1) / (kWarps * 32);
  auto rowOf = [&](int v) { return 8 * (v / 128) + accColumn(v % 32, v / 32 % 4); };
  auto outputOf = [&](int v) { return o0 + accRow(v % 32, v / 32 % 4); };
  // Accumulating, what out holds there, loaded now (an earlier op wrote it): the stores at the
  // end then wait on no round trip of their own. bench/decode_step.mjs, LoRA off (o and down
  // accumulate), GPU ms a step, loaded at the end -> here: Qwen3-0.6B 1 row 0.706 -> 0.696,
  // 8 rows 0.786 -> 0.772; Qwen3-8B (12 layers) 4 rows 1.870 -> 1.838.
  float prior[kOuts] = {};
#pragma unroll
  for (int i = 0; i < kOuts; ++i) {
    const int v = threadIdx.x + i * kWarps * 32;
    if (accumulate && v < NG * 4 * 32 && rowOf(v) < n && outputOf(v) < outF)
      prior[i] = toF(out[rowOf(v) * outF + outputOf(v)]);
  }
  // MERGE: the thread's runs i of x (row i / (in / 8)), every load, then each merge, after the
  // loads of out above, which are then in flight with them. Issued after the merge, they had been
  // a round trip of their own: Qwen3-0.6B at one sequence, GPU ms a step against attention then
  // linear, 128 keys 0.626 against 0.621, 192 keys 0.632 against 0.659; issued before, 0.625
  // against 0.627 and 0.625 against 0.658 (bench/decode_step.mjs; RESULTS, fifty-first session).
  if constexpr (MERGE > 0) {
    const int runsPerRow = int(in / 8);
    PendingRun<kMaxRunSplits / MERGE> runs[MERGE];
#pragma unroll
    for (int k = 0; k < MERGE; ++k) {
      const int i = threadIdx.x + k * kWarps * 32, r = i / runsPerRow;
      if (r < n) runs[k].load(merge, r, splitsOfRow[r], (i - r * runsPerRow) * 8);
    }
#pragma unroll
    for (int k = 0; k < MERGE; ++k) {
      const int i = threadIdx.x + k * kWarps * 32, r = i / runsPerRow;
      if (r < n) *reinterpret_cast<uint4*>(merged + r * int(mergedPitch(in)) + (i - r * runsPerRow) * 8) = runs[k].merged();
    }
    __syncthreads();
  }
  const bf16* const xRows = MERGE ? merged : x;
  const int64_t ldx = MERGE ? mergedPitch(in) : in;
#pragma unroll
  for (int gi = 0; gi < NG; ++gi) xr[gi] = 8 * gi + g < n ? xRows + (8 * gi + g) * ldx + 32 * warp + 8 * q : nullptr;
  if constexpr (XR)
    for (int j = 0; j < kStages - 1; ++j) {
      if (j < steps) issueX(j);
      commitCopies();
    }
  float acc[NG][4] = {};
  float squared[NG] = {};  // NORM: this lane's share of the sum of squares of row 8 gi + g of x
  for (int64_t j = 0; j < steps; ++j) {
    issue(j + kStages - 1, XR);  // into the slots step j - 1 came from (this lane read them already)
    awaitCopies<kStages - 1>();  // step j's copies have landed
    const uint4 a0 = *slot(j, 0), a8 = *slot(j, 1);
#pragma unroll
    for (int gi = 0; gi < NG; ++gi) {
      uint4 b = XR       ? *slot(j, 2 + gi)
                : xr[gi] ? *reinterpret_cast<const uint4*>(xr[gi] + j * stride)
                         : make_uint4(0, 0, 0, 0);
      if constexpr (NORM) {  // the lane's k: 32 warp + 8 q + j stride, run 4 warp + q + 32 j
        squared[gi] += sumSquares(b);
        b = timesWeight(b, normRuns[4 * warp + q + (stride / 8) * j]);
      }
      // k slots 2q, 2q+1 | 2q+8, 2q+9 take elements 0, 1 | 2, 3 of the lane's 8, then 4, 5 | 6, 7.
      mma(acc[gi], {a0.x, a8.x, a0.y, a8.y}, b.x, b.y);
      mma(acc[gi], {a0.z, a8.z, a0.w, a8.w}, b.z, b.w);
    }
  }
  awaitCopies<0>();  // the empty tail groups: nothing in flight at the exit
#pragma unroll
  for (int gi = 0; gi < NG; ++gi)
#pragma unroll
    for (int k = 0; k < 4; ++k) partial[warp][gi * 4 + k][lane] = acc[gi][k];
  if constexpr (NORM)
#pragma unroll
    for (int gi = 0; gi < NG; ++gi) {  // the 4 lanes of row g, then the warps' in shared memory
      float s = squared[gi];
      s += __shfl_xor_sync(~0u, s, 1);
      s += __shfl_xor_sync(~0u, s, 2);
      if (q == 0) squares[warp][8 * gi + g] = s;
    }
  __syncthreads();
  // Row r's norm scale (1 without NORM), as rmsNorm computes it.
  auto scaleOf = [&](int r) {
    float s = 0;
    if constexpr (NORM) {
#pragma unroll
      for (int p = 0; p < kWarps; ++p) s += squares[p][r];
      return 1.0f / sqrtf(s / float(in) + norm.eps);
    } else {
      return 1.0f;
    }
  };
  // Each output's partial sums in warp order.
#pragma unroll
  for (int i = 0; i < kOuts; ++i) {
    const int v = threadIdx.x + i * kWarps * 32, r = rowOf(v);
    const int64_t o = outputOf(v);
    if (v >= NG * 4 * 32 || r >= n || o >= outF) continue;
    if (GATED && v / 32 % 4 >= 2) continue;  // an up output: stored with its gate's
    float s = 0;
#pragma unroll
    for (int p = 0; p < kWarps; ++p) s += partial[p][v / 32][v % 32];
    const float scale = scaleOf(r);
    s *= scale;
    if constexpr (GATED) {
      float up = 0;  // D's element k + 2: row g + 8 of the 16, the same column
#pragma unroll
      for (int p = 0; p < kWarps; ++p) up += partial[p][v / 32 + 2][v % 32];
      out[r * outF + o] = fromF<bf16>(siluTimes(toF(fromF<bf16>(s)), toF(fromF<bf16>(up * scale))));
      continue;
    }
    const bf16 y = fromF<bf16>(s + (bias ? loadAny(bias, biasType, o) : 0.0f));
    out[r * outF + o] = accumulate ? fromF<bf16>(prior[i] + toF(y)) : y;
  }
}

// grid: the blocks of 16 rows (with u's slot layout, those of W and of the slots the rows use;
// gated, of 8 outputs).
template <int NG, bool XR, bool GATED, bool NORM, int MERGE>
void launchGemvMma(bf16* out, const bf16* x, const bf16* w, int64_t ldw, const Weights* bias, int n, int64_t in,
                   int64_t outF, bool accumulate, const UnusedSlots& u, unsigned grid, const RowNorm& norm,
                   const SplitPartials& merge) {
  constexpr size_t kRing = ringBytes(NG, XR) + (NORM ? normBytes(kMaxNormIn) : 0) + (MERGE ? kMaxMergedBytes : 0);
  constexpr auto kernel = gemvMmaKernel<NG, XR, GATED, NORM, MERGE>;
  static const bool sized = [] {  // the ring is over the 48 KB a launch gets without asking
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kRing)),
          "cudaFuncSetAttribute (tensor-core GEMV)");
    return true;
  }();
  (void)sized;
  // Shared memory for the blocks this grid puts on an SM, the rest L1 (carveoutFor): at the
  // driver's choice (the most shared memory) the SM kept that carveout through the kernels
  // after, decode attention among them. bench/decode_step.mjs, Qwen3-0.6B, GPU ms a step,
  // before -> after: LoRA off 2 rows 0.773 -> 0.740, 16 rows 0.993 -> 0.920, 32 rows 1.423 ->
  // 1.333, 16 sequences of 4096 keys 3.10 -> 2.62; one adapter 32 rows 1.505 -> 1.411, 16 of
  // 4096 keys 3.21 -> 2.73; 1 and 64 rows (no tensor-core GEMV) and Qwen3-8B equal.
  // The ring only as deep as the steps (in / 256) where they are fewer than its stages: step j's
  // copies go to stage j mod the stages, so the others would hold shared memory that no copy
  // touches and that the kernels launched early after this one could use. bench/decode_step.mjs,
  // Qwen3-0.6B (qkv and gate_up: 4 steps of 8 stages), one adapter, GPU ms a step, the whole
  // ring -> this, on two machines: 1 row 0.797 -> 0.792 and 0.797 -> 0.790, 2 rows 0.823 ->
  // 0.813 and 0.824 -> 0.813; LoRA off and Qwen3-8B (12 layers) equal.
  const int64_t perSm = (grid + smCount() - 1) / smCount();
  const size_t ring = ringBytes(NG, XR, in / (32 * kWarps)) + (NORM ? normBytes(in) : 0) + (MERGE ? mergedBytes(n, in) : 0);
  const size_t statics = partialBytes(NG) + (NORM ? squaresBytes(NG) : 0);
  launchCarved("linear tensor-core GEMV kernel", carveoutFor(perSm, ring + statics), kernel, grid, kWarps * 32, ring,
      out, x, w, ldw, bias ? bias->data : nullptr, bias ? bias->dtype : DType::F32, n, in, outF, accumulate, u, norm, merge);
}

// Groups of 8 rows of x that dispatchRows gives n rows.
constexpr int groupsFor(int64_t n) { return n <= 8 ? 1 : n <= 16 ? 2 : 4; }

// Whether every block of a grid with a norm is on the SMs at once (its shared memory: the ring,
// the partial sums, the norm weight and the sums of squares). Only then does each block's copy
// of the norm weight land before the wait; a later wave's blocks copy it on their path. Where
// the grid does not fit, the norm and the GEMV run apart. bench/decode_step.mjs on an H200,
// LoRA off, GPU ms a step, apart -> fused regardless: Qwen3-8B (12 layers; in 4096: 2 blocks an
// SM where the GEMV alone fits 3; qkv 384 and gate_up 1536 blocks) 2 rows 1.755 -> 1.868, 4 rows
// 1.815 -> 2.110; Llama-3.2-1B 2 rows 0.883 -> 0.898 (gate_up's 1024 blocks, 3 an SM).
bool normFits(int ng, bool xr, int64_t in, unsigned grid) {
  const size_t bytes = ringBytes(ng, xr, in / (32 * kWarps)) + partialBytes(ng) + normBytes(in) + squaresBytes(ng);
  return int64_t(grid) <= int64_t(blocksPerSm(bytes)) * smCount();
}

template <bool XR, bool GATED, bool NORM, int MERGE = 0>
void dispatchRows(bf16* out, const bf16* x, const bf16* w, int64_t ldw, const Weights* bias, int n, int64_t in,
                  int64_t outF, bool accumulate, const UnusedSlots& u, int64_t gridRows, const RowNorm& norm,
                  const SplitPartials& merge = {}) {
  const unsigned grid = GATED ? blocksFor(outF, 8) : blocksFor(gridRows, 16);
  if (n <= 8) launchGemvMma<1, XR, GATED, NORM, MERGE>(out, x, w, ldw, bias, n, in, outF, accumulate, u, grid, norm, merge);
  else if (n <= 16)
    launchGemvMma<2, XR, GATED, NORM, MERGE>(out, x, w, ldw, bias, n, in, outF, accumulate, u, grid, norm, merge);
  else if constexpr (XR && !GATED)
    launchGemvMma<4, XR, GATED, NORM, MERGE>(out, x, w, ldw, bias, n, in, outF, accumulate, u, grid, norm, merge);
}

// dispatchRows with NORM where norm has a weight.
template <bool XR, bool GATED = false>
void dispatchNorm(bf16* out, const bf16* x, const bf16* w, int64_t ldw, const Weights* bias, int n, int64_t in,
                  int64_t outF, bool accumulate, const UnusedSlots& u, int64_t gridRows, const RowNorm& norm) {
  if (norm.w) dispatchRows<XR, GATED, true>(out, x, w, ldw, bias, n, in, outF, accumulate, u, gridRows, norm);
  else dispatchRows<XR, GATED, false>(out, x, w, ldw, bias, n, in, outF, accumulate, u, gridRows, norm);
}

}  // namespace

GemvMmaFit gemvMmaFit(int64_t n, int64_t in, int64_t outF) {
  if (in % (kWarps * 32) != 0) return GemvMmaFit::None;
  if (in * outF * int64_t(sizeof(bf16)) >= kSmallWeightBytes)
    return n >= kMinRowsLarge && n <= kMaxRows ? GemvMmaFit::Large : GemvMmaFit::None;
  // x through the ring where out <= in (measured: see the top of this file)
  return n >= 1 && n <= (outF <= in ? kMaxRowsSmallXRing : kMaxRowsSmall) ? GemvMmaFit::Small : GemvMmaFit::None;
}

bool gemvMmaMerges(DType act, Weights w, int64_t n, int64_t in, int64_t outF) {
  return act == DType::BF16 && w.dtype == DType::BF16 && gemvMmaFit(n, in, outF) != GemvMmaFit::None &&
         n <= kMaxRowsSmall && mergeRuns(n, in) <= kMaxMergeRuns && runsOf8(w.data, w.ld ? w.ld : in, sizeof(bf16));
}

bool gemvMma(DType act, void* out, const void* x, Weights w, const Weights* bias, int64_t n, int64_t in, int64_t outF,
             bool accumulate, const UnusedSlots& u, bool gated, const RowNorm& norm, const SplitPartials* merge) {
  const int64_t ldw = w.ld ? w.ld : in, wRows = gated ? 2 * outF : outF;
  if (merge ? gated || norm.w || !gemvMmaMerges(act, w, n, in, outF)
            : act != DType::BF16 || w.dtype != DType::BF16 || gemvMmaFit(n, in, wRows) == GemvMmaFit::None ||
                  !runsOf8(x, in, sizeof(bf16)) || !runsOf8(w.data, ldw, sizeof(bf16)))
    return false;
  if (norm.w && (in > kMaxNormIn || accumulate || u.slotOfRow || !runsOf8(norm.w, in, sizeof(bf16)) ||
                 !normFits(groupsFor(n), !gated && outF <= in, in, gated ? blocksFor(outF, 8) : blocksFor(outF, 16))))
    return false;
  auto* o = static_cast<bf16*>(out);
  auto* xp = static_cast<const bf16*>(x);
  auto* wp = static_cast<const bf16*>(w.data);
  if (gated) {  // x through L1 (wRows > in), at most 16 rows (dispatchRows); no bias, accumulate or slot layout
    if (wRows <= in || n > 16 || bias || accumulate || u.slotOfRow) return false;
    dispatchNorm<false, true>(o, xp, wp, ldw, nullptr, int(n), in, outF, false, {}, 0, norm);
    return true;
  }
  // Whole blocks a slot, n <= 32 (a lane a row; gemvMmaFit's rows are fewer), and W's rows
  // before them (so that the grid is never empty); else every slot's rows, as W's.
  UnusedSlots slots;
  int64_t gridRows = outF;
  if (u.wholeBlocks(outF, 16) && n <= 32) {
    slots = u;
    gridRows = u.from + std::min(n, (outF - u.from) / u.perSlot - 1) * u.perSlot;  // slot 0 aside
  }
  if (merge && mergeRuns(n, in) == 1)
    dispatchRows<false, false, false, 1>(o, nullptr, wp, ldw, bias, int(n), in, outF, accumulate, slots, gridRows, {},
                                         *merge);
  else if (merge)
    dispatchRows<false, false, false, 2>(o, nullptr, wp, ldw, bias, int(n), in, outF, accumulate, slots, gridRows, {},
                                         *merge);
  else if (outF <= in) dispatchNorm<true>(o, xp, wp, ldw, bias, int(n), in, outF, accumulate, slots, gridRows, norm);
  else dispatchNorm<false>(o, xp, wp, ldw, bias, int(n), in, outF, accumulate, slots, gridRows, norm);
  return true;
}

}  // namespace mstar::gpu
