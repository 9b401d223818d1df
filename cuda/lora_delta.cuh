// An adapted projection's delta, added by the op that takes the projection's output
// (LoraDelta, native/cpu/ops.h): ropeKvWrite for qkv, siluMul for gate_up, addRmsNorm for
// o and down. Their GEMM ran by the weight with every slot's A beneath W, so y's rows carry
// t after their own columns; what is left of the adapter is rank-long dot products here,
// where the op reads y anyway: no shrink or expand launch of its own. b is read transposed
// (bT, a row of outputs per rank entry): a warp's neighbouring outputs are neighbouring
// elements, one run of memory (b's rows, R entries an output 8 KB apart, had each thread
// wait on scattered 32-byte reads: 15 us for an 8B addRmsNorm against 1.7 plain).
#pragma once
#include "common.cuh"
#include "mma.cuh"

namespace mstar::gpu {

// Whether V consecutive outputs' bT entries (from a multiple of V) allow one load, and 8 rank
// entries of t one 16-byte load.
inline bool deltaRunsOf(const LoraDelta& d, int v, size_t elem) {
  auto aligned = [](const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  return d.ldb % v == 0 && aligned(d.bT, v * elem) && d.ldt % 8 == 0 && d.rank % 8 == 0 && aligned(d.t, 16);
}

// Where a run of outputs [o0, o1) takes its delta from for `slot`, found before awaitPrior
// (the slices are parameters). All of the pool's rank: past a slot's own rank, and for a
// target its adapter lacks, t and bT hold zeros (the pool loads zeros there; t is x times zero
// rows of A), so the slot's rank is not read. After a cuBLASLt GEMM, which lets nothing start
// early, that read was one more dependent round trip before bT's loads (bench/decode_step.mjs,
// one adapter, GPU ms a step with / without it: Qwen3-8B 8 rows 5.173 / 5.157, 32 rows 5.798 /
// 5.780; Qwen3-0.6B 64 rows 1.862 / 1.847; equal where the tensor-core GEMV starts the op
// early). (loraDeltas, the output-by-output path, finds one an output.)
struct DeltaPlan {
  int64_t c = 0;      // the slot's slice's first column of t and first row of bT
  int64_t used = 0;   // rank entries to sum: the pool's rank (0: no delta)
  bool runs = false;  // vec and one slice: a load of bT a rank entry for V outputs (loraDeltasRun)
};
__device__ __forceinline__ DeltaPlan deltaPlan(const LoraDelta& d, bool vec, int32_t slot, int64_t o0, int64_t o1) {
  DeltaPlan p;
  if (!d.t) return p;
  const int s = d.slices.of(o0);
  p.runs = vec && s == d.slices.of(o1 - 1);
  if (slot <= 0 || slot >= d.numSlots || s >= d.slices.count) return p;
  p.c = (int64_t(slot) * d.slices.count + s) * d.rank;
  p.used = d.rank;
  return p;
}

// Row r's delta at outputs o[0 .. N) into acc (f32, k in order as the CPU sums it; 0 for
// slot 0, a slot out of range or a column outside every slice), for the row's slot (read
// once by the caller). Each k's loads of the N outputs go out together.
template <typename T, int N>
__device__ __forceinline__ void loraDeltas(const LoraDelta& d, int64_t r, int32_t slot, const int64_t (&o)[N],
                                           float (&acc)[N]) {
  const T* t[N];
  const T* b[N];
  int64_t used[N];
#pragma unroll
  for (int e = 0; e < N; ++e) {
    const DeltaPlan p = deltaPlan(d, false, slot, o[e], o[e] + 1);
    acc[e] = 0;
    used[e] = p.used;
    t[e] = static_cast<const T*>(d.t) + r * d.ldt + p.c;
    b[e] = static_cast<const T*>(d.bT) + p.c * d.ldb + o[e];
  }
#pragma unroll 4
  for (int64_t k = 0; k < d.rank; ++k)
#pragma unroll
    for (int e = 0; e < N; ++e)
      if (k < used[e]) acc[e] += toF(t[e][k]) * toF(b[e][k * d.ldb]);
}

// KC rank entries k0 .. k0 + KC of G rows' t (t[g]), and of bT for the V outputs at b, into
// each row's acc: all the loads at once (bT's once for all G rows), then the sums (in k's order).
template <typename T, int V, int KC, int G>
__device__ __forceinline__ void deltaChunk(const T* const (&t)[G], const T* b, int64_t ldb, int64_t k0,
                                           float (&acc)[G][V]) {
  float tv[G][KC], bv[KC][V];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int j = 0; j < KC; j += 8) loadVec<T, 8>(*reinterpret_cast<float(*)[8]>(tv[g] + j), t[g] + k0 + j);
#pragma unroll
  for (int j = 0; j < KC; ++j) loadVec<T, V>(bv[j], b + (k0 + j) * ldb);
#pragma unroll
  for (int j = 0; j < KC; ++j)
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
      for (int e = 0; e < V; ++e) acc[g][e] += tv[g][j] * bv[j][e];
}

// The deltas of G rows r[g] of one slot at the V outputs o0 .. o0 + V - 1 (o0 a multiple of V),
// planned (deltaPlan) for the run: where they share a slice and vec, one load of bT a rank entry
// for all V outputs and all G rows, every entry's loads (t's 8 at a time) in flight together, 16
// entries a round. All of the pool's rank: a slot of lower rank has zeros past its own in t and
// in bT alike. (A thread's outputs a warp apart, one load per output and entry, made ropeKvWrite
// 26 us against 3.5 plain; a round of 4 entries, 7.4; rounds of 8 entries under a branch per
// entry, 10.2.)
template <typename T, int V, int G>
__device__ __forceinline__ void loraDeltasRun(const LoraDelta& d, const DeltaPlan& plan, const int64_t (&r)[G],
                                              int32_t slot, int64_t o0, float (&acc)[G][V]) {
  if (!plan.runs) {
    int64_t o[V];
#pragma unroll
    for (int e = 0; e < V; ++e) o[e] = o0 + e;
#pragma unroll
    for (int g = 0; g < G; ++g) loraDeltas<T, V>(d, r[g], slot, o, acc[g]);
    return;
  }
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int e = 0; e < V; ++e) acc[g][e] = 0;
  if (!plan.used) return;
  const T* t[G];
#pragma unroll
  for (int g = 0; g < G; ++g) t[g] = static_cast<const T*>(d.t) + r[g] * d.ldt + plan.c;
  const T* b = static_cast<const T*>(d.bT) + plan.c * d.ldb + o0;
  int64_t k0 = 0;
  for (; k0 + 16 <= d.rank; k0 += 16) deltaChunk<T, V, 16, G>(t, b, d.ldb, k0, acc);
  if (k0 < d.rank) deltaChunk<T, V, 8, G>(t, b, d.ldb, k0, acc);  // the rank is a multiple of 8 (deltaRunsOf)
}

