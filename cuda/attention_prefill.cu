// Prefill attention on tensor cores: bf16 activations and cache, head dims 64 and 128.
// pagedAttention (attention.cu) sends a step here when its sequences bring 16 or more query
// tokens on average; decode steps stay on its streaming kernel, which is bound by reading
// the cache rather than by arithmetic.
//
// A block takes 64 consecutive query tokens of one sequence and one q head; each of its 4
// warps owns 16 of those rows. Keys come in tiles of 64 from the paged cache into shared
// memory (cp.async, zero-filled past the keys the tile may see, so unwritten cache rows,
// which may hold NaN, never reach a product), two buffers: the next tile loads while a
// warp works on this one. Per tile a warp computes S = Q·Kᵀ with
// mma.m16n8k16 (bf16 in, f32 out), updates the running row max and sum (online softmax),
// and adds P·V to its f32 output, P rounded to bf16.
// Causality: the query at position p sees keys 0..p; the tiles after the block's last
// query are never loaded.
// On a device that runs this library's sm_90a code, prefillAttention hands the step to the
// wgmma kernel of attention_prefill_sm90.cu instead (the same arithmetic, tiles of 128 keys).
#include "attention_prefill.cuh"
#include "attention_prefill_tile.cuh"
#include "cp_async.cuh"
#include "mma.cuh"

