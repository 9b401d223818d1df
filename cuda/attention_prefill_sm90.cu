// Prefill attention on Hopper's warpgroup MMA (wgmma, sm_90a): the same contract, tiles and
// arithmetic as prefillKernel (attention_prefill.cu), whose mma.sync reached ~190 TFLOP/s
// on an H200. A block is one warpgroup: 64 query tokens of one sequence and one q head, 16
// rows a warp. Per tile of 64 keys: S = Q·Kᵀ as 8 (head dim 128) or 4 MMAs of 64 x 64 x 16, Q
// from registers and K from shared memory; the online softmax in registers as before; then
// O += P·V as 2 MMAs of 64 x head dim x 16 per 16 keys (P's two bf16 parts), V from shared
// memory read N-major. K and V tiles come from the paged cache by cp.async into the 128-byte
// swizzle the MMAs read (wgmma.cuh), two buffers: the next tile loads while this one is used.
#include "attention_prefill_tile.cuh"
#include "cp_async.cuh"
#include "wgmma.cuh"

namespace mstar::gpu {
namespace {

using namespace prefill;

constexpr int kRegion = kKeys * 128;  // bytes of one 64-dim block of a tile: 64 keys of 128 bytes

template <int HD>
struct SwizzledTiles {
  static constexpr int kBytes = HD / 64 * kRegion;  // one tile of K or of V
  // Where (key r, 16-byte chunk c of its head) sits in a tile: 64-dim blocks one after the
  // other, each row of one swizzled by the row's place in its 8-row atom.
  __device__ static int at(int r, int c) { return (c >> 3) * kRegion + r * 128 + (((c & 7) ^ (r & 7)) << 4); }
  uint8_t k[2][kBytes];                              // two tiles: the next loads while this one is used
  uint8_t v[2][kBytes];
  int32_t rows[2][kKeys];                            // each tile's cacheRowOf
};

// Shared memory a block asks for: the tiles, and room to start them at a 1024-byte boundary
// (the swizzle's atoms must).
template <int HD>
constexpr size_t sharedBytes() {
  return sizeof(SwizzledTiles<HD>) + 1024;
}

// O (64 x HD) += P (64 x 16, registers) · V (16 keys x HD, N-major).
template <int HD>
__device__ __forceinline__ void addPV(float (&o)[HD / 8][4], const uint32_t (&p)[4], uint64_t v) {
  if constexpr (HD == 128) wgmma64x128<1>(reinterpret_cast<float(&)[64]>(o), p, v, true);
  else wgmma64x64<1>(reinterpret_cast<float(&)[32]>(o), p, v, true);
}

// Two blocks an SM (the tiles take 66 KB of shared memory for head dim 128).
template <int HD>
__global__ __launch_bounds__(kThreads, 2) void prefillSm90Kernel(PrefillArgs p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  awaitPrior();
  constexpr int kSteps = HD / 16;  // k-steps of Q·Kᵀ
  extern __shared__ uint8_t smemRaw[];
  SwizzledTiles<HD>& tiles = *reinterpret_cast<SwizzledTiles<HD>*>(
      smemRaw + ((1024 - unsigned(__cvta_generic_to_shared(smemRaw)) % 1024) % 1024));
  int seq;
  int64_t q0;
  if (!tileOf(p, seq, q0)) return;
  const int h = blockIdx.x, kvh = h / (p.numHeads / p.numKvHeads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, quad = lane / 4, pair = (lane % 4) * 2;
  const int64_t qEnd = p.queryStarts[seq + 1];
  const int64_t ctx = p.contextLens[seq];
  // Query token t sits at position ctx - (qEnd - t): the fresh tokens are the context's last.
  const int firstPos = int(ctx - (qEnd - q0));
  const int rows = int(min(int64_t(kRows), qEnd - q0));
  const int keyEnd = int(min(int64_t(firstPos) + rows, p.maxBlocks * p.blockSize));  // keys any row sees
  const int numTiles = (keyEnd + kKeys - 1) / kKeys;

  // This lane's rows of the warpgroup's 64: r0 and r0 + 8 (as the fragments hold them).
  const int r0 = warp * 16 + quad;
  const int pos0 = firstPos + r0, pos1 = pos0 + 8;
  const bool live0 = r0 < rows, live1 = r0 + 8 < rows;

  // Q as A fragments, straight from the qkv rows (rows past the tile's tokens are zeros).
  uint32_t qa[kSteps][4];
  {
    const bf16* q = p.qkv + (q0 + r0) * p.rowWidth + int64_t(h) * HD + pair;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const bf16* c = q + s * 16;
      qa[s][0] = live0 ? *reinterpret_cast<const uint32_t*>(c) : 0;
      qa[s][1] = live1 ? *reinterpret_cast<const uint32_t*>(c + 8 * p.rowWidth) : 0;
      qa[s][2] = live0 ? *reinterpret_cast<const uint32_t*>(c + 8) : 0;
      qa[s][3] = live1 ? *reinterpret_cast<const uint32_t*>(c + 8 * p.rowWidth + 8) : 0;
    }
  }

  float o[HD / 8][4] = {};
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0, l1 = 0;
  const int32_t* table = p.tables + int64_t(seq) * p.maxBlocks;
  const int64_t kvWidth = int64_t(p.numKvHeads) * HD;

  // A thread loads the same 16-byte chunk of rows row0, row0 + kRowStep, ... of each tile.
  constexpr int kLanesPerRow = HD / 8, kRowStep = kThreads / kLanesPerRow;
  const int row0 = threadIdx.x / kLanesPerRow, chunk = threadIdx.x % kLanesPerRow;
  const bf16* kHead = p.k + int64_t(kvh) * HD + chunk * 8;
  const bf16* vHead = p.v + int64_t(kvh) * HD + chunk * 8;
  auto load = [&](int buf) {
#pragma unroll
    for (int row = row0; row < kKeys; row += kRowStep) {
      const int32_t at = tiles.rows[buf][row];
      const int64_t off = int64_t(at < 0 ? 0 : at) * kvWidth;
      copy16(tiles.k[buf] + SwizzledTiles<HD>::at(row, chunk), kHead + off, at >= 0);
      copy16(tiles.v[buf] + SwizzledTiles<HD>::at(row, chunk), vHead + off, at >= 0);
    }
    commitCopies();
  };
  if (threadIdx.x < kKeys) tiles.rows[0][threadIdx.x] = cacheRowOf(p, table, threadIdx.x, keyEnd);
  __syncthreads();
  if (numTiles > 0) load(0);

  for (int tile = 0; tile < numTiles; ++tile) {
    const int buf = tile & 1;
    const int n0 = tile * kKeys;
    // As prefillKernel: the next tile's cache rows, then, once this tile has landed (and is
    // visible to the MMAs), its loads into the other buffer, whose MMAs all ended a tile ago.
    const bool more = tile + 1 < numTiles;
    if (more && threadIdx.x < kKeys)
      tiles.rows[buf ^ 1][threadIdx.x] = cacheRowOf(p, table, n0 + kKeys + threadIdx.x, keyEnd);
    awaitCopies<0>();
    proxyFence();
    __syncthreads();
    if (more) load(buf ^ 1);

    // S = Q·Kᵀ: K's tile is a K-major B (a key's dims contiguous), a k-step 32 bytes along
    // its rows, the second 64 dims a block further.
    float s[kKeys / 8][4];
    float(&sFlat)[32] = reinterpret_cast<float(&)[32]>(s);
    wgmmaFence();
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks)
      wgmma64x64<0>(sFlat, qa[ks], swizzledDesc(tiles.k[buf] + (ks / 4) * kRegion + (ks % 4) * 32, 16, 1024), ks > 0);
    wgmmaCommit();
    wgmmaWait<0>();
    holdRegisters(sFlat);

    if (n0 + kKeys - 1 > firstPos || n0 + kKeys > keyEnd) {
#pragma unroll
      for (int nt = 0; nt < kKeys / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n0 + nt * 8 + pair + (e & 1);
          if (!(e < 2 ? live0 : live1) || key > (e < 2 ? pos0 : pos1) || key >= keyEnd) s[nt][e] = -INFINITY;
        }
    }
    float t0 = m0, t1 = m1;
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
      t0 = fmaxf(t0, fmaxf(s[nt][0], s[nt][1]));
      t1 = fmaxf(t1, fmaxf(s[nt][2], s[nt][3]));
    }
    t0 = fmaxf(t0, __shfl_xor_sync(0xffffffffu, t0, 1));
    t0 = fmaxf(t0, __shfl_xor_sync(0xffffffffu, t0, 2));
    t1 = fmaxf(t1, __shfl_xor_sync(0xffffffffu, t1, 1));
    t1 = fmaxf(t1, __shfl_xor_sync(0xffffffffu, t1, 2));
    const float base0 = t0 == -INFINITY ? 0 : t0 * p.scaleLog2, base1 = t1 == -INFINITY ? 0 : t1 * p.scaleLog2;
    if (t0 > m0 || t1 > m1) {
      const float keep0 = exp2Approx(fmaf(m0, p.scaleLog2, -base0)), keep1 = exp2Approx(fmaf(m1, p.scaleLog2, -base1));
      l0 *= keep0;
      l1 *= keep1;
#pragma unroll
      for (int dt = 0; dt < HD / 8; ++dt) {
        o[dt][0] *= keep0;
        o[dt][1] *= keep0;
        o[dt][2] *= keep1;
        o[dt][3] *= keep1;
      }
    }
    m0 = t0;
    m1 = t1;
    // P's A fragments, 16 keys a k-step, in two bf16 parts (prefillKernel says why).
    uint32_t hi[kKeys / 16][4], lo[kKeys / 16][4];
#pragma unroll
    for (int st = 0; st < kKeys / 16; ++st)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float(&x)[4] = s[st * 2 + half];
        const float e0 = exp2Approx(fmaf(x[0], p.scaleLog2, -base0)), e1 = exp2Approx(fmaf(x[1], p.scaleLog2, -base0));
        const float e2 = exp2Approx(fmaf(x[2], p.scaleLog2, -base1)), e3 = exp2Approx(fmaf(x[3], p.scaleLog2, -base1));
        l0 += e0 + e1;
        l1 += e2 + e3;
        split(e0, e1, hi[st][half * 2], lo[st][half * 2]);
        split(e2, e3, hi[st][half * 2 + 1], lo[st][half * 2 + 1]);
      }