// y[g][0 .. V) + row r[g]'s deltas at o0 .. o0 + V - 1 (planned for the row's slot), rounded as
// the projection with its adapter is stored, into y (no delta: y unchanged). Rows of one slot
// share bT's loads (siluMul at 32 rows of Qwen3-8B, each row re-reading gate_up's 1.5 MB of bT
// from L2, took 9.7 us against 2.4 plain); rows of several slots take theirs a row at a time.
template <typename T, int V, int G>
__device__ __forceinline__ void addDeltasRows(const LoraDelta& d, const DeltaPlan (&plan)[G], const int64_t (&r)[G],
                                              const int32_t (&slot)[G], int64_t o0, float (&y)[G][V]) {
  if (!d.t) return;
  float acc[G][V];
  bool shared = true;
#pragma unroll
  for (int g = 1; g < G; ++g) shared = shared && slot[g] == slot[0];
  if (shared) {
    loraDeltasRun<T, V, G>(d, plan[0], r, slot[0], o0, acc);
  } else {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int64_t one[1] = {r[g]};
      loraDeltasRun<T, V, 1>(d, plan[g], one, slot[g], o0, *reinterpret_cast<float(*)[1][V]>(acc[g]));
    }
  }
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int e = 0; e < V; ++e) y[g][e] = toF(fromF<T>(y[g][e] + acc[g][e]));
}

