#!/usr/bin/env python3
"""Make the tiny-model parity fixtures for mstar.

What it makes (under --out-dir DIR):
  DIR/models/tiny-llama/   LlamaForCausalLM, random weights, llama3 RoPE scaling,
                           untied lm_head, bf16 safetensors in 2-3 shards with
                           model.safetensors.index.json, config.json,
                           generation_config.json (if HF writes one), tokenizer.json,
                           tokenizer_config.json (ChatML chat_template).
  DIR/models/tiny-qwen3/   Qwen3ForCausalLM, random weights, head_dim != hidden/heads,
                           q_norm/k_norm, tied embeddings, one bf16 model.safetensors,
                           same tokenizer files.
  DIR/parity/tiny-llama.json, DIR/parity/tiny-qwen3.json
                           Greedy reference decodes (12 new tokens per prompt) with
                           top-5 logprobs and the full float32 logits at every step.
                           Reference = HF transformers on CPU, float32 compute on the
                           bf16-stored weights (reloaded from disk), eager attention,
                           no KV cache (the full sequence is re-run at every step).
  DIR.tgz                  DIR packed into one file, to ship back.

The tokenizer is a 512-entry byte-level BPE trained with the `tokenizers` library on
test/parity/corpus.txt, with special tokens <|endoftext|>=0, <|im_start|>=1,
<|im_end|>=2; both models share it.

Where it runs: any machine with python3 (3.11/3.12), torch (2.11+), transformers 5.x,
tokenizers, safetensors and numpy; no network and no GPU needed (everything runs on
CPU; CUDA is hidden from torch on purpose). It takes well under a minute.

Command (from the repo root):
    python3 test/parity/make_fixtures.py --out-dir <dir>
"""

import os

# Offline, CPU only, deterministic: set before torch / transformers are imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import argparse
import base64
import json
import math
import shutil
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import safetensors
import tokenizers
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file as st_load_file
from safetensors.torch import save_file as st_save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

SCRIPT_REL = "test/parity/make_fixtures.py"
REFERENCE_DESC = (
    "HF transformers, CPU, float32 compute on bf16-stored weights, eager attention, no KV cache"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE_TARGET = 512
TOP_K = 5

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)

# Weight init (replaces HF's N(0, 0.02) init, which gives nearly flat logits):
#   embeddings and (untied) lm_head            ~ N(0, EMBED_STD^2)
#   o_proj / down_proj (write to the residual)  ~ N(0, (OUT_GAIN / sqrt(in_features))^2)
#   every other Linear weight                   ~ N(0, (LINEAR_GAIN / sqrt(in_features))^2)
#   RMSNorm weights                             = 1 + NORM_JITTER * N(0, 1)
#   Qwen3 q_norm / k_norm weights               = QK_NORM_MEAN * (1 + NORM_JITTER * N(0, 1))
# The large residual writes keep the (tied) embedding from dominating the residual stream
# (otherwise the tiny models just repeat the last token), and the attention scores are
# O(1..4) so RoPE, positions and the causal mask visibly matter. Final logits have a std
# of about 4 (printed per model).
EMBED_STD = 0.5
LINEAR_GAIN = 1.5
OUT_GAIN = 4.0
NORM_JITTER = 0.2
QK_NORM_MEAN = 2.0

LLAMA_ROPE_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}


def log(msg=""):
    print(msg, flush=True)


def banner(msg):
    log()
    log("=" * 78)
    log(msg)
    log("=" * 78)


# --------------------------------------------------------------------------- tokenizer


def train_tokenizer(corpus_text):
    tok = Tokenizer(models.BPE())
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    # ByteLevel post-processor only fixes offsets; it never adds tokens (same settings as
    # Qwen2/Qwen3's tokenizer.json).
    try:
        tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    except TypeError:  # older tokenizers without these kwargs
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE_TARGET,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([corpus_text], trainer=trainer, length=1)
    return tok


def check_tokenizer(tok, corpus_text):
    V = tok.get_vocab_size()
    log(f"vocab size (with special tokens): {V}")
    for i, t in enumerate(SPECIAL_TOKENS):
        tid = tok.token_to_id(t)
        assert tid == i, f"special token {t!r} has id {tid}, expected {i}"
    # Round trip on the whole corpus.
    enc = tok.encode(corpus_text)
    dec = tok.decode(enc.ids, skip_special_tokens=False)
    assert dec == corpus_text, "tokenizer round trip of the corpus failed"
    log(f"corpus: {len(corpus_text)} chars -> {len(enc.ids)} tokens; round trip OK")
    # Special tokens are recognised inside text and nothing is added around the text.
    chat = "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.encode(chat).ids
    assert ids[0] == 1 and ids.count(1) == 2 and ids.count(2) == 1, ids
    assert tok.decode(ids, skip_special_tokens=False) == chat
    log(f"chat sample -> {ids}")
    assert tok.encode("").ids == [], "tokenizer adds tokens to empty input"
    return V


