// Prefill attention on Hopper's warpgroup MMA (wgmma, sm_90a): the same contract and
// arithmetic as prefillKernel (attention_prefill.cu), whose mma.sync reached ~200 TFLOP/s on
// an H200 (4096 tokens, 32/8 heads; this kernel ~405).
//
// A block is two consumer warpgroups, 128 query tokens of one sequence and one q head: 64 a
// warpgroup, 16 a warp; and a producer warpgroup, which loads the tiles of 128 keys both
// consumers read. Per tile, a consumer warpgroup computes S = Q·Kᵀ as 8 (head dim 128) or 4
// MMAs of 64 x 128 x 16, Q from registers and K from shared memory; the online softmax in
// registers as before; then O += P·V as an MMA of 64 x head dim x 16 per 16 keys, P rounded
// once to bf16 (as FlashAttention does; see below), V from shared memory read N-major. The
// next tile's Q·Kᵀ starts with this tile's P·V, so that its softmax runs while P·V does.
// The producer copies K and V from the paged cache by cp.async into the 128-byte swizzle the
// MMAs read (wgmma.cuh), kStages tiles ahead at most; shared-memory barriers say when a tile
// has landed (the hardware arrives for each producer thread once its copies have) and when
// every consumer warp is done with a buffer, so that the consumers issue no copies and never
// wait at a block barrier.
//
// Measured against simpler versions (H200, 4096 tokens, 32/8 heads): one warpgroup a block,
// two blocks an SM, waiting for each MMA group: ~253 TFLOP/s; two warpgroups a block: ~253;
// with the softmax overlapped: ~260, and ~243 with one warpgroup a block; every thread
// copying, a block barrier a tile: ~269; loads by TMA (16 boxes of one cache block a tile),
// ~233: the MMAs waited for their tile in half the tiles. The producer warpgroup: ~330 (3
// buffers ~319; 5 or 6 buffers, or the consumer warpgroups taking turns at their MMAs as
// FlashAttention 3's ping-pong, no faster). Nsight Compute: the tensor pipe busy 53% of the
// time; the consumers' largest stall is their own instructions' latency.
// P rounded once to bf16 rather than in two bf16 parts (hi and the rest, which made P·V twice
// the MMAs and a third of the loop's instructions): 328 -> 381 TFLOP/s; then tiles of 128
// keys rather than 64 (half the barrier waits, row maxima and O rescales a key; 3 buffers):
// ~405. The demo model's greedy tokens against f32 did not move (1527 of 1536 positions
// either way, demo_bf16.test.ts); an output element is no longer the f32 result rounded
// (two thirds are), but within a bf16 rounding of each weight (attention.test.ts bounds it).
// Keeping P and V in f16 (V converted by the producer) cost more than it saved: ~290.
#include "attention_prefill_tile.cuh"
#include "cp_async.cuh"
#include "mbarrier.cuh"
#include "wgmma.cuh"

