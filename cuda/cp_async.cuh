// Asynchronous copies from global to shared memory (cp.async, sm_80 and up): a thread issues
// 16-byte copies, closes them into a group, and later waits until at most N of its groups
// are still in flight. The copies bypass registers and L1 (.cg), so a thread can keep many
// loads in flight without holding a register for each.
#pragma once

namespace mstar::gpu {

// 16 bytes from gmem to smem, or 16 zero bytes when !valid (gmem is not read).
__device__ __forceinline__ void copy16(void* smem, const void* gmem, bool valid = true) {
  const unsigned dst = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0) : "memory");
}

// Closes this thread's copies issued since the last commit into one group.
__device__ __forceinline__ void commitCopies() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most N of this thread's groups are in flight.
template <int N>
__device__ __forceinline__ void awaitCopies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace mstar::gpu