def write_tokenizer_files(tok, model_dir, model_max_length):
    model_dir = Path(model_dir)
    tok.save(str(model_dir / "tokenizer.json"))
    added = {}
    for i, t in enumerate(SPECIAL_TOKENS):
        added[str(i)] = {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "model_max_length": model_max_length,
        "chat_template": CHATML_TEMPLATE,
    }
    with open(model_dir / "tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")


def check_hf_tokenizer(model_dir, tok, prompts):
    """Non-fatal: load the folder with transformers' AutoTokenizer and compare."""
    try:
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(str(model_dir))
        log(f"AutoTokenizer -> {type(hf).__name__}, eos={hf.eos_token!r}, pad={hf.pad_token!r}")
        for p in prompts:
            a = tok.encode(p).ids
            b = hf(p, add_special_tokens=True)["input_ids"]
            if a != b:
                log(f"WARNING: AutoTokenizer ids differ for prompt {p[:30]!r}: {a[:10]} vs {b[:10]}")
        msgs = [{"role": "user", "content": "Hello"}]
        rendered = hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        log(f"chat template renders: {rendered!r}")
        expect = "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
        if rendered != expect:
            log(f"WARNING: chat template rendered {rendered!r}, expected {expect!r}")
    except Exception as e:  # noqa: BLE001
        log(f"WARNING: AutoTokenizer check failed (fixtures still usable): {type(e).__name__}: {e}")


# --------------------------------------------------------------------------- prompts


def is_boundary_token(tok, tid):
    s = tok.id_to_token(tid)
    # 'Ġ' = space, 'Ċ' = \n, 'ĉ' = \t in the byte-level alphabet.
    return s is not None and s[:1] in ("Ġ", "Ċ", "ĉ")


def prompt_from(tok, segment, target):
    """A prefix of `segment` of about `target` tokens, cut before a word boundary."""
    ids = tok.encode(segment).ids
    assert len(ids) > target + 20, "corpus segment too short"
    best = None
    # Try lengths closest to the target first: target, target+1, target-1, target+2, ...
    cands = sorted(range(max(target - 6, 1), target + 13), key=lambda n: (abs(n - target), n))
    for n in cands:
        if n < len(ids) and is_boundary_token(tok, ids[n]):
            text = tok.decode(ids[:n], skip_special_tokens=False)
            if text and not text[-1].isspace():
                best = text
                break
    if best is None:
        best = tok.decode(ids[:target], skip_special_tokens=False)
    return best


def pick_prompts(tok, corpus_text):
    prompts = []
    # ~1 token.
    one = None
    for cand in ("The", "the", "License", "This", "You"):
        if len(tok.encode(cand).ids) == 1:
            one = cand
            break
    if one is None:  # fall back to any purely alphabetic vocab entry without a space
        for t, i in sorted(tok.get_vocab().items(), key=lambda kv: kv[1]):
            if i >= len(SPECIAL_TOKENS) and t.isalpha() and t.isascii() and len(t) >= 3:
                one = t
                break
    prompts.append(one)

    def seg(anchor, frac):
        k = corpus_text.find(anchor)
        if k < 0:
            k = int(len(corpus_text) * frac)
        return corpus_text[k : k + 4000]

    prompts.append(prompt_from(tok, seg("All rights granted under this License", 0.2), 7))
    prompts.append(prompt_from(tok, seg('"Legal Entity" shall mean', 0.4), 30))
    # Starts with indentation and spans several lines (tests whitespace/newline handling).
    prompts.append(prompt_from(tok, seg("  The GNU General Public License is a free", 0.6), 90))
    return prompts


# --------------------------------------------------------------------------- models


def rope_fields(d):
    keys = ("rope_parameters", "rope_scaling", "rope_theta", "head_dim", "max_position_embeddings",
            "tie_word_embeddings", "torch_dtype", "dtype", "use_sliding_window", "sliding_window",
            "layer_types", "bos_token_id", "eos_token_id", "pad_token_id")
    return {k: d[k] for k in keys if k in d}