namespace mstar::gpu {
namespace {

using namespace prefill;

constexpr int kTileKeys = 128;           // keys a tile (prefillKernel's tiles are kKeys)
constexpr int kRegion = kTileKeys * 128;  // bytes of one 64-dim block of a tile: a key's 128 bytes
constexpr int kGroups = 2;                // consumer warpgroups a block, each kRows query tokens
constexpr int kConsumers = kGroups * kThreads;
constexpr int kBlockThreads = kConsumers + kThreads;  // and the producer warpgroup

constexpr int kStages = 3;  // tile buffers: the producer runs up to 2 tiles ahead of the MMAs

template <int HD>
struct SwizzledTiles {
  static constexpr int kBytes = HD / 64 * kRegion;  // one tile of K or of V
  // Where (key r, 16-byte chunk c of its head) sits in a tile: 64-dim blocks one after the
  // other, each row of one swizzled by the row's place in its 8-row atom.
  __device__ static int at(int r, int c) { return (c >> 3) * kRegion + r * 128 + (((c & 7) ^ (r & 7)) << 4); }
  uint8_t k[kStages][kBytes];
  uint8_t v[kStages][kBytes];
  uint64_t landed[kStages];  // a phase a tile: each producer thread's copies of it have landed
  uint64_t freed[kStages];   // a phase a tile: each consumer warp's MMAs on it are done
  int32_t rows[2][kTileKeys];  // the cache rows of the tile the producer loads (cacheRowOf)
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

// The producer warpgroup: tiles 0..numTiles-1 of the block's keys into the buffers in turn,
// each once the consumers have freed its buffer. Threads share a key's row HD / 8 at a time,
// so that a copy instruction reads whole rows of the cache.
template <int HD>
__device__ void produce(const PrefillArgs& p, SwizzledTiles<HD>& tiles, const int32_t* table, int kvh, int loadEnd,
                        int numTiles) {
  constexpr int kLanesPerRow = HD / 8, kRowStep = kThreads / kLanesPerRow;
  const int t = threadIdx.x % kThreads, row0 = t / kLanesPerRow, chunk = t % kLanesPerRow;
  const int64_t kvWidth = int64_t(p.numKvHeads) * HD;
  const bf16* kHead = p.k + int64_t(kvh) * HD + chunk * 8;
  const bf16* vHead = p.v + int64_t(kvh) * HD + chunk * 8;
  for (int tile = 0; tile < numTiles; ++tile) {
    const int buf = tile % kStages;
    // The tile's cache rows, in one of two arrays: the barrier after the last tile's ensured
    // every thread was done reading this one.
    int32_t* rows = tiles.rows[tile % 2];
    if (t < kTileKeys) rows[t] = cacheRowOf(p, table, tile * kTileKeys + t, loadEnd);
    asm volatile("bar.sync 1, %0;\n" ::"n"(kThreads) : "memory");  // (barrier 0 is __syncthreads')
    if (tile >= kStages) barrierWait(&tiles.freed[buf], (tile / kStages - 1) & 1);
#pragma unroll
    for (int row = row0; row < kTileKeys; row += kRowStep) {
      const int32_t at = rows[row];
      const int64_t off = int64_t(at < 0 ? 0 : at) * kvWidth;
      copy16(tiles.k[buf] + SwizzledTiles<HD>::at(row, chunk), kHead + off, at >= 0);
      copy16(tiles.v[buf] + SwizzledTiles<HD>::at(row, chunk), vHead + off, at >= 0);
    }
    copiesArrive(&tiles.landed[buf]);
  }
  commitCopies();
  awaitCopies<0>();  // (the copies' arrivals are the hardware's; nothing left in flight at exit)
}

// One block an SM.
template <int HD>
__global__ __launch_bounds__(kBlockThreads, 1) void prefillSm90Kernel(PrefillArgs p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  awaitPrior();
  constexpr int kSteps = HD / 16;  // k-steps of Q·Kᵀ
  extern __shared__ uint8_t smemRaw[];
  SwizzledTiles<HD>& tiles = *reinterpret_cast<SwizzledTiles<HD>*>(
      smemRaw + ((1024 - unsigned(__cvta_generic_to_shared(smemRaw)) % 1024) % 1024));
  int seq;
  int64_t q0;
  if (!tileOf(p, kGroups * kRows, seq, q0)) return;
  const int h = blockIdx.x, kvh = h / (p.numHeads / p.numKvHeads);
  const int64_t qEnd = p.queryStarts[seq + 1];
  const int64_t ctx = p.contextLens[seq];
  const int64_t maxKeys = p.maxBlocks * p.blockSize;
  // Query token t sits at position ctx - (qEnd - t): the fresh tokens are the context's last.
  // The block loads the keys its last row sees; a warpgroup computes on those its own rows see.
  const int blockPos = int(ctx - (qEnd - q0));
  const int blockRows = int(min(int64_t(kGroups * kRows), qEnd - q0));
  const int loadEnd = int(min(int64_t(blockPos) + blockRows, maxKeys));
  const int numTiles = (loadEnd + kTileKeys - 1) / kTileKeys;
  const int32_t* table = p.tables + int64_t(seq) * p.maxBlocks;

  if (threadIdx.x == 0) {
    for (int b = 0; b < kStages; ++b) {
      barrierInit(&tiles.landed[b], kThreads);
      barrierInit(&tiles.freed[b], kConsumers / 32);
    }
  }
  __syncthreads();
  // Registers a thread: 168 at launch (65536 over 384 threads: each quarter of the SM holds
  // 3 warps; a ninth warp alone would cap every thread at 168 too); then the producer gives
  // all but 40 to the consumers, 232 (Q·Kᵀ, P·V and the softmax take ~206 at head dim 128).
  if (threadIdx.x >= kConsumers) {
    lowerRegisters<40>();
    produce<HD>(p, tiles, table, kvh, loadEnd, numTiles);
    return;
  }
  raiseRegisters<232>();

  const int group = threadIdx.x / kThreads, warp = threadIdx.x % kThreads / 32;
  const int lane = threadIdx.x % 32, quad = lane / 4, pair = (lane % 4) * 2;
  const int firstPos = blockPos + group * kRows;
  const int rows = max(0, min(kRows, blockRows - group * kRows));
  const int keyEnd = int(min(int64_t(firstPos) + rows, maxKeys));  // keys this warpgroup's rows see
  q0 += group * kRows;

  // This lane's rows of the warpgroup's 64: r0 and r0 + 8 (as the fragments hold them).
  const int r0 = warp * 16 + quad;
  const int pos0 = firstPos + r0, pos1 = pos0 + 8;
  const bool live0 = r0 < rows, live1 = r0 + 8 < rows;

  uint32_t qa[kSteps][4];
  loadQ<HD>(p, q0 + r0, h, pair, live0, live1, qa);

  float o[HD / 8][4] = {};
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0, l1 = 0;
  // The tiles this warpgroup computes: those before its last row's keys (none without rows).
  const int ownTiles = rows > 0 ? (keyEnd + kTileKeys - 1) / kTileKeys : 0;

  // Tile `tile` has landed: visible to the MMAs (the copies wrote through the generic proxy).
  auto landed = [&](int tile) {
    barrierWait(&tiles.landed[tile % kStages], (tile / kStages) & 1);
    proxyFence();
  };
  // This warp's MMAs on tile `tile` are done: one arrival a warp.
  auto release = [&](int tile) {
    __syncwarp();
    if (lane == 0) barrierArrive(&tiles.freed[tile % kStages]);
  };

  // S = Q·Kᵀ for tile `tile` into s, issued: K's tile is a K-major B (a key's dims
  // contiguous), a k-step 32 bytes along its rows, the second 64 dims a block further.
  float s[kTileKeys / 8][4];
  float(&sFlat)[kTileKeys / 2] = reinterpret_cast<float(&)[kTileKeys / 2]>(s);
  // Every MMA's descriptor is buffer 0's plus a constant offset (descAt). Made from each
  // MMA's address, it cost a chain of dependent integer ops before each MMA: ~1% of the time.
  const uint64_t k0 = swizzledDesc(tiles.k[0], 16, 1024), v0 = swizzledDesc(tiles.v[0], kRegion, 1024);
  auto bufferDesc = [&](uint64_t first, int tile) {
    return first + uint64_t(tile % kStages) * (SwizzledTiles<HD>::kBytes >> 4);
  };
  auto issueS = [&](int tile) {
    const uint64_t k = bufferDesc(k0, tile);
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks)
      wgmma64x128<0>(sFlat, qa[ks], descAt(k, (ks / 4) * kRegion + (ks % 4) * 32), ks > 0);
    wgmmaCommit();
  };
  // The online softmax of tile `tile`'s scores, once they are in s: masked, the new row maxima,
  // the weights (2^(s · scale log2 e - base), base the row's max in those units; a row that has
  // seen no key keeps max -inf and base 0) in place of the scores, added to the row sums,
  // which are first rescaled as O must be before this tile's P·V (keep, where grew).
  float keep0 = 1, keep1 = 1;
  bool grew = false;
  auto softmax = [&](int tile) {
    float t0 = m0, t1 = m1;
    maskedRowMax(s, tile * kTileKeys, firstPos, keyEnd, pair, pos0, pos1, live0, live1, t0, t1);
    const float base0 = t0 == -INFINITY ? 0 : t0 * p.scaleLog2, base1 = t1 == -INFINITY ? 0 : t1 * p.scaleLog2;
    grew = t0 > m0 || t1 > m1;
    if (grew) {
      keep0 = exp2Approx(fmaf(m0, p.scaleLog2, -base0));
      keep1 = exp2Approx(fmaf(m1, p.scaleLog2, -base1));
      l0 *= keep0;
      l1 *= keep1;
    }
    m0 = t0;
    m1 = t1;
#pragma unroll
    for (int nt = 0; nt < kTileKeys / 8; ++nt) {
      s[nt][0] = exp2Approx(fmaf(s[nt][0], p.scaleLog2, -base0));
      s[nt][1] = exp2Approx(fmaf(s[nt][1], p.scaleLog2, -base0));
      s[nt][2] = exp2Approx(fmaf(s[nt][2], p.scaleLog2, -base1));
      s[nt][3] = exp2Approx(fmaf(s[nt][3], p.scaleLog2, -base1));
      l0 += s[nt][0] + s[nt][1];
      l1 += s[nt][2] + s[nt][3];
    }
  };