namespace mstar::gpu {
namespace {

using namespace prefill;
constexpr int64_t kMinMeanQuery = 16;  // query tokens per sequence, on average, for these kernels

template <int HD>
struct Tiles {
  static constexpr int kStride = HD + 8;  // smem row pitch (elements): 16-byte rows, no bank conflicts
  bf16 k[2][kKeys * kStride];             // two tiles: the next loads while this one is used
  bf16 v[2][kKeys * kStride];
  int32_t rows[2][kKeys];                 // each tile's cacheRowOf
};

// Two blocks an SM (226 registers a thread for HD 128, no spills; bounded to three, 168
// registers spilled, and 16/8 heads measured 8% slower).
template <int HD>
__global__ __launch_bounds__(kThreads, 2) void prefillKernel(PrefillArgs p) {
  awaitPrior();
  constexpr int kStride = Tiles<HD>::kStride;
  constexpr int kSteps = HD / 16;  // k-steps of Q·Kᵀ
  extern __shared__ uint4 smem[];  // 16-byte aligned
  Tiles<HD>& tiles = *reinterpret_cast<Tiles<HD>*>(smem);
  int seq;
  int64_t q0;
  if (!tileOf(p, kRows, seq, q0)) return;
  const int h = blockIdx.x, kvh = h / (p.numHeads / p.numKvHeads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, quad = lane / 4, pair = (lane % 4) * 2;
  const int64_t qEnd = p.queryStarts[seq + 1];
  const int64_t ctx = p.contextLens[seq];
  // Query token t sits at position ctx - (qEnd - t): the fresh tokens are the context's last.
  // Positions and keys fit 32 bits (the host refuses tables past 2^31 tokens).
  const int firstPos = int(ctx - (qEnd - q0));
  const int rows = int(min(int64_t(kRows), qEnd - q0));
  const int keyEnd = int(min(int64_t(firstPos) + rows, p.maxBlocks * p.blockSize));  // keys any row sees
  const int numTiles = (keyEnd + kKeys - 1) / kKeys;

  // This lane's rows of the warp's 16: r0 and r0 + 8 (as the mma fragments hold them).
  const int r0 = warp * 16 + quad;
  const int pos0 = firstPos + r0, pos1 = pos0 + 8;
  const bool live0 = r0 < rows, live1 = r0 + 8 < rows;

  uint32_t qa[kSteps][4];
  loadQ<HD>(p, q0 + r0, h, pair, live0, live1, qa);

  float o[HD / 8][4] = {};
  // Running row maxima of the raw scores (q·k), and sums of the weights.
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0, l1 = 0;
  const int32_t* table = p.tables + int64_t(seq) * p.maxBlocks;
  const int64_t kvWidth = int64_t(p.numKvHeads) * HD;

  // A thread loads the same 16-byte column of rows row0, row0 + kRowStep, ... of each tile
  // (cp.async, zero-filled where the tile has no key: unwritten cache rows may hold NaN).
  constexpr int kLanesPerRow = HD / 8, kRowStep = kThreads / kLanesPerRow;
  const int row0 = threadIdx.x / kLanesPerRow, col = (threadIdx.x % kLanesPerRow) * 8;
  const bf16* kHead = p.k + int64_t(kvh) * HD + col;
  const bf16* vHead = p.v + int64_t(kvh) * HD + col;
  auto load = [&](int buf) {
#pragma unroll
    for (int row = row0; row < kKeys; row += kRowStep) {
      const int32_t at = tiles.rows[buf][row];
      const int64_t off = int64_t(at < 0 ? 0 : at) * kvWidth;
      copy16(tiles.k[buf] + row * kStride + col, kHead + off, at >= 0);
      copy16(tiles.v[buf] + row * kStride + col, vHead + off, at >= 0);
    }
    commitCopies();
  };
  if (threadIdx.x < kKeys) tiles.rows[0][threadIdx.x] = cacheRowOf(p, table, threadIdx.x, keyEnd);
  __syncthreads();
  if (numTiles > 0) load(0);  // none: no copy left in flight at the exit

  for (int tile = 0; tile < numTiles; ++tile) {
    const int buf = tile & 1;
    const int n0 = tile * kKeys;
    // The next tile's cache rows, then (once every thread's copies of this tile have
    // landed) its loads, which run while this tile is used. The barrier also orders the
    // loads into the other buffer after every warp's use of it, a tile ago.
    const bool more = tile + 1 < numTiles;
    if (more && threadIdx.x < kKeys)
      tiles.rows[buf ^ 1][threadIdx.x] = cacheRowOf(p, table, n0 + kKeys + threadIdx.x, keyEnd);
    awaitCopies<0>();
    __syncthreads();
    if (more) load(buf ^ 1);
    const bf16* sK = tiles.k[buf];
    const bf16* sV = tiles.v[buf];

    // S = Q·Kᵀ for this warp's 16 rows and the tile's keys: 8-key column tiles, K's B
    // fragments two k-steps to an ldmatrix (lanes 8j..8j+7 address matrix j's rows: key
    // nt * 8 + lane % 8, dims st * 16 + 8j).
    float s[kKeys / 8][4] = {};
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
      const bf16* kr = sK + (nt * 8 + lane % 8) * kStride + (lane / 8) * 8;
#pragma unroll
      for (int st = 0; st < kSteps; st += 2) {
        uint32_t b[4];
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                     : "r"(unsigned(__cvta_generic_to_shared(kr + st * 16))));
        mma(s[nt], qa[st], b[0], b[1]);
        mma(s[nt], qa[st + 1], b[2], b[3]);
      }
    }
    float t0 = m0, t1 = m1;
    maskedRowMax(s, n0, firstPos, keyEnd, pair, pos0, pos1, live0, live1, t0, t1);
    // Weights are 2^(s · scale log2 e - base), base the row's max in those units; a row
    // that has seen no key yet keeps max -inf and base 0 (its weights are 0). What the
    // row holds is rescaled only when its max grew (after a few tiles, mostly not).
    const float base0 = t0 == -INFINITY ? 0 : t0 * p.scaleLog2, base1 = t1 == -INFINITY ? 0 : t1 * p.scaleLog2;
    if (t0 > m0 || t1 > m1) {
      const float keep0 = exp2Approx(fmaf(m0, p.scaleLog2, -base0)), keep1 = exp2Approx(fmaf(m1, p.scaleLog2, -base1));
      l0 *= keep0;
      l1 *= keep1;
      scaleRows<HD>(o, keep0, keep1);
    }
    m0 = t0;
    m1 = t1;
    // O += P·V, 16 keys (a k-step) at a time: P's A fragments (two 8-key tiles) rounded to
    // bf16, as FlashAttention does. (P in two bf16 parts, hi + lo, kept it to ~16 bits for
    // twice P·V's MMAs; the demo model's greedy tokens against f32 did not move without it,
    // 1527 of 1536 positions either way.) V's B fragments by ldmatrix.trans, two 8-dim
    // column tiles a load.
#pragma unroll
    for (int st = 0; st < kKeys / 16; ++st) {
      uint32_t pa[4];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float(&x)[4] = s[st * 2 + half];
        const float e0 = exp2Approx(fmaf(x[0], p.scaleLog2, -base0)), e1 = exp2Approx(fmaf(x[1], p.scaleLog2, -base0));
        const float e2 = exp2Approx(fmaf(x[2], p.scaleLog2, -base1)), e3 = exp2Approx(fmaf(x[3], p.scaleLog2, -base1));
        l0 += e0 + e1;
        l1 += e2 + e3;
        pa[half * 2] = pack(e0, e1);
        pa[half * 2 + 1] = pack(e2, e3);
      }
#pragma unroll
      for (int dt = 0; dt < HD / 8; dt += 2) {
        const int mat = lane / 8, r = lane % 8;
        const bf16* src = sV + (st * 16 + (mat % 2) * 8 + r) * kStride + (dt + mat / 2) * 8;
        uint32_t b[4];
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                     : "r"(unsigned(__cvta_generic_to_shared(src))));
        mma(o[dt], pa, b[0], b[1]);
        mma(o[dt + 1], pa, b[2], b[3]);
      }
    }
  }

  storeRows<HD>(p, o, l0, l1, q0 + r0, h, pair, live0, live1);
}

