// Shared-memory barriers (mbarrier, sm_80 and up): a 64-bit word in shared memory that
// completes a phase once its expected number of arrivals has come, then starts the next.
// A thread waits for a phase by its parity (phase k of a barrier used in turn: k & 1), so the
// arrivals may never run more than one phase ahead of the slowest waiter. Arrive releases
// and wait acquires (CTA scope): what a thread wrote before arriving, a thread that saw the
// phase complete can read.
#pragma once
#include <cstdint>

namespace mstar::gpu {

__device__ __forceinline__ unsigned sharedAddress(const void* p) { return unsigned(__cvta_generic_to_shared(p)); }

// Before any use, by one thread; a block barrier then publishes it.
__device__ __forceinline__ void barrierInit(uint64_t* bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(sharedAddress(bar)), "r"(arrivals) : "memory");
}

__device__ __forceinline__ void barrierArrive(uint64_t* bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(sharedAddress(bar)) : "memory");
}

// One arrival, made by the hardware once every cp.async this thread issued so far has
// landed (counted in the barrier's arrivals: noinc).
__device__ __forceinline__ void copiesArrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(sharedAddress(bar)) : "memory");
}

// Waits until the phase of this parity has completed.
__device__ __forceinline__ void barrierWait(uint64_t* bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(sharedAddress(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

}  // namespace mstar::gpu
