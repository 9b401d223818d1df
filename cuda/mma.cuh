// The tensor-core instructions the kernels use (sm_80 and up): mma.m16n8k16, bf16 in, f32
// accumulators, and movmatrix or ldmatrix.trans to transpose 8 x 8 tiles. Fragment layouts
// (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with g = lane / 4 and q = lane % 4:
//   A (16 x 16, row-major), a[0..3]: (row g, k 2q..2q+1), (row g+8, k 2q..), (row g, k 2q+8..),
//     (row g+8, k 2q+8..)
//   B (16 x 8, column-major), b0, b1: (k 2q..2q+1, column g), (k 2q+8..2q+9, column g)
//   D (16 x 8), d[0..3]: (row g, columns 2q, 2q+1), (row g+8, columns 2q, 2q+1)
#pragma once
#include <cstdint>

namespace mstar::gpu {

// d += a · b for one 16×8×16 tile.
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Where element e of lane `lane`'s D sits: row accRow (of 16), column accColumn (of 8).
__device__ __forceinline__ int accRow(int lane, int e) { return (lane >> 2) + 8 * (e >> 1); }
__device__ __forceinline__ int accColumn(int lane, int e) { return 2 * (lane & 3) + (e & 1); }

// An 8 x 8 tile of 16-bit elements held as the warp's fragment (lane: row lane / 4, columns
// 2 (lane % 4) and the next, in v), transposed: the lane then holds the transpose's such pair.
// An A fragment from a matrix stored k-major (A's columns as rows) takes one per 8 x 8 tile.
__device__ __forceinline__ uint32_t transposed8x8(uint32_t v) {
  uint32_t t;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(t) : "r"(v));
  return t;
}

// Four 8 x 8 tiles of 16-bit elements in shared memory, each loaded transposed (ldmatrix.trans):
// lanes 8j..8j+7 pass the addresses of tile j's 8 rows (16 bytes each, 16-byte aligned), and
// r[j] is then the lane's pair of tile j's transpose (as transposed8x8 would give). A k-major
// 16 x 16 block of B (k rows of n) gives two n-tiles' b0, b1 in one call.
__device__ __forceinline__ void loadTransposed4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(unsigned(__cvta_generic_to_shared(row))));
}

}  // namespace mstar::gpu
