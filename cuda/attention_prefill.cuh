// The tensor-core prefill path of pagedAttention (attention_prefill.cu).
#pragma once
#include "common.cuh"

namespace mstar::gpu {

// Whether a step goes to prefillAttention: bf16 activations and cache, head dim 64 or 128,
// 16-byte aligned rows, and at least 16 query tokens a sequence on average.
bool prefillOnTensorCores(DType act, DType cache, int headDim, int64_t numTokens, int64_t numSeqs, const void* out,
                          const void* qkv, const void* k, const void* v);

// pagedAttention's contract (bf16 out) on tensor cores.
void prefillAttention(void* out, const void* qkv, KvCache c, const int32_t* blockTables, int64_t maxBlocks,
                      const int32_t* queryStarts, const int32_t* contextLens, int64_t numSeqs, int64_t numTokens,
                      HeadLayout l, float scale);

// log2(blockSize) where it is a power of two, else -1: both attention kernels find a key's
// table entry by shift where they can (a division per key was most of their integer work).
int blockShift(int64_t blockSize);

// The cache row of `key` by its sequence's block table, or -1 where the table entry is
// outside the cache's numBlocks blocks. shift is blockShift(blockSize). Keys and rows fit
// 32 bits (the host checks).
__device__ __forceinline__ int32_t cacheRow(const int32_t* table, int key, int blockSize, int shift, int64_t numBlocks) {
  const int blk = shift >= 0 ? key >> shift : key / blockSize;
  const int32_t b = table[blk];
  return b >= 0 && b < numBlocks ? b * blockSize + (key - blk * blockSize) : -1;
}

// Both kernels keep scores in log2 units (scaled by log2 e): a weight is then an exp2.
constexpr float kLog2e = 1.4426950408889634f;

}  // namespace mstar::gpu