def make_config(kind, V):
    if kind == "tiny-llama":
        cfg = LlamaConfig(
            vocab_size=V,
            hidden_size=64,
            intermediate_size=160,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            max_position_embeddings=256,
            rms_norm_eps=1e-5,
            rope_theta=500000.0,
            rope_scaling=dict(LLAMA_ROPE_SCALING),  # copy: HF mutates it
            tie_word_embeddings=False,
            attention_bias=False,
            mlp_bias=False,
            hidden_act="silu",
            bos_token_id=0,
            eos_token_id=2,
        )
    elif kind == "tiny-qwen3":
        cfg = Qwen3Config(
            vocab_size=V,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            max_position_embeddings=256,
            rms_norm_eps=1e-6,
            rope_theta=1000000.0,
            tie_word_embeddings=True,
            hidden_act="silu",
            eos_token_id=2,
            use_sliding_window=False,
        )
    else:
        raise ValueError(kind)
    return cfg


def model_class(kind):
    return {"tiny-llama": LlamaForCausalLM, "tiny-qwen3": Qwen3ForCausalLM}[kind]


@torch.no_grad()
def init_weights(model, seed):
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    counts = {"embed": 0, "lm_head": 0, "linear": 0, "norm": 0}
    for name, p in model.named_parameters():  # shared (tied) params appear once
        if name.endswith("embed_tokens.weight"):
            p.copy_(torch.randn(p.shape, generator=g) * EMBED_STD)
            counts["embed"] += 1
        elif name.endswith("lm_head.weight"):
            p.copy_(torch.randn(p.shape, generator=g) * EMBED_STD)
            counts["lm_head"] += 1
        elif "norm" in name and p.dim() == 1:
            mean = QK_NORM_MEAN if ("q_norm" in name or "k_norm" in name) else 1.0
            p.copy_(mean * (1.0 + NORM_JITTER * torch.randn(p.shape, generator=g)))
            counts["norm"] += 1
        elif p.dim() == 2:
            gain = OUT_GAIN if ("o_proj" in name or "down_proj" in name) else LINEAR_GAIN
            std = gain / math.sqrt(p.shape[1])
            p.copy_(torch.randn(p.shape, generator=g) * std)
            counts["linear"] += 1
        else:
            raise RuntimeError(f"unexpected parameter {name} {tuple(p.shape)}")
    return counts


def build_model(kind, V, seed):
    torch.manual_seed(seed)
    np.random.seed(seed)
    cfg = make_config(kind, V)
    model = model_class(kind)(cfg)
    model.eval()
    counts = init_weights(model, seed)
    log(f"[{kind}] seed {seed}: built {type(model).__name__}, "
        f"{sum(p.numel() for p in model.parameters())} params, init counts {counts}")
    return model


def save_model(kind, model, model_dir):
    """Save in bf16. tiny-llama: 2-3 shards; tiny-qwen3: one file."""
    model_dir = Path(model_dir)
    bf16 = model.to(torch.bfloat16)
    total = sum(p.numel() * 2 for p in bf16.state_dict().values())
    if kind == "tiny-llama":
        chosen = None
        for frac in (0.45, 0.5, 0.4, 0.55, 0.6, 0.35, 0.7, 0.3):
            shard = int(total * frac)
            if model_dir.exists():
                shutil.rmtree(model_dir)
            model_dir.mkdir(parents=True)
            bf16.save_pretrained(str(model_dir), max_shard_size=shard)
            n = len(list(model_dir.glob("model-*-of-*.safetensors")))
            log(f"[{kind}] save_pretrained(max_shard_size={shard}) of ~{total} bytes -> {n} shard(s)")
            if 2 <= n <= 3 and (model_dir / "model.safetensors.index.json").exists():
                chosen = shard
                break
        if chosen is None:
            raise RuntimeError("could not get 2-3 shards from save_pretrained")
    else:
        if model_dir.exists():
            shutil.rmtree(model_dir)
        model_dir.mkdir(parents=True)
        bf16.save_pretrained(str(model_dir), max_shard_size="1GB")
        assert (model_dir / "model.safetensors").exists(), "expected a single model.safetensors"
        assert not (model_dir / "model.safetensors.index.json").exists()
    return total


def checkpoint_tensors(model_dir):
    """name -> (dtype str, shape, file) over all safetensors files in the folder."""
    out = {}
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as sf:
            for k in sf.keys():
                sl = sf.get_slice(k)
                out[k] = (sl.get_dtype(), tuple(sl.get_shape()), f.name)
    return out