    // O += P·V: V's tile is an N-major B (a key's dims contiguous), a k-step 16 keys down.
    holdRegisters(reinterpret_cast<float(&)[HD / 2]>(o));
    holdRegisters(reinterpret_cast<uint32_t(&)[kKeys / 4]>(hi));
    holdRegisters(reinterpret_cast<uint32_t(&)[kKeys / 4]>(lo));
    wgmmaFence();
#pragma unroll
    for (int st = 0; st < kKeys / 16; ++st) {
      const uint64_t v = swizzledDesc(tiles.v[buf] + st * 16 * 128, kRegion, 1024);
      addPV<HD>(o, hi[st], v);
      addPV<HD>(o, lo[st], v);
    }
    wgmmaCommit();
    wgmmaWait<0>();
    holdRegisters(reinterpret_cast<float(&)[HD / 2]>(o));
  }

  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  auto div = [](float x, float l) { return l > 0 ? x / l : 0.0f; };
  const int64_t outWidth = int64_t(p.numHeads) * HD;
  bf16* out = p.out + (q0 + r0) * outWidth + int64_t(h) * HD + pair;
#pragma unroll
  for (int dt = 0; dt < HD / 8; ++dt) {
    if (live0) *reinterpret_cast<uint32_t*>(out + dt * 8) = pack(div(o[dt][0], l0), div(o[dt][1], l0));
    if (live1) *reinterpret_cast<uint32_t*>(out + 8 * outWidth + dt * 8) = pack(div(o[dt][2], l1), div(o[dt][3], l1));
  }
#endif
}

template <int HD>
void launchSm90(dim3 grid, const PrefillArgs& a) {
  static const bool allowed = [] {
    check(cudaFuncSetAttribute(prefillSm90Kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sharedBytes<HD>())),
          "pagedAttention sm_90a prefill kernel: shared memory");
    return true;
  }();
  (void)allowed;
  launch("pagedAttention sm_90a prefill kernel", prefillSm90Kernel<HD>, grid, kThreads, sharedBytes<HD>(), a);
}

}  // namespace

bool prefill::onWgmma(int headDim, dim3 grid, const PrefillArgs& a) {
  if (!wgmmaKernels()) return false;
  if (headDim == 64) launchSm90<64>(grid, a);
  else launchSm90<128>(grid, a);
  return true;
}

}  // namespace mstar::gpu