// Launches prefillKernel<HD>, its shared memory past the 48 KB a launch gets unasked
// allowed once.
template <int HD>
void launchPrefill(dim3 grid, const PrefillArgs& a) {
  static const bool allowed = [] {
    check(cudaFuncSetAttribute(prefillKernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, sizeof(Tiles<HD>)),
          "pagedAttention prefill kernel: shared memory");
    return true;
  }();
  (void)allowed;
  launch("pagedAttention prefill kernel", prefillKernel<HD>, grid, kThreads, sizeof(Tiles<HD>), a);
}

}  // namespace

bool prefillOnTensorCores(DType act, DType cache, int headDim, int64_t numTokens, int64_t numSeqs, const void* out,
                          const void* qkv, const void* k, const void* v) {
  const bool aligned = (reinterpret_cast<uintptr_t>(out) | reinterpret_cast<uintptr_t>(qkv) |
                        reinterpret_cast<uintptr_t>(k) | reinterpret_cast<uintptr_t>(v)) % 16 == 0;
  // A block computes 64 query rows whatever the sequence brings: with fewer than 16 tokens
  // a sequence on average (short prompts, decode rows beside a chunk), most rows would be
  // padding, and the streaming kernel does the little work there is.
  // (The grid's rows, a tile each, stop at 65535: some 4M tokens, far past any step.)
  return act == DType::BF16 && cache == DType::BF16 && (headDim == 64 || headDim == 128) &&
         numTokens >= kMinMeanQuery * numSeqs && (numTokens + kRows - 1) / kRows + numSeqs <= 65535 && aligned;
}

int blockShift(int64_t blockSize) {
  for (int s = 0; s < 31; ++s)
    if (int64_t(1) << s == blockSize) return s;
  return -1;
}

void prefillAttention(void* out, const void* qkv, KvCache c, const int32_t* blockTables, int64_t maxBlocks,
                      const int32_t* queryStarts, const int32_t* contextLens, int64_t numSeqs, int64_t numTokens,
                      HeadLayout l, float scale) {
  PrefillArgs a{static_cast<bf16*>(out), static_cast<const bf16*>(qkv), static_cast<const bf16*>(c.k),
                static_cast<const bf16*>(c.v), blockTables, queryStarts, contextLens, int(numSeqs), maxBlocks,
                c.numBlocks, int(c.blockSize), blockShift(c.blockSize), l.numHeads, l.numKvHeads, l.stride(),
                scale * kLog2e};
  if (onWgmma(l.headDim, numTokens, a)) return;
  // A row of the grid is a tile of every head (blocks sharing a KV head side by side), and
  // there are enough rows for any split of the tokens over the sequences; the extra exit.
  const dim3 grid{unsigned(l.numHeads), gridRows(numTokens, numSeqs, kRows)};
  if (l.headDim == 64) launchPrefill<64>(grid, a);
  else launchPrefill<128>(grid, a);
}

}  // namespace mstar::gpu