// addDeltasRows for one row r.
template <typename T, int V>
__device__ __forceinline__ void addDeltasRun(const LoraDelta& d, const DeltaPlan& plan, int64_t r, int32_t slot,
                                             int64_t o0, float (&y)[V]) {
  const DeltaPlan plans[1] = {plan};
  const int64_t rows[1] = {r};
  const int32_t slots[1] = {slot};
  addDeltasRows<T, V, 1>(d, plans, rows, slots, o0, *reinterpret_cast<float(*)[1][V]>(y));
}

// bf16 bT's rank entries (up to kLoadedRank) at the 8 outputs from o0 of a planned run (one
// slice), loaded before awaitPrior into registers as stored (a weight; converted only after the
// wait, so that nothing before it waits on them): after the wait only t is left to load, one
// round trip with the op's own inputs. A pool rank past kLoadedRank: not loaded (the op takes
// addDeltasRun's path).
constexpr int kLoadedRank = 16;
struct LoadedDeltas {
  uint4 b[kLoadedRank];  // entry k's 8 outputs
  bool loaded;

  __device__ void load(const LoraDelta& d, const DeltaPlan& plan, int64_t o0) {
    loaded = d.t && plan.runs && d.rank <= kLoadedRank;
    if (!loaded || !plan.used) return;
    const bf16* bT = static_cast<const bf16*>(d.bT) + plan.c * d.ldb + o0;
#pragma unroll
    for (int k = 0; k < kLoadedRank; ++k)
      if (k < d.rank) b[k] = *reinterpret_cast<const uint4*>(bT + k * d.ldb);
  }

  // As addDeltasRun (the rank's entries in k's order) for row r, into y.
  __device__ void addTo(const LoraDelta& d, const DeltaPlan& plan, int64_t r, float (&y)[8]) const {
    if (!plan.used) return;
    const bf16* t = static_cast<const bf16*>(d.t) + r * d.ldt + plan.c;
    float tv[kLoadedRank];
#pragma unroll
    for (int k = 0; k < kLoadedRank; k += 8)
      if (k < d.rank) loadVec<bf16, 8>(*reinterpret_cast<float(*)[8]>(tv + k), t + k);
    float acc[8] = {};
#pragma unroll
    for (int k = 0; k < kLoadedRank; ++k) {
      if (k >= d.rank) break;
      const bf16* e = reinterpret_cast<const bf16*>(&b[k]);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] += tv[k] * toF(e[i]);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = toF(fromF<bf16>(y[i] + acc[i]));
  }
};

// Before awaitPrior (bT is a weight, slotOfRow a step's input: no op of the step writes them):
// the lines of bT holding output o's column in the planned slice's rows, towards L2, by the
// thread whose o starts a line (so that the deltas' loads after the wait find them there; the
// other weights evict bT between steps).
template <typename T>
__device__ __forceinline__ void prefetchDeltas(const LoraDelta& d, const DeltaPlan& plan, int64_t o) {
  if (!plan.used || o % (128 / int64_t(sizeof(T))) != 0) return;
  const T* b = static_cast<const T*>(d.bT) + plan.c * d.ldb + o;
  for (int64_t k = 0; k < d.rank; ++k) prefetchL2(b + k * d.ldb);
}

// y[e] + the delta at o[e], rounded as the projection with its adapter is stored, into y (no
// delta: y unchanged).
template <typename T, int N>
__device__ __forceinline__ void addDeltas(const LoraDelta& d, int64_t r, int32_t slot, const int64_t (&o)[N],
                                          float (&y)[N]) {
  if (!d.t) return;
  float acc[N];
  loraDeltas<T, N>(d, r, slot, o, acc);
#pragma unroll
  for (int e = 0; e < N; ++e) y[e] = toF(fromF<T>(y[e] + acc[e]));
}