def fix_tied_checkpoint(model_dir):
    """Make sure the tied qwen3 checkpoint holds no lm_head tensor."""
    f = Path(model_dir) / "model.safetensors"
    tensors = checkpoint_tensors(model_dir)
    if "lm_head.weight" not in tensors:
        log("[tiny-qwen3] tied checkpoint: no lm_head.weight tensor (as intended)")
        return
    sd = st_load_file(str(f))
    same = torch.equal(sd["lm_head.weight"], sd["model.embed_tokens.weight"])
    log(f"NOTE: HF wrote lm_head.weight into the tied checkpoint (equal to embed_tokens: {same}); "
        "removing it so the fixture exercises tied-embedding loading")
    if not same:
        raise RuntimeError("tied checkpoint has an lm_head.weight that differs from embed_tokens")
    del sd["lm_head.weight"]
    st_save_file(sd, str(f), metadata={"format": "pt"})


def reload_model(model_dir):
    m = AutoModelForCausalLM.from_pretrained(
        str(model_dir), dtype=torch.float32, attn_implementation="eager"
    )
    m.to("cpu")
    m.eval()
    return m


@torch.no_grad()
def check_reload(kind, orig_bf16, reloaded):
    """The reloaded fp32 weights must equal the bf16 weights exactly."""
    a = {k: v for k, v in orig_bf16.state_dict().items()}
    b = {k: v for k, v in reloaded.state_dict().items()}
    assert set(a) == set(b), f"state dict keys differ: {set(a) ^ set(b)}"
    for k in a:
        assert b[k].dtype == torch.float32, f"{k} reloaded as {b[k].dtype}"
        if not torch.equal(a[k].float(), b[k]):
            raise RuntimeError(f"[{kind}] reloaded weight {k} differs from the saved bf16 weight")
    if kind == "tiny-qwen3":
        emb = reloaded.model.embed_tokens.weight
        head = reloaded.lm_head.weight
        log(f"[{kind}] reloaded lm_head shares embed_tokens storage: "
            f"{head.data_ptr() == emb.data_ptr()}, equal: {torch.equal(head, emb)}")
        assert torch.equal(head, emb), "tied lm_head != embed_tokens after reload"
    else:
        assert not torch.equal(reloaded.lm_head.weight, reloaded.model.embed_tokens.weight)
    log(f"[{kind}] reload check OK: {len(a)} tensors, fp32, bit-equal to bf16 upcast")


def expected_inv_freq(theta, dim, scaling=None):
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float) / dim))
    if scaling is None:
        return inv, inv
    factor = scaling["factor"]
    lo = scaling["low_freq_factor"]
    hi = scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    low_wl = old / lo
    high_wl = old / hi
    wl = 2 * math.pi / inv
    out = torch.where(wl > low_wl, inv / factor, inv)
    smooth = (old / wl - lo) / (hi - lo)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = ~(wl < high_wl) * ~(wl > low_wl)
    out = torch.where(medium, smoothed, out)
    return inv, out


def check_rope(kind, model):
    cfg = model.config
    d = cfg.to_dict()
    log(f"[{kind}] config rope fields (as HF holds them): {json.dumps(rope_fields(d))}")
    rot = model.model.rotary_emb
    inv = rot.inv_freq.detach().float().cpu()
    log(f"[{kind}] rotary: rope_type={getattr(rot, 'rope_type', '?')}, "
        f"attention_scaling={getattr(rot, 'attention_scaling', '?')}")
    if kind == "tiny-llama":
        unscaled, expect = expected_inv_freq(500000.0, 16, LLAMA_ROPE_SCALING)
    else:
        unscaled, expect = expected_inv_freq(1000000.0, 32, None)
    torch.set_printoptions(precision=8, linewidth=160)
    log(f"[{kind}] unscaled inv_freq: {unscaled}")
    log(f"[{kind}] model    inv_freq: {inv}")
    log(f"[{kind}] ratio model/unscaled: {inv / unscaled}")
    if not torch.allclose(inv, expect, rtol=1e-6, atol=0):
        raise RuntimeError(f"[{kind}] model inv_freq differs from the expected formula: {expect}")
    if kind == "tiny-llama":
        ratio = inv / unscaled
        n_same = int((ratio - 1).abs().lt(1e-6).sum())
        n_div = int((ratio - 1 / 8).abs().lt(1e-6).sum())
        n_mid = len(ratio) - n_same - n_div
        log(f"[{kind}] llama3 scaling: {n_same} unchanged, {n_mid} smoothed, {n_div} divided by 8")
        if not (n_same >= 1 and n_mid >= 1 and n_div >= 1):
            raise RuntimeError("llama3 scaling does not exercise all three frequency bands")
        assert getattr(rot, "rope_type", "llama3") == "llama3"
    log(f"[{kind}] RoPE check OK")


