// Hopper's warpgroup MMA (wgmma, sm_90a only): the four warps of a warpgroup multiply a
// 64-row A, here from registers, by a B in shared memory named by a descriptor, into f32
// accumulators in registers, asynchronously. Layouts (PTX ISA, "Asynchronous Warpgroup Level
// Matrix"): warp w of the warpgroup holds rows 16w..16w+15 of A and of D, each in mma.m16n8k16's
// fragment layout (mma.cuh), D's columns in 8-column tiles (element 4j + e of a thread's D is
// that layout's element e of tile j).
//
// B here is always in the 128-byte swizzle: rows of 64 bf16 (128 bytes), the 16-byte chunk c of
// row r stored at chunk c ^ (r % 8), in atoms of 8 rows (1024 bytes, 1024-aligned). A K-major
// B (rows along N, K contiguous) names the offset between 8-row groups (SBO); an N-major one
// (rows along K, N contiguous: TransB = 1) also the offset between 64-column blocks (LBO).
//
// Order: registers an MMA reads or accumulates are written before wgmmaFence(); the MMAs
// then run until wgmmaWait(), which the accumulators are read after and the A fragments kept
// until (holdRegisters keeps the compiler from moving their uses across these points). Shared memory written by ordinary
// stores or cp.async is made visible to the MMAs by proxyFence(): the writer's, before the
// barrier that publishes it; or, where copies land on their own (cp.async arriving on an
// mbarrier, mbarrier.cuh), the reader's, after its wait.
#pragma once
#include <cstdint>

namespace mstar::gpu {

// The descriptor of a 128-byte-swizzled matrix at p (shared memory; within its atom, p may
// sit 32, 64 or 96 bytes into a row: the k-steps of a K-major B).
__device__ __forceinline__ uint64_t swizzledDesc(const void* p, uint32_t lbo, uint32_t sbo) {
  const uint32_t a = unsigned(__cvta_generic_to_shared(p));
  return uint64_t((a & 0x3FFFF) >> 4) | uint64_t((lbo & 0x3FFFF) >> 4) << 16 | uint64_t((sbo & 0x3FFFF) >> 4) << 32 |
         uint64_t(1) << 62;
}

// The descriptor of the matrix `bytes` further on than desc's (the start address is its low
// field, in 16-byte units; shared memory's addresses fit it): no address arithmetic per MMA.
__device__ __forceinline__ uint64_t descAt(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

__device__ __forceinline__ void wgmmaFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N committed groups of this warpgroup's MMAs are still running.
template <int N>
__device__ __forceinline__ void wgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Generic-proxy writes to shared memory (stores, cp.async) visible to the MMAs' async proxy.
__device__ __forceinline__ void proxyFence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// This warpgroup's registers a thread from here on (setmaxnreg; a multiple of 8, 24 to 256):
// fewer hand registers back to the block's pool, more wait for them there, so that a
// warpgroup that only copies can give its share to those that multiply. Every thread of
// the warpgroup runs it.
template <int N>
__device__ __forceinline__ void lowerRegisters() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void raiseRegisters() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

template <int N>
__device__ __forceinline__ void holdRegisters(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void holdRegisters(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// d (64 x 64) += a (64 x 16) · b (16 x 64); b by descriptor, N-major where TransB is 1.
template <int TransB>
__device__ __forceinline__ void wgmma64x64(float (&d)[32], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %36, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %37, p, 1, 1, %38;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(int(accumulate)), "l"(b), "n"(TransB));
}

// d (64 x 128) += a (64 x 16) · b (16 x 128); b by descriptor, N-major where TransB is 1.
template <int TransB>
__device__ __forceinline__ void wgmma64x128(float (&d)[64], const uint32_t (&a)[4], uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %68, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %69, p, 1, 1, %70;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(int(accumulate)), "l"(b), "n"(TransB));
}

}  // namespace mstar::gpu
