import { DIMS, type FamilyRules, type WeightRule } from '../rules.js';

const attentionBias = (c: { attentionBias: boolean }): boolean => c.attentionBias;
const mlpBias = (c: { mlpBias: boolean }): boolean => c.mlpBias;

/** Llama (and Mistral without sliding window): HF LlamaForCausalLM tensors → engine weights. */
export const LLAMA_RULES: FamilyRules = {
  family: 'llama',
  layerPrefix: 'model.layers',
  rules: [
    { engine: 'embed', scope: 'model', kind: 'embedding', shardDim: 0,
      parts: [{ hf: 'model.embed_tokens', rows: DIMS.vocab }], cols: DIMS.hidden },
    { engine: 'attn_norm', scope: 'layer', kind: 'norm', shardDim: null,
      parts: [{ hf: 'input_layernorm', rows: DIMS.hidden }], cols: null },
    { engine: 'qkv', scope: 'layer', kind: 'linear', shardDim: 0, bias: attentionBias,
      parts: [
        { hf: 'self_attn.q_proj', rows: DIMS.qOut },
        { hf: 'self_attn.k_proj', rows: DIMS.kvOut },
        { hf: 'self_attn.v_proj', rows: DIMS.kvOut },
      ], cols: DIMS.hidden },
    { engine: 'o', scope: 'layer', kind: 'linear', shardDim: 1, bias: attentionBias,
      parts: [{ hf: 'self_attn.o_proj', rows: DIMS.hidden }], cols: DIMS.qOut },
    { engine: 'mlp_norm', scope: 'layer', kind: 'norm', shardDim: null,
      parts: [{ hf: 'post_attention_layernorm', rows: DIMS.hidden }], cols: null },
    { engine: 'gate_up', scope: 'layer', kind: 'linear', shardDim: 0, bias: mlpBias,
      parts: [
        { hf: 'mlp.gate_proj', rows: DIMS.intermediate },
        { hf: 'mlp.up_proj', rows: DIMS.intermediate },
      ], cols: DIMS.hidden },
    { engine: 'down', scope: 'layer', kind: 'linear', shardDim: 1, bias: mlpBias,
      parts: [{ hf: 'mlp.down_proj', rows: DIMS.hidden }], cols: DIMS.intermediate },
    { engine: 'final_norm', scope: 'model', kind: 'norm', shardDim: null,
      parts: [{ hf: 'model.norm', rows: DIMS.hidden }], cols: null },
    { engine: 'lm_head', scope: 'model', kind: 'linear', shardDim: 0, tiedTo: 'embed',
      parts: [{ hf: 'lm_head', rows: DIMS.vocab }], cols: DIMS.hidden },
  ] satisfies WeightRule[],
};
