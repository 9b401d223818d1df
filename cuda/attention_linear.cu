// A decode layer's attention and the o projection after it as one op (pagedAttentionLinear):
// where attention's step takes wide blocks and the tensor-core GEMV takes the projection (a
// decode step of one or two sequences at Qwen3-0.6B's 2048-wide attention output), attention
// leaves a context's key splits as partials and the GEMV merges them as it loads its input
// (gemv_mma.cu's MERGE). Attention's own merge (partials, a ticket, the last block's re-read,
// the output written and read back) had cost a short context more than the rounds a split saves,
// so contexts of up to ~256 keys took one block a kv head and ran their keys in series
// (attention.cu's kMergeRounds); now they split wherever a round is saved. Contexts of more
// splits than the GEMV takes (attention_split.cuh's deferredSplits: 8 at one sequence, 4 at two)
// still merge in attention, and the GEMV then stages that output in shared memory, which costs
// them ~0.3 µs a layer. Elsewhere the two ops run one by one. bench/decode_step.mjs on an H200,
// Qwen3-0.6B, LoRA off, GPU ms a step, the two ops -> this (one process each):
//   one sequence, 128 / 192 / 256 keys 0.627 / 0.658 / 0.677 -> 0.625 / 0.625 / 0.622;
//     192 / 384 / 512 / 1024 keys 0.661 / 0.670 / 0.667 / 0.702 -> 0.629 / 0.642 / 0.650 / 0.711;
//   two, 128 / 192 / 256 keys 0.643 / 0.678 / 0.693 -> 0.648 / 0.661 / 0.664; 384 / 512 / 1024
//     keys 0.696 / 0.722 / 0.763 -> 0.711 / 0.734 / 0.765;
//   one adapter at 192 keys 0.807 -> 0.765 (one sequence), 0.805 -> 0.792 (two);
// four sequences and more, and Qwen3-8B (whose o weight the tensor-core GEMV takes only from
// 2 rows, 4096 wide), run as before (bench/RESULTS.md, fifty-first session).
#include "attention_split.cuh"
#include "common.cuh"
#include "gemv_mma.cuh"

namespace mstar::gpu {

void pagedAttentionLinear(DType act, void* attn, const void* qkv, KvCache c, const int32_t* blockTables,
                          int64_t maxBlocks, const int32_t* queryStarts, const int32_t* contextLens, int64_t numSeqs,
                          int64_t numTokens, HeadLayout l, float scale, void* out, Weights w, const Weights* bias,
                          int64_t outF, bool accumulate, const UnusedSlots& unused) {
  const int64_t in = int64_t(l.numHeads) * l.headDim;
  SplitPartials partials;
  const bool merges = gemvMmaMerges(act, w, numTokens, in, outF);
  if (!merges) {
    pagedAttention(act, attn, qkv, c, blockTables, maxBlocks, queryStarts, contextLens, numSeqs, numTokens, l, scale);
  } else if (pagedAttentionSplits(act, attn, qkv, c, blockTables, maxBlocks, queryStarts, contextLens, numSeqs,
                                  numTokens, l, scale, &partials)) {
    if (gemvMma(act, out, nullptr, w, bias, numTokens, in, outF, accumulate, unused, false, {}, &partials)) return;
    // gemvMma takes the merge wherever gemvMmaMerges said it would: attn holds only partials.
    throw Error("pagedAttentionLinear: the projection declined to merge attention's splits");
  }
  linear(act, out, attn, w, bias, numTokens, in, outF, accumulate, {}, unused);
}

}  // namespace mstar::gpu