// Tensor-core deltas: a tile of 16 outputs (one slice) by 8 rows is one mma.m16n8k16 a 16 rank
// entries, the outputs as M, the rows as N, the rank as K. A is bT's slice, an 8 x 8 tile a
// 4-byte load a lane, turned k-minor by movmatrix; B is the rows' t, two rank entries of one row
// a 4-byte load. A warp's 128 deltas then cost some 20 instructions a lane, not the 16 FMAs and
// conversions an output of the loops above (siluMul at 8 rows of Qwen3-0.6B: ~1070 instructions
// a warp, the warps too few to hide their latencies).
__device__ __forceinline__ uint32_t load32(const void* p) { return *static_cast<const uint32_t*>(p); }

// Whether the tensor-core deltas can take d (of bf16 elements): bT's and t's 4-byte loads line
// up, the rank is a multiple of 8 (a K tile's upper half may be zeros), and 16-output tiles fill
// the slices of `width` outputs.
inline bool deltaTilesOf(const LoraDelta& d, int64_t width) { return width % 16 == 0 && deltaRunsOf(d, 8, 2); }

// The lane's A fragment of a tile: bT's rank entries k0 + g and k0 + g + 8 (the upper pair 0
// past the rank) at outputs o0 + 2q, o0 + 2q + 1 and the same + 8, of the slice whose first
// row is c0 = (slot * slices + s) * rank.
__device__ __forceinline__ void loadTileA(const LoraDelta& d, int64_t c0, int64_t k0, int64_t o0, uint32_t (&a)[4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const bf16* bT = static_cast<const bf16*>(d.bT) + (c0 + k0 + g) * d.ldb + o0 + 2 * q;
  const bool upper = k0 + 8 < d.rank;  // the same for the whole warp
  a[0] = load32(bT);
  a[1] = load32(bT + 8);
  a[2] = upper ? load32(bT + 8 * d.ldb) : 0;
  a[3] = upper ? load32(bT + 8 * d.ldb + 8) : 0;
}

// Where NT tiles of 16 outputs o0[j] .. o0[j] + 15 over rows r0 .. r0 + 7 take their deltas
// from, found before awaitPrior (slotOfRow is a step's input, no op of the step writes it). The
// slot of row r0's first 16 rank entries of bT (a weight) load here too, into registers: after
// the wait only t is left to load (the slot's lines past them head towards L2 instead, as
// prefetchDeltas sends them). Qwen3-0.6B's decode step with one adapter (ropeKvWrite and
// siluMul take these tiles), 1 / 8 sequences: 0.932 / 0.989 ms -> 0.911 / 0.950, where bT's
// loads after the wait had been a round trip of their own. (The same for addRmsNorm's rows,
// bT's 16 entries of 8 outputs held in 128 registers a thread, slowed its step to 1.05 ms:
// only as many blocks then fit beside the GEMV before it.) Every lane of the warp calls it.
template <int NT>
struct TilePlan {
  int64_t o0[NT], s[NT];  // each tile's first output and slice
  int64_t r0, n;          // the tiles' first row; rows from n on have no delta
  int32_t rowSlot;        // the slot of the lane's row of B, r0 + lane / 4 (0 past n)
  bool oneSlice;          // every tile within one slice (else an output at a time)
  int32_t aSlot;          // the slot whose first 16 rank entries of bT are in a0 (0: none)
  uint32_t a0[NT][4];     // those entries, the lane's A fragment of each tile, loaded before the wait
};
template <int NT>
__device__ __forceinline__ TilePlan<NT> tilePlan(const LoraDelta& d, const int64_t (&o0)[NT], int64_t r0, int64_t n) {
  TilePlan<NT> p;
  p.r0 = r0;
  p.n = n;
  const int64_t row = r0 + threadIdx.x % 32 / 4;
  p.rowSlot = row < n ? d.slotOfRow[row] : 0;
  p.oneSlice = true;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    p.o0[j] = o0[j];
    p.s[j] = d.slices.of(o0[j]);
    p.oneSlice = p.oneSlice && p.s[j] < d.slices.count && p.s[j] == d.slices.of(o0[j] + 15);
  }
  const int32_t slot = __shfl_sync(~0u, p.rowSlot, 0);
  p.aSlot = 0;
  if (!p.oneSlice || slot <= 0 || slot >= d.numSlots) return p;
  p.aSlot = slot;
#pragma unroll
  for (int j = 0; j < NT; ++j) loadTileA(d, (int64_t(slot) * d.slices.count + p.s[j]) * d.rank, 0, o0[j], p.a0[j]);
  // A line holds 4 tiles' columns of a rank entry: the warp whose tile starts it sends it, lane k
  // entry 16 + k.
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    if (o0[j] % 64 != 0) continue;
    const bf16* b = static_cast<const bf16*>(d.bT) + (int64_t(slot) * d.slices.count + p.s[j]) * d.rank * d.ldb + o0[j];
    for (int64_t k = 16 + threadIdx.x % 32; k < d.rank; k += 32) prefetchL2(b + k * d.ldb);
  }
  return p;
}

