// Prefill attention on tensor cores: bf16 activations and cache, head dims 64 and 128.
// pagedAttention (attention.cu) sends a step here when its sequences bring 16 or more query
// tokens on average; decode steps stay on its streaming kernel, which is bound by reading
// the cache rather than by arithmetic.
//
// A block takes 64 consecutive query tokens of one sequence and one q head; each of its 4
// warps owns 16 of those rows. Keys come in tiles of 64 from the paged cache into shared
// memory (cp.async, zero-filled past the keys the tile may see, so unwritten cache rows,
// which may hold NaN, never reach a product). Per tile a warp computes S = Q·Kᵀ with
// mma.m16n8k16 (bf16 in, f32 out), updates the running row max and sum (online softmax),
// and adds P·V to its f32 output, P split in two bf16 parts.
// Causality: the query at position p sees keys 0..p; the tiles after the block's last
// query are never loaded.
#include "attention_prefill.cuh"

namespace mstar::gpu {
namespace {

constexpr int kRows = 64;     // query tokens per block
constexpr int kKeys = 64;     // keys per tile
constexpr int kThreads = 128;  // 4 warps of 16 rows
constexpr int64_t kMinMeanQuery = 16;  // query tokens per sequence, on average, for this kernel

struct PrefillArgs {
  bf16* out;
  const bf16* qkv;
  const bf16* k;
  const bf16* v;
  const int32_t* tables;
  const int32_t* queryStarts;
  const int32_t* contextLens;
  int numSeqs;
  int64_t maxBlocks, numBlocks;
  int blockSize;
  int blockShift;  // log2(blockSize) where it is a power of two, else -1
  int numHeads, numKvHeads;
  int64_t rowWidth;
  float scaleLog2;  // the softmax scale times log2(e): exp2 of scaled scores is e^(scale · q·k)
};

__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// (x, y) as two bf16 pairs: hi rounded, lo the rest rounded (hi + lo within 2^-16 of x, y).
__device__ __forceinline__ void split(float x, float y, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = pack(x - __low2float(h), y - __high2float(h));
}

// d += a · b for one 16×8×16 tile (row-major A, column-major B, f32 accumulators).
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16 bytes from global to shared memory, or zeros when !valid.
__device__ __forceinline__ void copy16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0));
}

// The block's (sequence, first query token), or false past the last tile. The grid's rows
// (blockIdx.y) count the step's tiles sequence by sequence from the last: a sequence's
// later tiles see more keys, so the longest blocks start first and the short ones fill
// the last wave (in tile order, the last wave was a few long blocks running alone). The
// grid has enough rows for any split of the tokens into numSeqs sequences.
__device__ __forceinline__ bool tileOf(const PrefillArgs& p, int& seq, int64_t& q0) {
  int64_t b = int64_t(gridDim.y) - 1 - blockIdx.y;
  for (int s = 0; s < p.numSeqs; ++s) {
    const int64_t n = p.queryStarts[s + 1] - p.queryStarts[s], tiles = (n + kRows - 1) / kRows;
    if (b < tiles) {
      seq = s;
      q0 = p.queryStarts[s] + b * kRows;
      return true;
    }
    b -= tiles;
  }
  return false;
}