# --------------------------------------------------------------------------- reference


@torch.no_grad()
def greedy_reference(model, prompt_ids, n_new, top_k):
    ids = list(prompt_ids)
    out, tops, logits_b64, margins = [], [], [], []
    for _ in range(n_new):
        x = torch.tensor([ids], dtype=torch.long)
        logits = model(input_ids=x, use_cache=False).logits[0, -1].to(torch.float32)
        logprobs = torch.log_softmax(logits, dim=-1)
        nxt = int(torch.argmax(logits).item())
        top2 = torch.topk(logits, 2).values
        margins.append(float(top2[0] - top2[1]))
        tv, ti = torch.topk(logprobs, top_k)
        if int(ti[0]) != nxt:  # exact tie; keep argmax first
            log("WARNING: topk/argmax order disagree (exact tie)")
        tops.append([[int(i), float(v)] for i, v in zip(ti.tolist(), tv.tolist())])
        arr = logits.detach().cpu().numpy().astype("<f4", copy=False)
        logits_b64.append(base64.b64encode(arr.tobytes()).decode("ascii"))
        out.append(nxt)
        ids.append(nxt)
    return out, tops, logits_b64, margins


def run_reference(kind, model, tok, prompts, n_new):
    cases, all_margins = [], []
    for p in prompts:
        pids = tok.encode(p).ids
        out, tops, b64, margins = greedy_reference(model, pids, n_new, TOP_K)
        all_margins.extend(margins)
        cases.append({
            "prompt": p,
            "prompt_ids": pids,
            "output_ids": out,
            "top_logprobs": tops,
            "logits_f32_base64": b64,
        })
        log(f"[{kind}] prompt {len(pids):3d} tok {p[:40]!r}")
        log(f"[{kind}]   -> {out}  {tok.decode(out, skip_special_tokens=False)!r}")
        log(f"[{kind}]   top1-top2 logit margins: {' '.join(f'{m:.4f}' for m in margins)}"
            f"  (min {min(margins):.5f})")
    return cases, min(all_margins)


@torch.no_grad()
def logit_stats(kind, model, ids):
    logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
    last = logits[-1]
    log(f"[{kind}] logits for a {len(ids)}-token prompt: std(all positions)={logits.std().item():.3f}, "
        f"last position std={last.std().item():.3f}, max={last.max().item():.3f}, "
        f"min={last.min().item():.3f}")
    lp = torch.log_softmax(last, -1)
    log(f"[{kind}] last position: top-1 prob={lp.max().exp().item():.3f}, "
        f"entropy={-(lp.exp() * lp).sum().item():.3f} nats (uniform={math.log(len(last)):.3f})")


def make_one_model(kind, V, seed, model_dir, tok, prompts, n_new):
    model = build_model(kind, V, seed)
    log(f"[{kind}] built config rope fields: {json.dumps(rope_fields(model.config.to_dict()))}")
    if kind == "tiny-qwen3":
        log(f"[{kind}] lm_head tied to embed_tokens in built model: "
            f"{model.lm_head.weight is model.model.embed_tokens.weight}")
    total = save_model(kind, model, model_dir)  # model is bf16 after this
    if kind == "tiny-qwen3":
        fix_tied_checkpoint(model_dir)
    tensors = checkpoint_tensors(model_dir)
    dtypes = sorted({v[0] for v in tensors.values()})
    files = sorted({v[2] for v in tensors.values()})
    log(f"[{kind}] checkpoint: {len(tensors)} tensors, dtypes {dtypes}, files {files}, ~{total} bytes")
    assert dtypes == ["BF16"], f"checkpoint dtypes {dtypes}"
    with open(Path(model_dir) / "config.json", encoding="utf-8") as f:
        saved_cfg = json.load(f)
    log(f"[{kind}] config.json as written: {json.dumps(rope_fields(saved_cfg))}")
    reloaded = reload_model(model_dir)
    log(f"[{kind}] reloaded: attn_implementation={reloaded.config._attn_implementation}, "
        f"dtype={next(reloaded.parameters()).dtype}, device={next(reloaded.parameters()).device}")
    check_reload(kind, model, reloaded)
    check_rope(kind, reloaded)
    logit_stats(kind, reloaded, tok.encode(prompts[-1]).ids)
    cases, min_margin = run_reference(kind, reloaded, tok, prompts, n_new)
    return cases, min_margin