  // Every consumer warp waits for every tile and frees it, its warpgroup's or not, so that
  // each buffer's barriers take one phase a tile.
  // (MMAs under a branch that ptxas cannot prove uniform over the warpgroup are serialized:
  // the first and the last scores are computed whether used or not.)
  landed(0);
  wgmmaFence();
  issueS(0);
  wgmmaWait<0>();
  holdRegisters(sFlat);
  softmax(0);
  for (int tile = 0; tile < numTiles; ++tile) {
    if (tile + 1 < numTiles) landed(tile + 1);
    if (tile < ownTiles) {  // (the same for all the warpgroup's threads)
      // P's A fragments in bf16, 16 keys a k-step; O takes the tile's rescale; then tile + 1's
      // scores and this tile's P·V start.
      uint32_t pa[kTileKeys / 16][4];
#pragma unroll
      for (int st = 0; st < kTileKeys / 16; ++st)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const float(&x)[4] = s[st * 2 + half];
          pa[st][half * 2] = pack(x[0], x[1]);
          pa[st][half * 2 + 1] = pack(x[2], x[3]);
        }
      if (grew) scaleRows<HD>(o, keep0, keep1);
      holdRegisters(reinterpret_cast<float(&)[HD / 2]>(o));
      holdRegisters(reinterpret_cast<uint32_t(&)[kTileKeys / 4]>(pa));
      wgmmaFence();
      // Past the last tile this reads a buffer no longer written (or never loaded): s is then
      // never read again.
      issueS(tile + 1);
      // O += P·V: V's tile is an N-major B (a key's dims contiguous), a k-step 16 keys down.
      const uint64_t vTile = bufferDesc(v0, tile);
#pragma unroll
      for (int st = 0; st < kTileKeys / 16; ++st) addPV<HD>(o, pa[st], descAt(vTile, st * 16 * 128));
      wgmmaCommit();
      wgmmaWait<1>();  // the scores (committed first); P·V still runs
      holdRegisters(sFlat);
      if (tile + 1 < ownTiles) softmax(tile + 1);
      wgmmaWait<0>();
      holdRegisters(reinterpret_cast<float(&)[HD / 2]>(o));
    }
    release(tile);
  }

  storeRows<HD>(p, o, l0, l1, q0 + r0, h, pair, live0, live1);
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
  launch("pagedAttention sm_90a prefill kernel", prefillSm90Kernel<HD>, grid, kBlockThreads, sharedBytes<HD>(), a);
}

}  // namespace

bool prefill::onWgmma(int headDim, int64_t numTokens, const PrefillArgs& a) {
  if (!wgmmaKernels()) return false;
  // As prefillKernel's grid, in tiles of the block's rows.
  const dim3 grid{unsigned(a.numHeads), gridRows(numTokens, a.numSeqs, kGroups * kRows)};
  if (headDim == 64) launchSm90<64>(grid, a);
  else launchSm90<128>(grid, a);
  return true;
}

}  // namespace mstar::gpu