// Three blocks an SM (168 registers a thread; left to itself the compiler takes 177, and
// only two fit).
template <int HD>
__global__ __launch_bounds__(kThreads, 3) void prefillKernel(PrefillArgs p) {
  awaitPrior();
  constexpr int kStride = HD + 8;  // smem row pitch (elements): 16-byte rows, no bank conflicts
  constexpr int kSteps = HD / 16;  // k-steps of Q·Kᵀ
  __shared__ alignas(16) bf16 sK[kKeys * kStride];
  __shared__ alignas(16) bf16 sV[kKeys * kStride];
  int seq;
  int64_t q0;
  if (!tileOf(p, seq, q0)) return;
  const int h = blockIdx.x, kvh = h / (p.numHeads / p.numKvHeads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, quad = lane / 4, pair = (lane % 4) * 2;
  const int64_t qEnd = p.queryStarts[seq + 1];
  const int64_t ctx = p.contextLens[seq];
  // Query token t sits at position ctx - (qEnd - t): the fresh tokens are the context's last.
  const int64_t firstPos = ctx - (qEnd - q0);
  const int64_t rows = min(int64_t(kRows), qEnd - q0);
  const int64_t keyEnd = min(firstPos + rows, p.maxBlocks * p.blockSize);  // keys any row sees

  // This lane's rows of the warp's 16: r0 and r0 + 8 (as the mma fragments hold them).
  const int r0 = warp * 16 + quad;
  const int64_t pos0 = firstPos + r0, pos1 = pos0 + 8;
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

  // A thread loads the same 16-byte column of rows row0, row0 + kRowStep, ... of each tile.
  constexpr int kLanesPerRow = HD / 8, kRowStep = kThreads / kLanesPerRow;
  const int row0 = threadIdx.x / kLanesPerRow, col = (threadIdx.x % kLanesPerRow) * 8;
  const bf16* kHead = p.k + int64_t(kvh) * HD + col;
  const bf16* vHead = p.v + int64_t(kvh) * HD + col;
  for (int64_t n0 = 0; n0 < keyEnd; n0 += kKeys) {
    // Load the tile: kKeys rows × HD / 8 chunks of 16 bytes for each of K and V. (Keys fit
    // 32 bits: a 64-bit division per row was most of the kernel's integer work.)
#pragma unroll
    for (int row = row0; row < kKeys; row += kRowStep) {
      const int key = int(n0) + row;
      int64_t slot = -1;
      if (key < keyEnd) {
        const int blk = p.blockShift >= 0 ? key >> p.blockShift : key / p.blockSize;
        const int off = p.blockShift >= 0 ? key & (p.blockSize - 1) : key - blk * p.blockSize;
        const int32_t b = table[blk];
        if (b >= 0 && b < p.numBlocks) slot = int64_t(b) * p.blockSize + off;
      }
      const int64_t at = (slot < 0 ? 0 : slot) * kvWidth;
      copy16(sK + row * kStride + col, kHead + at, slot >= 0);
      copy16(sV + row * kStride + col, vHead + at, slot >= 0);
    }
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();

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
    // Scale, mask (key after the row's position, or past the keys), and the new row maxima.
    const bool whole = n0 + kKeys - 1 <= firstPos && n0 + kKeys <= keyEnd;  // every key seen by every row
    float t0 = m0, t1 = m1;
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t key = n0 + nt * 8 + pair + (e & 1);
        const int64_t pos = e < 2 ? pos0 : pos1;
        const bool live = e < 2 ? live0 : live1;
        float x = s[nt][e] * p.scaleLog2;
        if (!whole && (!live || key > pos || key >= keyEnd)) x = -INFINITY;
        s[nt][e] = x;
        if (e < 2) t0 = fmaxf(t0, x);
        else t1 = fmaxf(t1, x);
      }
    }
    // The 4 lanes of a quad share rows.
    t0 = fmaxf(t0, __shfl_xor_sync(0xffffffffu, t0, 1));
    t0 = fmaxf(t0, __shfl_xor_sync(0xffffffffu, t0, 2));
    t1 = fmaxf(t1, __shfl_xor_sync(0xffffffffu, t1, 1));
    t1 = fmaxf(t1, __shfl_xor_sync(0xffffffffu, t1, 2));
    // A row that has seen no key yet keeps max -inf: subtract 0 instead (its weights are 0).
    const float base0 = t0 == -INFINITY ? 0 : t0, base1 = t1 == -INFINITY ? 0 : t1;
    const float keep0 = exp2f(m0 - base0), keep1 = exp2f(m1 - base1);
    m0 = t0;
    m1 = t1;
    l0 *= keep0;
    l1 *= keep1;
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt) {
      o[dt][0] *= keep0;
      o[dt][1] *= keep0;
      o[dt][2] *= keep1;
      o[dt][3] *= keep1;
    }
    // P = e^(S - max) as the A fragments of P·V (two 8-key tiles per k-step), in two
    // bf16 parts, P = hi + lo: P·V in two products keeps P to about 16 bits. (Rounding P
    // to one bf16, as flash attention does, cost the demo model 12% of its greedy tokens
    // identical to f32.)
    uint32_t hi[kKeys / 16][4], lo[kKeys / 16][4];
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; ++nt) {
      const float e0 = exp2f(s[nt][0] - base0), e1 = exp2f(s[nt][1] - base0);
      const float e2 = exp2f(s[nt][2] - base1), e3 = exp2f(s[nt][3] - base1);
      l0 += e0 + e1;
      l1 += e2 + e3;
      const int st = nt / 2, j = (nt % 2) * 2;
      split(e0, e1, hi[st][j], lo[st][j]);
      split(e2, e3, hi[st][j + 1], lo[st][j + 1]);
    }
    // O += P·V: V's B fragments by ldmatrix.trans, two 8-dim column tiles per load.
#pragma unroll
    for (int st = 0; st < kKeys / 16; ++st) {
#pragma unroll
      for (int dt = 0; dt < HD / 8; dt += 2) {
        const int mat = lane / 8, r = lane % 8;
        const bf16* src = sV + (st * 16 + (mat % 2) * 8 + r) * kStride + (dt + mat / 2) * 8;
        uint32_t b[4];
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                     : "r"(unsigned(__cvta_generic_to_shared(src))));
        mma(o[dt], hi[st], b[0], b[1]);
        mma(o[dt], lo[st], b[0], b[1]);
        mma(o[dt + 1], hi[st], b[2], b[3]);
        mma(o[dt + 1], lo[st], b[2], b[3]);
      }
    }
    __syncthreads();  // the next tile overwrites sK and sV
  }

  // Row sums over the quad, then O / l into the output rows.
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  // O / l as the other kernels and the CPU (the weights come from exp2 of scores scaled by
  // scale · log2(e), which differs from their expf of scale · q·k by float rounding only).
  auto div = [](float x, float l) { return l > 0 ? x / l : 0.0f; };
  const int64_t outWidth = int64_t(p.numHeads) * HD;
  bf16* out = p.out + (q0 + r0) * outWidth + int64_t(h) * HD + pair;
#pragma unroll
  for (int dt = 0; dt < HD / 8; ++dt) {
    if (live0) *reinterpret_cast<uint32_t*>(out + dt * 8) = pack(div(o[dt][0], l0), div(o[dt][1], l0));
    if (live1) *reinterpret_cast<uint32_t*>(out + 8 * outWidth + dt * 8) = pack(div(o[dt][2], l1), div(o[dt][3], l1));
  }
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
  // A row of the grid is a tile of every head (blocks sharing a KV head side by side), and
  // there are enough rows for any split of the tokens over the sequences; the extra exit.
  const dim3 grid{unsigned(l.numHeads), unsigned((numTokens + kRows - 1) / kRows + numSeqs)};
  if (l.headDim == 64) launch("pagedAttention prefill kernel", prefillKernel<64>, grid, kThreads, 0, a);
  else launch("pagedAttention prefill kernel", prefillKernel<128>, grid, kThreads, 0, a);
}

}  // namespace mstar::gpu
