// The decode GEMM on tensor cores for few rows: 2 to 4 of any weight, up to 16 of weights
// under 32 MiB. Like the GEMV it reads each weight once, but it multiplies on tensor cores,
// so a weight element's cost does not grow with the rows: the GEMV re-reads every row of x
// through L1 for each weight load. Graph-timed on an H200 (bench/gemv.mjs, µs):
//   Qwen3-8B, 2 rows, this kernel / the register-batched one before it: qkv 16.5 / 18.3,
//     o 12.5 / 15.6, gate_up 57.3 / 59.0, down 34.6 / 40.6; at 8 rows cuBLASLt is faster on
//     qkv, gate_up and down (16.5 / 18.0, 52.6 / 61.4, 30.6 / 35.5), hence 4 rows there.
//   Qwen3-0.6B, 8 rows, this kernel / cuBLASLt: qkv 3.8 / 5.1, o 3.3 / 5.9, gate_up 5.2 /
//     6.3, down 4.4 / 6.9 (16 rows: 4.6 / 5.1, 4.1 / 5.9, 6.1 / 6.5, 5.6 / 8.5; at 32 rows
//     cuBLASLt wins): cuBLASLt's few microseconds of fixed cost dominate small weights.
// It also starts early (programmatic dependent launch): its first weight stages stream while
// the kernel before it ends, which cuBLASLt's kernels do not allow.
//
// A block takes 16 outputs (weight rows) and all of `in`; its warps take turns along k, 32
// at a time, so that together they read 512 neighbouring bytes of each row (each warp a span
// of its own ran 20-40% slower on 8B's gate_up and down). A warp's mma.m16n8k16 takes 16
// weight rows × 16 k as A and 8 rows of x as B. A dot product sums over k in any order, so
// each lane's k are the 8 consecutive elements it loads with one 16-byte load (lanes
// 4g..4g+3: 32 consecutive k of row g), fed to the fragment's k slots the same way for W
// and for x: no shuffle. The weights go through a ring of cp.async stages in shared memory,
// each lane's slots its own; the warps' partial sums meet in shared memory at the end.
#include "gemv_mma.cuh"

#include <algorithm>

#include "cp_async.cuh"
#include "mma.cuh"