// Where element e of this lane's tile accumulator sits (mma.cuh's D, the outputs as its rows and
// the step's rows as its columns): the tile's row 2q + e % 2 and output g + 8 (e / 2).
__device__ __forceinline__ int tileRow(int e) { return accColumn(threadIdx.x % 32, e); }
__device__ __forceinline__ int tileOutput(int e) { return accRow(threadIdx.x % 32, e); }

// The deltas of the planned tiles into acc[j][0..3] (tileRow, tileOutput: outputs o0[j] + g,
// rows r0 + 2q and r0 + 2q + 1; o0[j] + g + 8, the same rows; a row from n on: the last row's). A row
// of slot 0 or a slot out of range has none. Rows of several slots take a round each (the loads
// of one round go out together); tiles across slices (no layout the pool makes), an output at a
// time.
template <int NT>
__device__ __forceinline__ void deltaTiles(const LoraDelta& d, const TilePlan<NT>& p, float (&acc)[NT][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  if (!p.oneSlice) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t r = min(p.r0 + tileRow(e), p.n - 1);
      int64_t o[NT];
      float one[NT];
#pragma unroll
      for (int j = 0; j < NT; ++j) o[j] = p.o0[j] + tileOutput(e);
      loraDeltas<bf16, NT>(d, r, d.slotOfRow[r], o, one);
#pragma unroll
      for (int j = 0; j < NT; ++j) acc[j][e] = one[j];
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[j][e] = 0;
  const bool has = p.rowSlot > 0 && p.rowSlot < d.numSlots;
  const bf16* t = static_cast<const bf16*>(d.t) + min(p.r0 + g, p.n - 1) * d.ldt + 2 * q;
  for (unsigned pending = __ballot_sync(~0u, has); pending;) {
    const int32_t slot = __shfl_sync(~0u, p.rowSlot, __ffs(pending) - 1);
    const bool mine = has && p.rowSlot == slot;
    pending &= ~__ballot_sync(~0u, mine);
    for (int64_t k0 = 0; k0 < d.rank; k0 += 16) {
      const bool upper = k0 + 8 < d.rank;  // the same for the whole warp
      const bool loaded = k0 == 0 && slot == p.aSlot;
      uint32_t a[NT][4], b[NT][2];
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int64_t c0 = (int64_t(slot) * d.slices.count + p.s[j]) * d.rank, c = c0 + k0;
        if (loaded) {
#pragma unroll
          for (int e = 0; e < 4; ++e) a[j][e] = p.a0[j][e];
        } else {
          loadTileA(d, c0, k0, p.o0[j], a[j]);
        }
        b[j][0] = mine ? load32(t + c) : 0;
        b[j][1] = mine && upper ? load32(t + c + 8) : 0;
      }
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const uint32_t aK[4] = {transposed8x8(a[j][0]), transposed8x8(a[j][1]), transposed8x8(a[j][2]),
                                transposed8x8(a[j][3])};
        mma(acc[j], aK, b[j][0], b[j][1]);
      }
    }
  }
}

}  // namespace mstar::gpu
