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

namespace mstar::gpu {

// Whether V consecutive outputs' bT entries (from a multiple of V) allow one load, and 8 rank
// entries of t one 16-byte load.
inline bool deltaRunsOf(const LoraDelta& d, int v, size_t elem) {
  auto aligned = [](const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  return d.ldb % v == 0 && aligned(d.bT, v * elem) && d.ldt % 8 == 0 && d.rank % 8 == 0 && aligned(d.t, 16);
}

// Where a run of outputs [o0, o1) takes its delta from for `slot`. The consumers find it before
// awaitPrior: sliceStarts and ranks are the pool's (no op of a step writes them), so the
// dependent reads of them (the slice search, then the slot's rank) happen while the kernel
// before still runs, not as round trips of their own between the wait and the loads of t and
// bT. (loraDeltas, the output-by-output path, finds one an output.)
struct DeltaPlan {
  int64_t c = 0;      // the slot's slice's first column of t and first row of bT
  int64_t used = 0;   // the slot's rank there (0: no delta)
  bool runs = false;  // vec and one slice: a load of bT a rank entry for V outputs (loraDeltasRun)
};
__device__ __forceinline__ DeltaPlan deltaPlan(const LoraDelta& d, bool vec, int32_t slot, int64_t o0, int64_t o1) {
  DeltaPlan p;
  if (!d.t) return p;
  const int64_t s = sliceOf(d.sliceStarts, d.numSlices, o0);
  p.runs = vec && s == sliceOf(d.sliceStarts, d.numSlices, o1 - 1);
  if (slot <= 0 || slot >= d.numSlots || s >= d.numSlices) return p;
  p.c = (int64_t(slot) * d.numSlices + s) * d.rank;
  p.used = d.ranks ? min(d.rank, int64_t(d.ranks[int64_t(slot) * d.numSlices + s])) : d.rank;
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

}  // namespace mstar::gpu
