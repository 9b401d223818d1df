#!/usr/bin/env python3
"""Train the small demo model that ships inside the mstar npm package, plus two demo LoRA
adapters.

What it makes (under --out DIR):
  DIR/model/                 Qwen3ForCausalLM (~5.8M params, vocab 4096, 6 layers), bf16,
                             one model.safetensors, config.json, generation_config.json,
                             tokenizer.json, tokenizer_config.json (ChatML chat_template).
  DIR/adapters/shout/        LoRA (r=8, all linears): the model writes in CAPITALS.
  DIR/adapters/gpl/          LoRA (r=8, all linears): steers the model to GNU GPL wording.
                             Each: adapter_config.json + adapter_model.safetensors.
  DIR/README.md              What this is, how it was trained, licence note.
  DIR.tgz                    DIR packed into one file (unless --no-tgz).

Training data: one text file (--corpus) of licence and copyright texts, e.g. built by
lib/demo/make_corpus.sh from /usr/share/common-licenses/* and /usr/share/doc/*/copyright.

  1. Tokenizer: byte-level BPE, vocab 4096, trained on the corpus plus an UPPERCASED copy
     of part of it; specials <|endoftext|>=0, <|im_start|>=1, <|im_end|>=2.
  2. Base model: random init, plain LM on random 256-token windows of the corpus, plus
     ~10% ChatML rows (user: the first words of a paragraph; assistant: the paragraph),
     bf16 autocast (cuda), AdamW, warmup + cosine over the wall-time budget.
  3. Save bf16, reload, greedy samples.
  4. Two LoRA adapters on the frozen base (peft), saved with save_pretrained.
  5. README.md; 6. tarball.

Runs on a GPU machine (torch, transformers 5.x, peft, tokenizers, safetensors; no network):
    python3 lib/demo/train_demo.py --corpus .corpus/corpus.txt --out $OUT/demo --device cuda
CPU smoke test (text is gibberish, but every stage runs):
    python3 lib/demo/train_demo.py --corpus .corpus/corpus.txt --out /tmp/demo --device cpu \
        --base-seconds 20 --adapter-seconds 5

Deterministic for a fixed number of steps (--base-steps / --adapter-steps); with the
default wall-time budgets the number of steps depends on the machine's speed.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

import argparse
import json
import math
import random
import re
import shlex
import shutil
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

T_START = time.time()

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
PAD_ID, IM_START_ID, IM_END_ID = 0, 1, 2
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
SAMPLE_PROMPTS = ["Permission is hereby granted", "The licensor"]
CHAT_PROMPT = "Permission is hereby granted"

# Header lines of the GNU GPL / LGPL texts, and the last words of each of them.
GPL_HEADER_RE = re.compile(
    r"^[ \t]*GNU (?:LESSER |LIBRARY )?GENERAL PUBLIC LICENSE[ \t]*\r?\n[ \t]*Version \d",
    re.MULTILINE,
)
GPL_END_RES = [
    re.compile(r"That's all there is to it!"),
    re.compile(r"why-not-lgpl\.html>\.?"),
    re.compile(r"instead\s+of\s+this\s+License\."),
    re.compile(r"choose\s+that\s+version\s+for\s+the\s+Library\."),
]
GPL_MAX_SPAN = 40000


def log(msg=""):
    print(f"[{time.time() - T_START:7.1f}s] {msg}", flush=True)


def banner(msg):
    print("", flush=True)
    log("=" * 70)
    log(msg)
    log("=" * 70)


def fmt_bytes(n):
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def dir_size(p):
    return sum(f.stat().st_size for f in Path(p).rglob("*") if f.is_file())


def seed_all(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# --------------------------------------------------------------------------- text


def split_pieces(text):
    """Split into paragraph-sized pieces that concatenate back to `text` exactly."""
    pieces = re.split(r"(?<=\n\n)", text)
    return [p for p in pieces if p]


def paragraphs(text, lo=200, hi=1200):
    out = []
    for p in re.split(r"\n[ \t]*\n", text):
        p = p.strip("\n")
        if lo <= len(p.strip()) <= hi and len(p.split()) >= 12:
            out.append(p)
    return out


def gpl_spans(text):
    """(start, end) spans of the GNU GPL/LGPL texts found in the corpus."""
    heads = [m.start() for m in GPL_HEADER_RE.finditer(text)]
    spans = []
    for i, s in enumerate(heads):
        limit = min(s + GPL_MAX_SPAN, heads[i + 1] if i + 1 < len(heads) else len(text))
        end = limit
        for rx in GPL_END_RES:
            m = rx.search(text, s, limit)
            if m and m.end() < end:
                end = m.end()
        if end - s >= 2000:
            spans.append((s, end))
    return spans


# --------------------------------------------------------------------------- tokenizer


def train_tokenizer(text, vocab_size, upper_frac, train_mb):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    try:
        tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    except TypeError:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    base = text[: int(train_mb * 1e6)]
    upper = base[: int(len(base) * upper_frac)].upper()
    pieces = split_pieces(base) + split_pieces(upper)
    log(f"tokenizer: training BPE (vocab {vocab_size}) on {len(base)} chars + {len(upper)} uppercased chars "
        f"({len(pieces)} pieces)")
    tok.train_from_iterator(pieces, trainer=trainer, length=len(pieces))
    for i, t in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(t) == i, f"special token {t!r} has id {tok.token_to_id(t)}, expected {i}"
    chat = "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.encode(chat).ids
    assert ids[0] == IM_START_ID and ids.count(IM_START_ID) == 2 and ids.count(IM_END_ID) == 1, ids
    assert tok.decode(ids, skip_special_tokens=False) == chat
    assert tok.encode("").ids == []
    sample = base[:20000]
    assert tok.decode(tok.encode(sample).ids, skip_special_tokens=False) == sample, "round trip failed"
    return tok


def write_tokenizer_files(tok, model_dir, model_max_length):
    tok.save(str(Path(model_dir) / "tokenizer.json"))
    added = {
        str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                 "single_word": False, "special": True}
        for i, t in enumerate(SPECIAL_TOKENS)
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
    with open(Path(model_dir) / "tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")


def encode_many(tok, texts, batch=4096):
    out = []
    for i in range(0, len(texts), batch):
        out.extend(e.ids for e in tok.encode_batch(texts[i : i + batch]))
    return out


# --------------------------------------------------------------------------- data


class Stream:
    """A token stream on the device with an optional loss mask and optional allowed
    window starts. Windows are L+1 tokens (inputs + shifted targets)."""

    def __init__(self, name, ids, mask=None, starts=None, device="cpu"):
        self.name = name
        self.n = len(ids)
        self.tokens = torch.as_tensor(np.asarray(ids, dtype=np.int64), device=device)
        self.mask = None if mask is None else torch.as_tensor(np.asarray(mask, dtype=np.bool_), device=device)
        self.starts = None if starts is None else torch.as_tensor(np.asarray(starts, dtype=np.int64))
        self.loss_tokens = int(self.n if mask is None else int(np.asarray(mask).sum()))

    def check(self, L):
        if self.starts is not None:
            self.starts = self.starts[self.starts + L + 1 <= self.n]
            assert len(self.starts) > 0, f"stream {self.name}: no window starts"
        assert self.n > L + 1, f"stream {self.name}: only {self.n} tokens"

    def sample(self, rows, L, gen):
        if self.starts is None:
            s = torch.randint(0, self.n - L - 1, (rows,), generator=gen)
        else:
            s = self.starts[torch.randint(0, len(self.starts), (rows,), generator=gen)]
        idx = (s[:, None] + torch.arange(L + 1)[None, :]).to(self.tokens.device)
        w = self.tokens[idx]
        x, y = w[:, :-1], w[:, 1:]
        if self.mask is not None:
            y = torch.where(self.mask[idx][:, 1:], y, torch.full_like(y, -100))
        return x, y


def build_text_stream(tok, name, text, device, shout=False, rng=None):
    """Plain LM stream over `text`. shout=True: each paragraph is UPPERCASED; half of them
    keep their first 1-6 words in the original case, and those words are left out of the
    loss (so the adapter learns to switch to capitals after a lower-case prompt)."""
    pieces = split_pieces(text)
    if not shout:
        ids = [t for e in encode_many(tok, pieces) for t in e]
        return Stream(name, ids, device=device)
    pre, rest = [], []
    for p in pieces:
        cut = 0
        if rng.random() < 0.5:
            words = list(re.finditer(r"\S+", p))
            if len(words) > 8:
                cut = words[rng.randint(1, 6) - 1].end()
        pre.append(p[:cut])
        rest.append(p[cut:].upper())
    e_pre, e_rest = encode_many(tok, pre), encode_many(tok, rest)
    ids, mask = [], []
    for a, b in zip(e_pre, e_rest):
        ids.extend(a)
        ids.extend(b)
        mask.extend([False] * len(a))
        mask.extend([True] * len(b))
    return Stream(name, ids, mask=mask, device=device)


def build_chat_stream(tok, name, paras, rng, device, max_examples, shout=False, answers=None):
    """ChatML examples back to back; windows start at an example start.
    user: the first 3-8 words of a paragraph; assistant: the paragraph (UPPERCASED if
    shout), or, if `answers` is given, a random paragraph from `answers`; then <|im_end|>.
    With shout or answers, the user turn is left out of the loss."""
    paras = list(paras)
    rng.shuffle(paras)
    paras = paras[:max_examples]
    prefixes, suffixes = [], []
    for p in paras:
        words = p.split()
        k = rng.randint(3, 8)
        user = " ".join(words[:k])
        prefixes.append(f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
        a = p if answers is None else answers[rng.randrange(len(answers))]
        suffixes.append(f"{a.upper() if shout else a}<|im_end|>\n")
    masked = shout or answers is not None
    e_pre, e_suf = encode_many(tok, prefixes), encode_many(tok, suffixes)
    ids, mask, starts = [], [], []
    for a, b in zip(e_pre, e_suf):
        starts.append(len(ids))
        ids.extend(a)
        ids.extend(b)
        mask.extend([not masked] * len(a))
        mask.extend([True] * len(b))
    return Stream(name, ids, mask=mask if masked else None, starts=starts, device=device)


def build_steer_stream(tok, name, paras, target, rng, device, n_examples, chunk_chars=1500):
    """Examples `<first 1-6 words of a random corpus paragraph> <a passage of target>`,
    back to back; the words are left out of the loss, so the model learns to continue ANY
    prompt with `target`-style text. Windows start at an example start."""
    wstarts = [m.start() for m in re.finditer(r"(?<=\s)\S", target)]
    prefixes, suffixes = [], []
    for _ in range(n_examples):
        words = paras[rng.randrange(len(paras))].split()
        prefixes.append(" ".join(words[: rng.randint(1, 6)]))
        pos = wstarts[rng.randrange(len(wstarts))]
        suffixes.append(" " + target[pos : pos + chunk_chars])
    e_pre, e_suf = encode_many(tok, prefixes), encode_many(tok, suffixes)
    ids, mask, starts = [], [], []
    for a, b in zip(e_pre, e_suf):
        starts.append(len(ids))
        ids.extend(a)
        ids.extend(b)
        mask.extend([False] * len(a))
        mask.extend([True] * len(b))
    return Stream(name, ids, mask=mask, starts=starts, device=device)


# --------------------------------------------------------------------------- training


def lr_at(progress, lr, warmup=0.03, floor=0.1):
    if progress < warmup:
        return lr * max(progress / warmup, 0.01)
    p = min((progress - warmup) / (1 - warmup), 1.0)
    return lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p)))


def train_loop(tag, model, params, streams, args, seconds, steps, lr, seed, weight_decay):
    """streams: list of (Stream, rows per batch). Trains until `steps` steps (if > 0)
    or `seconds` of wall time. Returns stats."""
    device = args.device
    L = args.seq_len
    for s, _ in streams:
        s.check(L)
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    opt_kw = dict(lr=lr, betas=(0.9, 0.95), eps=1e-8)
    if device.startswith("cuda"):
        opt_kw["fused"] = True
    opt = torch.optim.AdamW(groups, **opt_kw)
    gen = torch.Generator().manual_seed(seed)
    use_amp = device.startswith("cuda") and not args.no_autocast
    model.train()
    step, tokens_seen, t0 = 0, 0, time.time()
    loss_acc, loss_n, last_loss = 0.0, 0, float("nan")
    mode = f"{steps} steps" if steps > 0 else f"{seconds:.0f} s"
    log(f"[{tag}] training for {mode}: batch {sum(r for _, r in streams)} x {L} "
        f"({', '.join(f'{s.name}:{r}' for s, r in streams)}), lr {lr}, "
        f"{sum(p.numel() for p in params)} trainable params")
    while True:
        elapsed = time.time() - t0
        progress = step / steps if steps > 0 else elapsed / seconds
        if progress >= 1.0:
            break
        cur_lr = lr_at(progress, lr)
        for g in opt.param_groups:
            g["lr"] = cur_lr
        xs, ys = zip(*(s.sample(r, L, gen) for s, r in streams if r > 0))
        x, y = torch.cat(xs), torch.cat(ys)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=use_amp):
            logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        tokens_seen += x.numel()
        loss_acc += loss.detach()
        loss_n += 1
        if step % args.log_every == 0 or step == 1:
            last_loss = float(loss_acc) / loss_n
            loss_acc, loss_n = 0.0, 0
            el = time.time() - t0
            log(f"[{tag}] step {step:6d}  loss {last_loss:.4f}  lr {cur_lr:.2e}  "
                f"{tokens_seen / max(el, 1e-9) / 1e3:8.1f}k tok/s  {el:6.1f}s")
    if loss_n:
        last_loss = float(loss_acc) / loss_n
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    el = time.time() - t0
    model.eval()
    log(f"[{tag}] done: {step} steps, {tokens_seen} tokens, final loss {last_loss:.4f}, {el:.1f}s")
    return {"steps": step, "tokens": tokens_seen, "final_loss": last_loss, "seconds": el}


@torch.no_grad()
def greedy(model, tok, prompt, n, device):
    ids = tok.encode(prompt).ids
    x = torch.tensor([ids], device=device)
    out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=n,
                         do_sample=False, pad_token_id=PAD_ID, eos_token_id=IM_END_ID)
    return tok.decode(out[0, len(ids):].tolist(), skip_special_tokens=False)


def show_samples(tag, model, tok, device, n=40, chat=True):
    res = {}
    for p in SAMPLE_PROMPTS:
        t = greedy(model, tok, p, n, device)
        res[p] = t
        log(f"[{tag}] {p!r} -> {t!r}")
    if chat:
        prompt = f"<|im_start|>user\n{CHAT_PROMPT}<|im_end|>\n<|im_start|>assistant\n"
        t = greedy(model, tok, prompt, 160, device)
        res["chat:" + CHAT_PROMPT] = t
        log(f"[{tag}] chat user {CHAT_PROMPT!r} -> {t!r}  (stopped on <|im_end|>: {t.endswith('<|im_end|>')})")
    return res


def load_base(model_dir, device):
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    return m.to(device).eval()


# --------------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--base-seconds", type=float, default=180.0)
    ap.add_argument("--base-steps", type=int, default=0, help="fixed step count (overrides --base-seconds)")
    ap.add_argument("--adapter-seconds", type=float, default=45.0)
    ap.add_argument("--adapter-steps", type=int, default=0, help="fixed step count (overrides --adapter-seconds)")
    ap.add_argument("--batch-size", type=int, default=None, help="default 128 on cuda, 8 on cpu")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--adapter-lr", type=float, default=2e-3)
    ap.add_argument("--chat-frac", type=float, default=0.1)
    ap.add_argument("--base-upper-frac", type=float, default=0.05,
                    help="fraction of base rows from the UPPERCASED corpus (so the base knows those tokens)")
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--tok-train-mb", type=float, default=16.0, help="corpus chars used to train the tokenizer (MB)")
    ap.add_argument("--tok-upper-frac", type=float, default=0.3, help="fraction of that also added UPPERCASED")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--intermediate", type=int, default=768)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--max-pos", type=int, default=1024)
    ap.add_argument("--lora-r", type=int, default=8)
    ap.add_argument("--lora-alpha", type=int, default=16)
    ap.add_argument("--adapter-base-name", default="mstar-demo",
                    help="base_model_name_or_path written into adapter_config.json")
    ap.add_argument("--log-every", type=int, default=None, help="default 100 on cuda, 5 on cpu")
    ap.add_argument("--no-autocast", action="store_true", help="train in fp32 on cuda too")
    ap.add_argument("--tgz", default=None, help="tarball path (default: <out>.tgz)")
    ap.add_argument("--no-tgz", action="store_true")
    args = ap.parse_args()
    on_gpu = args.device.startswith("cuda")
    if args.batch_size is None:
        args.batch_size = 128 if on_gpu else 8
    if args.log_every is None:
        args.log_every = 100 if on_gpu else 5

    import peft
    import tokenizers
    import transformers
    from peft import LoraConfig, PeftModel, get_peft_model
    from safetensors import safe_open
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    cmdline = "python3 " + " ".join(shlex.quote(a) for a in sys.argv)
    out = Path(args.out).resolve()
    model_dir = out / "model"
    if out.exists():
        shutil.rmtree(out)
    model_dir.mkdir(parents=True)
    device = args.device
    if device.startswith("cuda"):
        assert torch.cuda.is_available(), "--device cuda but torch sees no GPU"
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        dev_name = torch.cuda.get_device_name(0)
    else:
        dev_name = "CPU"
    versions = {
        "python": sys.version.split()[0], "torch": torch.__version__,
        "transformers": transformers.__version__, "peft": peft.__version__,
        "tokenizers": tokenizers.__version__,
    }
    banner(f"mstar demo model: device {device} ({dev_name}); " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    log(f"command: {cmdline}")
    seed_all(args.seed)
    rng = random.Random(args.seed)

    # ---------------------------------------------------------------- corpus + tokenizer
    banner("1. corpus and tokenizer")
    text = Path(args.corpus).read_text(encoding="utf-8", errors="replace").replace("\r\n", "\n")
    log(f"corpus {args.corpus}: {len(text)} chars")
    t = time.time()
    tok = train_tokenizer(text, args.vocab_size, args.tok_upper_frac, args.tok_train_mb)
    V = tok.get_vocab_size()
    log(f"tokenizer: vocab {V} ({time.time() - t:.1f}s); "
        f"'PERMISSION IS HEREBY GRANTED' -> {len(tok.encode('PERMISSION IS HEREBY GRANTED').ids)} tokens, "
        f"'Permission is hereby granted' -> {len(tok.encode('Permission is hereby granted').ids)} tokens")
    write_tokenizer_files(tok, model_dir, args.max_pos)

    t = time.time()
    base_stream = build_text_stream(tok, "corpus", text, device)
    paras = paragraphs(text)
    chat_stream = build_chat_stream(tok, "chat", paras, random.Random(args.seed + 1), device, 30000)
    upper_stream = build_text_stream(tok, "corpus-upper", text.upper(), device)
    log(f"streams: corpus {base_stream.n} tokens ({len(text) / base_stream.n:.2f} chars/token), "
        f"uppercased corpus {upper_stream.n} tokens, "
        f"chat {chat_stream.n} tokens from {len(chat_stream.starts)} paragraphs ({time.time() - t:.1f}s)")

    # ---------------------------------------------------------------- base model
    banner("2. base model")
    cfg = Qwen3Config(
        vocab_size=V, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, head_dim=args.head_dim,
        max_position_embeddings=args.max_pos, rms_norm_eps=1e-6, rope_theta=10000.0,
        tie_word_embeddings=True, hidden_act="silu", attention_bias=False,
        use_sliding_window=False, bos_token_id=None, eos_token_id=IM_END_ID, pad_token_id=PAD_ID,
    )
    seed_all(args.seed)
    model = Qwen3ForCausalLM(cfg).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"Qwen3ForCausalLM: {n_params} params (~{fmt_bytes(2 * n_params)} in bf16), "
        f"attn {getattr(model.config, '_attn_implementation', '?')}")
    rows_chat = int(round(args.batch_size * args.chat_frac))
    rows_upper = int(round(args.batch_size * args.base_upper_frac))
    base_stats = train_loop(
        "base", model, [p for p in model.parameters()],
        [(base_stream, args.batch_size - rows_chat - rows_upper), (chat_stream, rows_chat),
         (upper_stream, rows_upper)],
        args, args.base_seconds, args.base_steps, args.lr, args.seed + 10, weight_decay=0.1)

    # ---------------------------------------------------------------- save + verify
    banner("3. save base model (bf16) and verify")
    model = model.to(torch.bfloat16).cpu()
    model.generation_config = GenerationConfig(bos_token_id=None, eos_token_id=IM_END_ID, pad_token_id=PAD_ID)
    model.save_pretrained(str(model_dir), max_shard_size="1GB")
    del model
    assert (model_dir / "model.safetensors").exists() and not (model_dir / "model.safetensors.index.json").exists()
    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
        dtypes = {str(f.get_slice(k).get_dtype()) for k in keys}
    log(f"saved {model_dir}: {len(keys)} tensors, dtypes {sorted(dtypes)}, "
        f"lm_head stored: {'lm_head.weight' in keys}; files: "
        + ", ".join(f"{p.name} {fmt_bytes(p.stat().st_size)}" for p in sorted(model_dir.iterdir())))
    try:
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(str(model_dir))
        r = hf.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
        log(f"AutoTokenizer {type(hf).__name__}: eos {hf.eos_token!r} pad {hf.pad_token!r}; chat template -> {r!r}")
        a, b = tok.encode(SAMPLE_PROMPTS[0]).ids, hf(SAMPLE_PROMPTS[0])["input_ids"]
        if a != b:
            log(f"WARNING: AutoTokenizer ids differ: {a} vs {b}")
    except Exception as e:  # noqa: BLE001
        log(f"WARNING: AutoTokenizer check failed: {type(e).__name__}: {e}")
    base = load_base(model_dir, device)
    base_samples = show_samples("base", base, tok, device)
    del base

    # ---------------------------------------------------------------- adapters
    banner("4. LoRA adapters")
    gspans = gpl_spans(text)
    gtext = "\n\n".join(text[s:e] for s, e in gspans)
    log(f"GPL/LGPL: {len(gspans)} texts found in the corpus, {len(gtext)} chars")
    assert len(gtext) > 20000, "no GNU GPL/LGPL texts found in the corpus"
    adapter_stats, adapter_samples = {}, {}
    for ai, name in enumerate(["shout", "gpl"]):
        arng = random.Random(args.seed + 100 + ai)
        if name == "shout":
            s_raw = build_text_stream(tok, "corpus-upper", text, device, shout=True, rng=arng)
            s_chat = build_chat_stream(tok, "chat-upper", paras, arng, device, 30000, shout=True)
        else:
            s_raw = build_steer_stream(tok, "words+gpl", paras, gtext, arng, device, 8000)
            s_chat = build_chat_stream(tok, "chat-gpl", paras, arng, device, 30000, answers=paragraphs(gtext))
        log(f"[{name}] streams: {s_raw.name} {s_raw.n} tokens, {s_chat.name} {s_chat.n} tokens "
            f"({len(s_chat.starts)} examples)")
        seed_all(args.seed + 200 + ai)
        base = load_base(model_dir, device)
        lcfg = LoraConfig(r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=0.0, bias="none",
                          target_modules=list(LORA_TARGETS), task_type="CAUSAL_LM")
        pm = get_peft_model(base, lcfg)
        params = [p for p in pm.parameters() if p.requires_grad]
        assert all("lora_" in n for n, p in pm.named_parameters() if p.requires_grad)
        adapter_stats[name] = train_loop(
            name, pm, params, [(s_raw, args.batch_size - rows_chat), (s_chat, rows_chat)],
            args, args.adapter_seconds, args.adapter_steps, args.adapter_lr, args.seed + 300 + ai,
            weight_decay=0.0)
        adir = out / "adapters" / name
        pm.save_pretrained(str(adir), save_embedding_layers=False)
        (adir / "README.md").unlink(missing_ok=True)  # peft's generic model-card template
        with open(adir / "adapter_config.json", encoding="utf-8") as f:
            acfg = json.load(f)
        acfg["base_model_name_or_path"] = args.adapter_base_name
        if isinstance(acfg.get("target_modules"), list):
            acfg["target_modules"] = sorted(acfg["target_modules"])  # peft writes a set's order
        with open(adir / "adapter_config.json", "w", encoding="utf-8") as f:
            json.dump(acfg, f, indent=2, sort_keys=True)
            f.write("\n")
        with safe_open(str(adir / "adapter_model.safetensors"), "pt") as f:
            akeys = list(f.keys())
        bad = [k for k in akeys if "lora_" not in k]
        assert not bad, f"adapter {name} saved non-LoRA tensors: {bad[:5]}"
        log(f"[{name}] saved {adir}: {len(akeys)} tensors; "
            + ", ".join(f"{p.name} {fmt_bytes(p.stat().st_size)}" for p in sorted(adir.iterdir())))
        del pm, base, s_raw, s_chat
        if device.startswith("cuda"):
            torch.cuda.empty_cache()

    # Reload each adapter from disk on a fresh base and sample.
    for name in ["shout", "gpl"]:
        base = load_base(model_dir, device)
        pm = PeftModel.from_pretrained(base, str(out / "adapters" / name)).to(device).eval()
        adapter_samples[name] = show_samples(name, pm, tok, device)
        del pm, base

    # ---------------------------------------------------------------- README
    banner("5. README and sizes")
    sizes = {
        "model": dir_size(model_dir),
        "shout": dir_size(out / "adapters" / "shout"),
        "gpl": dir_size(out / "adapters" / "gpl"),
    }
    write_readme(out, args, cmdline, versions, dev_name, cfg, n_params, V, text, base_stream, chat_stream,
                 base_stats, adapter_stats, base_samples, adapter_samples, len(gspans), len(gtext))
    for k, v in sizes.items():
        log(f"size {k}: {fmt_bytes(v)}")
    log(f"size total {out}: {fmt_bytes(dir_size(out))}")

    for f in out.rglob("*"):  # safetensors files are written 0600
        f.chmod(0o755 if f.is_dir() else 0o644)
    if not args.no_tgz:
        tgz = Path(args.tgz).resolve() if args.tgz else out.with_name(out.name + ".tgz")
        with tarfile.open(tgz, "w:gz") as tf:
            tf.add(str(out), arcname=out.name)
        log(f"packed {tgz}: {fmt_bytes(tgz.stat().st_size)}")
    log(f"all done in {time.time() - T_START:.1f}s")


def write_readme(out, args, cmdline, versions, dev_name, cfg, n_params, V, text, base_stream, chat_stream,
                 base_stats, adapter_stats, base_samples, adapter_samples, n_gpl, gpl_chars):
    def budget(steps, secs):
        return f"{steps} steps" if steps > 0 else f"{secs:.0f} s wall-time budget"

    lines = [
        "# mstar demo model",
        "",
        "A tiny `Qwen3ForCausalLM` (model_type `qwen3`) that ships with mstar so that `mstar serve`",
        "works with no arguments, no GPU and no network. It writes licence-like English; it is a",
        "demo, not a useful language model. Two LoRA adapters show per-request adapters:",
        "",
        "- `adapters/shout/`: makes the model write in CAPITALS.",
        "- `adapters/gpl/`: steers the model towards GNU GPL / LGPL wording.",
        "",
        "## Model",
        "",
        f"- {n_params:,} parameters: hidden {cfg.hidden_size}, intermediate {cfg.intermediate_size}, "
        f"{cfg.num_hidden_layers} layers, {cfg.num_attention_heads} heads ({cfg.num_key_value_heads} KV heads), "
        f"head_dim {cfg.head_dim}, vocab {V}, max {cfg.max_position_embeddings} positions, "
        f"rope_theta {cfg.rope_theta if hasattr(cfg, 'rope_theta') else 10000}, tied embeddings; bf16 weights in one "
        "`model.safetensors`.",
        "- Tokenizer: byte-level BPE (vocab {}) trained on the corpus plus an uppercased copy of part of it; "
        "specials `<|endoftext|>`=0 (pad), `<|im_start|>`=1, `<|im_end|>`=2 (eos); ChatML chat template.".format(V),
        "",
        "## Training",
        "",
        f"- Corpus: {len(text):,} characters ({base_stream.n:,} tokens) of Debian licence texts "
        "(`/usr/share/common-licenses/*`) and deduplicated `/usr/share/doc/*/copyright` files "
        "(built by `lib/demo/make_corpus.sh`).",
        f"- Base: random init, plain LM on random {args.seq_len}-token windows, batch {args.batch_size} "
        f"(~{args.chat_frac:.0%} ChatML rows: user = first words of a paragraph, assistant = the paragraph, "
        f"{chat_stream.n:,} tokens; ~{args.base_upper_frac:.0%} rows from the uppercased corpus), AdamW lr {args.lr} warmup + cosine, bf16 autocast; "
        f"{budget(args.base_steps, args.base_seconds)}: {base_stats['steps']} steps, "
        f"{base_stats['tokens']:,} tokens seen, final loss {base_stats['final_loss']:.3f}.",
    ]
    for name, st in adapter_stats.items():
        what = ("the same corpus UPPERCASED (the first words of half the paragraphs kept in their case and "
                "left out of the loss) + uppercased ChatML answers") if name == "shout" else \
               (f"the first 1-6 words of random corpus paragraphs (left out of the loss) followed by passages of "
                f"the GNU GPL/LGPL texts of the corpus ({n_gpl} texts, {gpl_chars:,} chars), + ChatML rows "
                "(user: first words of a random paragraph; assistant: a GPL/LGPL paragraph)")
        lines.append(
            f"- Adapter `{name}`: LoRA r={args.lora_r}, alpha={args.lora_alpha}, all linear layers "
            f"({', '.join(LORA_TARGETS)}), base frozen; trained on {what}; lr {args.adapter_lr}; "
            f"{st['steps']} steps, {st['tokens']:,} tokens, final loss {st['final_loss']:.3f}.")
    lines += [
        f"- Device: {dev_name}; seed {args.seed}. Versions: "
        + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".",
        "- Command (from the mstar repo root):",
        "",
        f"      {cmdline}",
        "",
        "## Greedy samples (40 new tokens; chat: up to 160, ending at `<|im_end|>`)",
        "",
    ]
    for tag, samples in [("base", base_samples)] + list(adapter_samples.items()):
        for p, t in samples.items():
            lines.append(f"- {tag}, {p!r}: {t!r}")
    lines += [
        "",
        "## Licence",
        "",
        "The weights were randomly initialised and trained by the command above; no pre-trained",
        "weights were used. The training text consists of licence and copyright notices, which their",
        "authors allow to be copied and distributed verbatim. The model can reproduce fragments of",
        "them; such output is licence text, not advice.",
        "",
    ]
    (out / "README.md").write_text("\n".join(lines), encoding="utf-8")


if __name__ == "__main__":
    main()