# --------------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", required=True, help="output folder (created; its models/ and parity/ are replaced)")
    ap.add_argument("--corpus", default=str(Path(__file__).resolve().parent / "corpus.txt"))
    ap.add_argument("--new-tokens", type=int, default=12)
    ap.add_argument("--seeds", type=int, default=10, help="try seeds 0..N-1 until no near tie")
    ap.add_argument("--min-margin", type=float, default=1e-3, help="smallest acceptable top1-top2 logit gap")
    args = ap.parse_args()

    t0 = time.time()
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True)

    versions = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
    }
    banner("make_fixtures: versions")
    log(f"python {sys.version.split()[0]}, {json.dumps(versions)}, safetensors {safetensors.__version__}, "
        f"numpy {np.__version__}")
    if not transformers.__version__.startswith("5."):
        log("WARNING: this script was written for transformers 5.x")

    out = Path(args.out_dir).resolve()
    models_dir = out / "models"
    parity_dir = out / "parity"
    for d in (models_dir, parity_dir):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)

    banner("tokenizer")
    corpus_text = Path(args.corpus).read_text(encoding="utf-8")
    tok = train_tokenizer(corpus_text)
    V = check_tokenizer(tok, corpus_text)
    prompts = pick_prompts(tok, corpus_text)
    for p in prompts:
        log(f"prompt ({len(tok.encode(p).ids)} tokens): {p!r}")

    summary = []
    for kind in ("tiny-llama", "tiny-qwen3"):
        banner(kind)
        model_dir = models_dir / kind
        tried = []
        chosen = None
        for seed in range(args.seeds):
            cases, mm = make_one_model(kind, V, seed, model_dir, tok, prompts, args.new_tokens)
            tried.append((seed, mm))
            if mm >= args.min_margin:
                chosen = (seed, cases, mm)
                log(f"[{kind}] seed {seed}: min margin {mm:.5f} >= {args.min_margin} -> keep")
                break
            log(f"WARNING: [{kind}] seed {seed}: near tie (min margin {mm:.6f} < {args.min_margin}); next seed")
        if chosen is None:
            best_seed = max(tried, key=lambda t: t[1])[0]
            log(f"WARNING: [{kind}] no seed gave min margin >= {args.min_margin}; using best seed {best_seed}")
            cases, mm = make_one_model(kind, V, best_seed, model_dir, tok, prompts, args.new_tokens)
            chosen = (best_seed, cases, mm)
        seed, cases, mm = chosen
        write_tokenizer_files(tok, model_dir, model_max_length=256)
        check_hf_tokenizer(model_dir, tok, prompts)
        doc = {
            "generator": SCRIPT_REL,
            "versions": versions,
            "model": kind,
            "reference": REFERENCE_DESC,
            "top_k": TOP_K,
            "cases": cases,
        }
        pj = parity_dir / f"{kind}.json"
        with open(pj, "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"), ensure_ascii=False)
            f.write("\n")
        summary.append((kind, seed, mm, [len(c["prompt_ids"]) for c in cases], tried))

    banner("files")
    total = 0
    for f in sorted(out.rglob("*")):
        if f.is_file():
            sz = f.stat().st_size
            total += sz
            log(f"{sz:>10}  {f.relative_to(out.parent)}")
    log(f"{total:>10}  total")
    tgz = out.parent / (out.name + ".tgz")
    with tarfile.open(tgz, "w:gz") as tf:
        tf.add(str(out), arcname=out.name)
    log(f"{tgz.stat().st_size:>10}  {tgz}")

    banner("summary")
    log(f"tokenizer: byte-level BPE, vocab {V}, specials {SPECIAL_TOKENS} = ids 0,1,2")
    for kind, seed, mm, plens, tried in summary:
        flag = "OK" if mm >= args.min_margin else "NEAR TIE!"
        log(f"{kind}: seed {seed}, prompt lengths {plens}, {args.new_tokens} new tokens each, "
            f"min top1-top2 logit margin {mm:.5f} [{flag}] (seeds tried: "
            f"{', '.join(f'{s}:{m:.5f}' for s, m in tried)})")
    log(f"output: {out}  and  {tgz}")
    log(f"done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
