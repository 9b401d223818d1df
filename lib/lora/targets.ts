// The LoRA target list, stated once: every module of a Llama-family model an adapter may sit on.
export const ALL_TARGETS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj', 'embed_tokens', 'lm_head'];