namespace mstar::gpu {
namespace {

constexpr int kWarps = 8;
constexpr int kMinRows = 2, kMaxRows = 4;
// Weights under this many bytes take up to kMaxRowsSmall rows (where cuBLASLt's fixed cost
// is most of its time).
constexpr int64_t kSmallWeightBytes = int64_t(32) << 20;
constexpr int kMaxRowsSmall = 16;
// 32-k steps each lane has in flight. cp.async needs no register per load in flight (a
// register batch got 32 registers from ptxas whatever its size, so not all of its loads were
// in flight). A lane reads back only what it copied itself, so no barrier guards the ring.
constexpr int kStages = 8;
constexpr size_t kRingBytes = size_t(kStages) * kWarps * 2 * 32 * sizeof(uint4);  // 64 KB

// NG: groups of 8 rows of x (n <= 8 NG).
template <int NG>
__global__ __launch_bounds__(kWarps * 32) void gemvMmaKernel(bf16* out, const bf16* x, const bf16* w, int64_t ldw,
                                                             const void* bias, DType biasType, int n, int64_t in,
                                                             int64_t outF, bool accumulate, unsigned prefetchBlocks) {
  extern __shared__ uint4 ring[];  // [kStages][kWarps][2][32]
  __shared__ float partial[kWarps][NG * 4][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  // The warp's k: `steps` runs of 32 elements, `stride` apart, from 32 · warp.
  const int64_t o0 = int64_t(blockIdx.x) * 16, steps = in / (32 * kWarps), stride = 32 * kWarps;
  // Rows past outF read the last row (valid memory); their outputs are not stored.
  auto row = [&](int r) { return w + min(o0 + r, outF - 1) * ldw + 32 * warp; };
  // While the kernel before runs: the block's rows towards L2 (weights: no op of a step
  // writes them), in the first prefetchBlocks blocks; the even warps' runs start lines.
  if (blockIdx.x < prefetchBlocks && warp % 2 == 0)
    for (int64_t i = lane; i < 16 * steps; i += 32) prefetchL2(row(int(i % 16)) + (i / 16) * stride);
  const bf16* w0 = row(g) + 8 * q;
  const bf16* w8 = row(g + 8) + 8 * q;
  auto slot = [&](int64_t step, int h) { return ring + ((step % kStages) * kWarps + warp) * 64 + h * 32 + lane; };
  // Step j's two weight loads into its slots, as one copy group (an empty group past the last
  // step, so that there is one group a step and awaitCopies counts steps).
  auto issue = [&](int64_t j) {
    if (j < steps) {
      copy16(slot(j, 0), w0 + j * stride);
      copy16(slot(j, 1), w8 + j * stride);
    }
    commitCopies();
  };
  // The first stages stream while the kernel before ends (no op of a step writes weights).
  for (int j = 0; j < kStages - 1; ++j) issue(j);
  awaitPrior();
  const bf16* xr[NG];
#pragma unroll
  for (int gi = 0; gi < NG; ++gi) xr[gi] = 8 * gi + g < n ? x + (8 * gi + g) * in + 32 * warp + 8 * q : nullptr;
  float acc[NG][4] = {};
  for (int64_t j = 0; j < steps; ++j) {
    issue(j + kStages - 1);        // into the slots step j - 1 came from (this lane read them already)
    awaitCopies<kStages - 1>();    // step j's group has landed
    const uint4 a0 = *slot(j, 0), a8 = *slot(j, 1);
#pragma unroll
    for (int gi = 0; gi < NG; ++gi) {
      const uint4 b = xr[gi] ? *reinterpret_cast<const uint4*>(xr[gi] + j * stride) : make_uint4(0, 0, 0, 0);
      // k slots 2q, 2q+1 | 2q+8, 2q+9 take elements 0, 1 | 2, 3 of the lane's 8, then 4, 5 | 6, 7.
      mma(acc[gi], {a0.x, a8.x, a0.y, a8.y}, b.x, b.y);
      mma(acc[gi], {a0.z, a8.z, a0.w, a8.w}, b.z, b.w);
    }
  }
  awaitCopies<0>();  // the empty tail groups: nothing in flight at the exit
#pragma unroll
  for (int gi = 0; gi < NG; ++gi)
#pragma unroll
    for (int j = 0; j < 4; ++j) partial[warp][gi * 4 + j][lane] = acc[gi][j];
  __syncthreads();
  // Each output's partial sums in warp order. D's element j of lane l is row 2 (l % 4) +
  // (j & 1) of its group of x, output l / 4 + 8 (j >> 1) of the block's 16.
  for (int v = threadIdx.x; v < NG * 4 * 32; v += kWarps * 32) {
    const int l = v % 32, jj = v / 32, j = jj % 4, gi = jj / 4;
    const int r = 8 * gi + 2 * (l % 4) + (j & 1);
    const int64_t o = o0 + l / 4 + 8 * (j >> 1);
    if (r >= n || o >= outF) continue;
    float s = 0;
#pragma unroll
    for (int p = 0; p < kWarps; ++p) s += partial[p][jj][l];
    const bf16 y = fromF<bf16>(s + (bias ? loadAny(bias, biasType, o) : 0.0f));
    bf16* dst = out + r * outF + o;
    *dst = accumulate ? fromF<bf16>(toF(*dst) + toF(y)) : y;
  }
}

template <int NG>
void launchGemvMma(bf16* out, const bf16* x, const bf16* w, int64_t ldw, const Weights* bias, int n, int64_t in,
                   int64_t outF, bool accumulate) {
  static const bool sized = [] {  // the ring is over the 48 KB a launch gets without asking
    check(cudaFuncSetAttribute(gemvMmaKernel<NG>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kRingBytes)),
          "cudaFuncSetAttribute (tensor-core GEMV)");
    return true;
  }();
  (void)sized;
  const unsigned grid = blocksFor(outF, 16);
  const unsigned prefetch = unsigned(std::min<int64_t>(grid, kPrefetchBytes / (16 * in * int64_t(sizeof(bf16)))));
  launch("linear tensor-core GEMV kernel", gemvMmaKernel<NG>, grid, kWarps * 32, kRingBytes, out, x, w, ldw,
      bias ? bias->data : nullptr, bias ? bias->dtype : DType::F32, n, in, outF, accumulate, prefetch);
}

}  // namespace

bool gemvMma(DType act, void* out, const void* x, Weights w, const Weights* bias, int64_t n, int64_t in, int64_t outF,
             bool accumulate) {
  const int64_t ldw = w.ld ? w.ld : in;
  const int maxRows = in * outF * int64_t(sizeof(bf16)) < kSmallWeightBytes ? kMaxRowsSmall : kMaxRows;
  if (act != DType::BF16 || w.dtype != DType::BF16 || n < kMinRows || n > maxRows || in % (kWarps * 32) != 0 ||
      !runsOf8(x, in, sizeof(bf16)) || !runsOf8(w.data, ldw, sizeof(bf16)))
    return false;
  auto* o = static_cast<bf16*>(out);
  auto* xp = static_cast<const bf16*>(x);
  auto* wp = static_cast<const bf16*>(w.data);
  if (n <= 8) launchGemvMma<1>(o, xp, wp, ldw, bias, int(n), in, outF, accumulate);
  else launchGemvMma<2>(o, xp, wp, ldw, bias, int(n), in, outF, accumulate);
  return true;
}

}  // namespace mstar::gpu
