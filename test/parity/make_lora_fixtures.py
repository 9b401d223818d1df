#!/usr/bin/env python3
"""Make the LoRA parity fixtures for mstar (run after make_fixtures.py, same --out-dir).

What it makes (under --out-dir DIR, which must already hold make_fixtures.py's output):
  DIR/adapters/<model>/<adapter>/   PEFT LoRA adapters (adapter_config.json +
                                    adapter_model.safetensors, written by PEFT's
                                    save_pretrained) for tiny-llama and tiny-qwen3:
      qv-r4            r=4,  alpha=8,  q_proj + v_proj
      all-r8-rslora    r=8,  alpha=16, use_rslora, all 7 linears of each layer
      mlp-r16          r=16, alpha=8,  gate/up/down_proj, rank_pattern/alpha_pattern give
                       layers.1.mlp.down_proj r=2, alpha=4
      embed-head       r=4,  alpha=4,  embed_tokens + lm_head + k_proj (PEFT also saves
                       full copies of the base embed_tokens / lm_head weights)
      regex-layers     (tiny-llama) target_modules regex
                       '.*\\.layers\\.[02]\\.self_attn\\.(q|o)_proj', r=2, alpha=16
      layers-to-transform
                       (tiny-qwen3) q/k/v/o_proj, layers_to_transform=[1], r=6, alpha=12
  DIR/adapters/bad/<name>/          adapters (based on tiny-llama) that a server must refuse,
                                    with DIR/adapters/bad/README.md saying why.
  DIR/parity/lora-<model>.json      Greedy reference decodes of base+adapter (12 new tokens
                                    for each of the 4 prompts of DIR/parity/<model>.json):
                                    output_ids and top-5 logprobs at every step, float32
                                    logits for the first 3 steps only.
                                    Reference = HF transformers + PEFT on CPU, float32
                                    compute on the bf16-stored base weights, adapter
                                    reloaded from disk with PeftModel.from_pretrained,
                                    eager attention, no KV cache.
  DIR.tgz                           DIR packed again (replaces make_fixtures.py's tgz).

PEFT initialises lora_B to zero (a no-op adapter), so every lora_A / lora_B (and
lora_embedding_A / lora_embedding_B) is overwritten with seeded random values, scaled per
module so that the effective delta (scaling * B @ A) has a std of about REL_DELTA times the
std of the base weight, then rounded to bf16-representable values (the files are float32,
as PEFT writes them for a float32 model, but a bf16 engine loses nothing converting them).
Seeds are tried until the adapter's greedy tokens differ from the base model's in at
least --min-diff positions (over the 4 prompts) and no top1-top2 logit gap is below
--min-margin (else the seed with the largest smallest gap is used, with a warning).

Where it runs: python3 with torch 2.x, transformers 5.x, peft 0.21+, safetensors, numpy;
CPU only, no network. Takes about a minute.

Command (from the repo root):
    python3 test/parity/make_fixtures.py --out-dir <dir>
    python3 test/parity/make_lora_fixtures.py --out-dir <dir>
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import argparse
import base64
import copy
import json
import math
import shutil
import sys
import tarfile
import time
import warnings
from pathlib import Path

import numpy as np
import peft
import safetensors
import torch
import transformers
from peft import LoraConfig, PeftModel, PromptTuningConfig, get_peft_model
from peft.tuners.lora import LoraLayer
from safetensors import safe_open
from safetensors.torch import load_file as st_load_file
from safetensors.torch import save_file as st_save_file
from transformers import AutoModelForCausalLM

SCRIPT_REL = "test/parity/make_lora_fixtures.py"
REFERENCE_DESC = (
    "HF transformers + PEFT (adapter reloaded with PeftModel.from_pretrained), CPU, float32 compute "
    "on bf16-stored base weights and bf16-representable float32 LoRA weights, eager attention, "
    "no KV cache"
)
TOP_K = 5
LOGIT_STEPS = 3  # float32 logits are stored for the first LOGIT_STEPS steps of each case
REL_DELTA = 0.1  # default std(scaling * B @ A) / std(W) per targeted module (--rel)
MODELS = ("tiny-llama", "tiny-qwen3")
ALL_LINEARS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def adapter_specs(kind):
    specs = [
        ("qv-r4", dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])),
        ("all-r8-rslora", dict(r=8, lora_alpha=16, use_rslora=True, target_modules=list(ALL_LINEARS))),
        ("mlp-r16", dict(
            r=16, lora_alpha=8, target_modules=["gate_proj", "up_proj", "down_proj"],
            rank_pattern={"layers.1.mlp.down_proj": 2}, alpha_pattern={"layers.1.mlp.down_proj": 4},
        )),
        ("embed-head", dict(r=4, lora_alpha=4, target_modules=["embed_tokens", "lm_head", "k_proj"])),
    ]
    if kind == "tiny-llama":
        specs.append(("regex-layers", dict(
            r=2, lora_alpha=16, target_modules=r".*\.layers\.[02]\.self_attn\.(q|o)_proj")))
    else:
        specs.append(("layers-to-transform", dict(
            r=6, lora_alpha=12, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
            layers_to_transform=[1])))
    return specs


def log(msg=""):
    print(msg, flush=True)


def banner(msg):
    log()
    log("=" * 78)
    log(msg)
    log("=" * 78)


# --------------------------------------------------------------------------- models


def load_base(model_dir, **overrides):
    m = AutoModelForCausalLM.from_pretrained(
        str(model_dir), dtype=torch.float32, attn_implementation="eager", **overrides
    )
    m.to("cpu")
    m.eval()
    return m


def make_peft(model_dir, cfg_kwargs, base_overrides=None):
    base = load_base(model_dir, **(base_overrides or {}))
    cfg = LoraConfig(task_type="CAUSAL_LM", lora_dropout=0.0, **cfg_kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pm = get_peft_model(base, cfg)
    for w in caught:
        log(f"  PEFT warning (get_peft_model): {str(w.message)[:400]}")
    pm.eval()
    return pm, [str(w.message) for w in caught]


def bf16_exact(t):
    return t.to(torch.bfloat16).to(torch.float32)


@torch.no_grad()
def randomize_lora(pm, seed, rel=REL_DELTA, adapter="default"):
    """Overwrite every LoRA factor with seeded random values (see module docstring)."""
    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    report = []
    for name, mod in sorted(pm.named_modules(), key=lambda kv: kv[0]):
        if not isinstance(mod, LoraLayer):
            continue
        scale = float(mod.scaling[adapter])
        base_w = mod.get_base_layer().weight.detach().float()
        if adapter in getattr(mod, "lora_A", {}):
            A = mod.lora_A[adapter].weight  # (r, in)
            B = mod.lora_B[adapter].weight  # (out, r)
            r, n_in = A.shape
            a0 = torch.randn(A.shape, generator=g) / math.sqrt(n_in)
            b0 = torch.randn(B.shape, generator=g) / math.sqrt(r)
            delta = scale * (b0 @ a0)
            kind = "linear"
        elif adapter in getattr(mod, "lora_embedding_A", {}):
            A = mod.lora_embedding_A[adapter]  # (r, num_embeddings)
            B = mod.lora_embedding_B[adapter]  # (embedding_dim, r)
            r = A.shape[0]
            a0 = torch.randn(A.shape, generator=g)
            b0 = torch.randn(B.shape, generator=g) / math.sqrt(r)
            delta = scale * (b0 @ a0).T  # (num_embeddings, embedding_dim)
            kind = "embedding"
        else:
            continue
        c = rel * base_w.std() / delta.std()
        A.copy_(bf16_exact(a0 * c.sqrt()))
        B.copy_(bf16_exact(b0 * c.sqrt()))
        if kind == "linear":
            d = scale * (B @ A)
        else:
            d = scale * (B @ A).T
        assert d.shape == base_w.shape, (name, d.shape, base_w.shape)
        report.append((name, kind, r, scale, float(d.std() / base_w.std())))
    assert report, "no LoRA layers found"
    return report


# --------------------------------------------------------------------------- reference


@torch.no_grad()
def greedy_reference(model, prompt_ids, n_new, top_k, logit_steps):
    ids = list(prompt_ids)
    out, tops, logits_b64, margins = [], [], [], []
    for step in range(n_new):
        x = torch.tensor([ids], dtype=torch.long)
        logits = model(input_ids=x, use_cache=False).logits[0, -1].to(torch.float32)
        logprobs = torch.log_softmax(logits, dim=-1)
        nxt = int(torch.argmax(logits).item())
        top2 = torch.topk(logits, 2).values
        margins.append(float(top2[0] - top2[1]))
        tv, ti = torch.topk(logprobs, top_k)
        if int(ti[0]) != nxt:
            log("WARNING: topk/argmax order disagree (exact tie)")
        tops.append([[int(i), float(v)] for i, v in zip(ti.tolist(), tv.tolist())])
        if step < logit_steps:
            arr = logits.detach().cpu().numpy().astype("<f4", copy=False)
            logits_b64.append(base64.b64encode(arr.tobytes()).decode("ascii"))
        out.append(nxt)
        ids.append(nxt)
    return out, tops, logits_b64, margins


def run_reference(model, base_cases, n_new):
    cases, margins = [], []
    for bc in base_cases:
        out, tops, b64, m = greedy_reference(model, bc["prompt_ids"], n_new, TOP_K, LOGIT_STEPS)
        margins.extend(m)
        cases.append({
            "prompt": bc["prompt"],
            "prompt_ids": bc["prompt_ids"],
            "output_ids": out,
            "top_logprobs": tops,
            "logits_f32_base64": b64,
        })
    return cases, min(margins)


def token_diffs(cases, base_cases):
    per_case, first = [], []
    for c, b in zip(cases, base_cases):
        n = len(b["output_ids"])
        d = sum(1 for x, y in zip(c["output_ids"], b["output_ids"][:n]) if x != y)
        per_case.append(d)
        fd = next((i for i, (x, y) in enumerate(zip(c["output_ids"], b["output_ids"])) if x != y), None)
        first.append(fd)
    return per_case, first


# --------------------------------------------------------------------------- files


def safetensors_summary(path):
    out = {}
    with safe_open(str(path), framework="pt") as sf:
        for k in sf.keys():
            sl = sf.get_slice(k)
            out[k] = (sl.get_dtype(), tuple(sl.get_shape()))
    return out


def fix_base_model_path(adapter_dir, rel):
    """Make PEFT's output reproducible: PEFT writes the absolute base-model path of this
    machine (adapter_config.json and the README.md model card) - replace it with a path
    relative to the fixture root; and it writes a list target_modules in set order (which
    depends on PYTHONHASHSEED) - sort it. Nothing else is changed."""
    p = Path(adapter_dir) / "adapter_config.json"
    cfg = json.loads(p.read_text(encoding="utf-8"))
    absolute = cfg.get("base_model_name_or_path")
    cfg["base_model_name_or_path"] = rel
    if isinstance(cfg.get("target_modules"), list):
        cfg["target_modules"] = sorted(cfg["target_modules"])
    p.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    readme = Path(adapter_dir) / "README.md"
    if absolute and readme.exists():
        readme.write_text(readme.read_text(encoding="utf-8").replace(absolute, rel), encoding="utf-8")
    return cfg


def save_adapter(pm, adapter_dir, base_rel, **kw):
    if adapter_dir.exists():
        shutil.rmtree(adapter_dir)
    adapter_dir.mkdir(parents=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pm.save_pretrained(str(adapter_dir), **kw)
    msgs = [str(w.message) for w in caught]
    for m in msgs:
        log(f"  PEFT warning (save_pretrained): {m[:400]}")
    cfg = fix_base_model_path(adapter_dir, base_rel)
    return cfg, msgs


# --------------------------------------------------------------------------- good adapters


@torch.no_grad()
def make_adapter(kind, name, cfg_kwargs, out, base_doc, n_new, args, notes):
    model_dir = out / "models" / kind
    adapter_dir = out / "adapters" / kind / name
    base_cases = base_doc["cases"]
    chosen = best = None
    tried = []
    for attempt in range(args.seeds):
        seed = 1000 * (MODELS.index(kind) + 1) + 10 * [s[0] for s in adapter_specs(kind)].index(name) + attempt
        pm, warn_msgs = make_peft(model_dir, copy.deepcopy(cfg_kwargs))
        rep = randomize_lora(pm, seed, rel=args.rel)
        cases, mm = run_reference(pm, base_cases, n_new)
        per_case, first = token_diffs(cases, base_cases)
        ndiff = sum(per_case)
        tried.append((seed, mm, ndiff))
        ok = mm >= args.min_margin and ndiff >= args.min_diff
        log(f"[{kind}/{name}] seed {seed}: {len(rep)} LoRA modules, min margin {mm:.5f}, "
            f"tokens differing from base per case {per_case} (first diff at step {first}) "
            f"-> {'keep' if ok else 'retry'}")
        rank = (ndiff >= args.min_diff, mm)
        if best is None or rank > best[0]:
            best = (rank, (seed, pm, rep, warn_msgs))
        if ok:
            chosen = best[1]
            break
    if chosen is None:
        if not best[0][0]:
            raise RuntimeError(f"[{kind}/{name}] no seed gave >= {args.min_diff} differing tokens: {tried}")
        chosen = best[1]
        log(f"WARNING: [{kind}/{name}] no seed gave min margin >= {args.min_margin}; using seed "
            f"{chosen[0]} (min margin {best[0][1]:.5f})")
    seed, pm, rep, warn_msgs = chosen
    ranks = sorted({(r, round(s, 6)) for _, _, r, s, _ in rep})
    log(f"[{kind}/{name}] (rank, scaling) pairs: {ranks}; delta/W std ratio "
        f"{min(x[4] for x in rep):.3f}..{max(x[4] for x in rep):.3f}")

    saved_cfg, save_warns = save_adapter(pm, adapter_dir, f"models/{kind}")
    for m in warn_msgs + save_warns:
        notes.append(f"{kind}/{name}: PEFT warned: {m}")
    st = adapter_dir / "adapter_model.safetensors"
    keys = safetensors_summary(st)
    log(f"[{kind}/{name}] saved {len(keys)} tensors, dtypes {sorted({v[0] for v in keys.values()})}, "
        f"files {sorted(p.name for p in adapter_dir.iterdir())}")

    # Embedding copies: PEFT's save_embedding_layers="auto" saves the base embed/lm_head weights.
    base = load_base(model_dir)
    base_sd = base.state_dict()
    sd = st_load_file(str(st))
    for k in sorted(sd):
        if k.endswith("base_layer.weight"):
            mk = k.removeprefix("base_model.model.").replace(".base_layer.weight", ".weight")
            same = torch.equal(sd[k].float(), base_sd[mk].float())
            log(f"[{kind}/{name}] base copy {k} {tuple(sd[k].shape)} {sd[k].dtype} "
                f"== base {mk}: {same}")
            if not same:
                raise RuntimeError(f"saved base copy {k} differs from the base model")

    # Reload from disk and make the reference with the reloaded model.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        re_pm = PeftModel.from_pretrained(base, str(adapter_dir))
    for w in caught:
        log(f"  PEFT warning (from_pretrained): {str(w.message)[:400]}")
        notes.append(f"{kind}/{name}: PEFT warned on reload: {w.message}")
    re_pm.eval()
    probe = base_cases[-1]["prompt_ids"]
    a = pm(input_ids=torch.tensor([probe]), use_cache=False).logits
    b = re_pm(input_ids=torch.tensor([probe]), use_cache=False).logits
    maxdiff = float((a - b).abs().max())
    log(f"[{kind}/{name}] reload round trip: max |logit diff| in-memory vs reloaded = {maxdiff:.3g}")
    if maxdiff > 1e-4:
        raise RuntimeError(f"[{kind}/{name}] reloaded adapter gives different logits ({maxdiff})")
    cases, mm = run_reference(re_pm, base_cases, n_new)
    per_case, first = token_diffs(cases, base_cases)
    for c, b_ in zip(cases, base_cases):
        log(f"[{kind}/{name}]   base    {b_['output_ids']}")
        log(f"[{kind}/{name}]   adapter {c['output_ids']}")
    log(f"[{kind}/{name}] tokens differing from base per case {per_case} (of {n_new}); "
        f"first diff at step {first}; min margin {mm:.5f}")
    # How far the adapter moves the step-0 logits (same input for base and adapter).
    dl = []
    for c, b_ in zip(cases, base_cases):
        la = np.frombuffer(base64.b64decode(c["logits_f32_base64"][0]), dtype="<f4")
        lb = np.frombuffer(base64.b64decode(b_["logits_f32_base64"][0]), dtype="<f4")
        dl.append(float(np.abs(la - lb).max()))
    log(f"[{kind}/{name}] step-0 max |logit(adapter) - logit(base)| per case: "
        + " ".join(f"{x:.3f}" for x in dl))

    config = {
        "r": saved_cfg["r"],
        "lora_alpha": saved_cfg["lora_alpha"],
        "use_rslora": saved_cfg.get("use_rslora", False),
        "target_modules": saved_cfg["target_modules"],
    }
    for extra in ("rank_pattern", "alpha_pattern", "layers_to_transform"):
        if saved_cfg.get(extra):
            config[extra] = saved_cfg[extra]
    entry = {
        "path": f"adapters/{kind}/{name}",
        "config": config,
        "seed": seed,
        "cases": cases,
    }
    summary = dict(kind=kind, name=name, seed=seed, per_case=per_case, first=first, mm=mm, dl=dl,
                   keys=keys, tried=tried)
    return entry, summary


# --------------------------------------------------------------------------- bad adapters


def write_st(path, tensors):
    st_save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata={"format": "pt"})


@torch.no_grad()
def make_bad(out, notes):
    kind = "tiny-llama"
    model_dir = out / "models" / kind
    bad = out / "adapters" / "bad"
    if bad.exists():
        shutil.rmtree(bad)
    bad.mkdir(parents=True)
    base_rel = f"models/{kind}"
    good_qv = out / "adapters" / kind / "qv-r4"
    good_eh = out / "adapters" / kind / "embed-head"
    reasons = {}

    def copy_good(src, name):
        d = bad / name
        shutil.copytree(src, d)
        return d, json.loads((d / "adapter_config.json").read_text()), st_load_file(str(d / "adapter_model.safetensors"))

    def write_cfg(d, cfg):
        (d / "adapter_config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")

    # dora: made by PEFT with use_dora=True.
    pm, _ = make_peft(model_dir, dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], use_dora=True))
    randomize_lora(pm, 7001)
    save_adapter(pm, bad / "dora", base_rel)
    reasons["dora"] = ("adapter_config.json has use_dora: true and the file holds "
                       "`*.lora_magnitude_vector` tensors (DoRA, weight-decomposed LoRA) - not plain LoRA.")

    # unknown-target: qv-r4 plus a "foo_proj" target and tensors for it.
    d, cfg, sd = copy_good(good_qv, "unknown-target")
    cfg["target_modules"] = sorted(set(cfg["target_modules"]) | {"foo_proj"})
    write_cfg(d, cfg)
    pre = "base_model.model.model.layers.0.self_attn.foo_proj"
    g = torch.Generator().manual_seed(7002)
    sd[f"{pre}.lora_A.weight"] = bf16_exact(torch.randn(4, 64, generator=g) * 0.1)
    sd[f"{pre}.lora_B.weight"] = bf16_exact(torch.randn(64, 4, generator=g) * 0.1)
    write_st(d / "adapter_model.safetensors", sd)
    reasons["unknown-target"] = ("target_modules contains \"foo_proj\" and the file has "
                                 f"`{pre}.lora_A.weight` / `.lora_B.weight`; the model has no such module.")

    # wrong-shape: one lora_A with the wrong number of input features.
    d, cfg, sd = copy_good(good_qv, "wrong-shape")
    k = "base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight"
    old = tuple(sd[k].shape)
    sd[k] = torch.cat([sd[k], sd[k][:, :16]], dim=1)
    write_st(d / "adapter_model.safetensors", sd)
    reasons["wrong-shape"] = (f"`{k}` has shape {list(sd[k].shape)} instead of {list(old)} "
                              f"(in-features {sd[k].shape[1]} != hidden_size {old[1]}).")

    # bias: PEFT bias="all" on tiny-llama loaded with attention_bias=True (random non-zero biases),
    # so PEFT itself writes the bias tensors.
    pm, _ = make_peft(model_dir, dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], bias="all"),
                      base_overrides=dict(attention_bias=True))
    gb = torch.Generator().manual_seed(7003)
    for n, p in pm.named_parameters():
        if n.endswith(".bias") and "lora_" not in n:
            p.copy_(bf16_exact(torch.randn(p.shape, generator=gb) * 0.1))
    randomize_lora(pm, 7004)
    save_adapter(pm, bad / "bias", base_rel)
    reasons["bias"] = ("adapter_config.json has bias: \"all\" and the file holds bias tensors "
                       "(`*.q_proj.base_layer.bias`, `*.k_proj.bias`, ...) that would replace/add base-model "
                       "biases (tiny-llama has none).")

    # lora-bias (extra): PEFT lora_bias=True gives lora_B a bias.
    pm, _ = make_peft(model_dir, dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_bias=True))
    randomize_lora(pm, 7005)
    for n, p in pm.named_parameters():
        if "lora_B" in n and n.endswith(".bias"):
            p.copy_(bf16_exact(torch.randn(p.shape, generator=gb) * 0.1))
    save_adapter(pm, bad / "lora-bias", base_rel)
    reasons["lora-bias"] = ("adapter_config.json has lora_bias: true and the file holds `*.lora_B.bias` "
                            "tensors (LoRA with a bias on B) - an extension the engine does not implement.")

    # pickled: only adapter_model.bin (torch pickle), written by PEFT with safe_serialization=False.
    pm, _ = make_peft(model_dir, dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    randomize_lora(pm, 7006)
    save_adapter(pm, bad / "pickled", base_rel, safe_serialization=False)
    files = sorted(p.name for p in (bad / "pickled").iterdir())
    assert "adapter_model.bin" in files and "adapter_model.safetensors" not in files, files
    reasons["pickled"] = ("only `adapter_model.bin` (a torch pickle) and no adapter_model.safetensors; "
                          "loading pickles can execute code.")

    # modified-embed-copy: embed-head with one element of the saved embed_tokens copy changed.
    d, cfg, sd = copy_good(good_eh, "modified-embed-copy")
    k = "base_model.model.model.embed_tokens.base_layer.weight"
    assert k in sd, sorted(sd)
    sd[k] = sd[k].clone()
    old_v = float(sd[k][5, 3])
    sd[k][5, 3] = old_v + 0.5
    write_st(d / "adapter_model.safetensors", sd)
    reasons["modified-embed-copy"] = (f"the embed-head adapter with `{k}`[5, 3] changed from {old_v} to "
                                      f"{old_v + 0.5}: the saved base copy no longer equals the base "
                                      "model's embed_tokens (it would silently replace base weights).")

    # prompt-tuning: a PEFT PROMPT_TUNING adapter.
    base = load_base(model_dir)
    ptc = PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=4)
    torch.manual_seed(7007)  # the prompt embeddings are initialised from torch's global RNG
    pt = get_peft_model(base, ptc)
    save_adapter(pt, bad / "prompt-tuning", base_rel)
    reasons["prompt-tuning"] = ("adapter_config.json has peft_type \"PROMPT_TUNING\" (the file holds "
                                "`prompt_embeddings`): not a LoRA adapter.")

    lines = [
        "# Adapters the engine must refuse",
        "",
        f"Made by `{SCRIPT_REL}` (PEFT {peft.__version__}); all are for `models/tiny-llama`",
        "(adapter_config.json's base_model_name_or_path is relative to the fixture root). Each folder is",
        "PEFT-shaped (adapter_config.json + adapter_model.safetensors, except `pickled`). `dora`, `bias`,",
        "`lora-bias`, `pickled` and `prompt-tuning` were written by PEFT itself; `unknown-target`,",
        "`wrong-shape` and `modified-embed-copy` are edited copies of the good tiny-llama adapters",
        "`qv-r4` / `embed-head`.",
        "",
        "| folder | why it must be refused |",
        "|---|---|",
    ]
    for name in sorted(reasons):
        lines.append(f"| `{name}` | {reasons[name]} |")
    lines.append("")
    lines.append("Tensor keys per folder:")
    lines.append("")
    for name in sorted(reasons):
        d = bad / name
        stf = d / "adapter_model.safetensors"
        if stf.exists():
            ks = safetensors_summary(stf)
            lines.append(f"- `{name}`: " + ", ".join(f"`{k}` {list(v[1])}" for k, v in sorted(ks.items())))
        else:
            lines.append(f"- `{name}`: " + ", ".join(sorted(p.name for p in d.iterdir())))
    (bad / "README.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for name in sorted(reasons):
        log(f"[bad/{name}] {sorted(p.name for p in (bad / name).iterdir())}")
        stf = bad / name / "adapter_model.safetensors"
        if stf.exists():
            ks = safetensors_summary(stf)
            log(f"[bad/{name}]   keys: " + ", ".join(f"{k} {list(v[1])} {v[0]}" for k, v in sorted(ks.items())))
        cfg = json.loads((bad / name / "adapter_config.json").read_text())
        log(f"[bad/{name}]   peft_type={cfg.get('peft_type')} use_dora={cfg.get('use_dora')} "
            f"bias={cfg.get('bias')} lora_bias={cfg.get('lora_bias')} target_modules={cfg.get('target_modules')}")
    return reasons


# --------------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", required=True, help="make_fixtures.py's output folder (its adapters/ "
                    "and parity/lora-*.json are replaced)")
    ap.add_argument("--new-tokens", type=int, default=12)
    ap.add_argument("--seeds", type=int, default=10, help="seeds to try per adapter")
    ap.add_argument("--min-margin", type=float, default=1e-2,
                    help="smallest wanted top1-top2 logit gap (if no seed reaches it, the best seed is used)")
    ap.add_argument("--min-diff", type=int, default=4,
                    help="fewest greedy tokens (over all prompts) that must differ from the base model")
    ap.add_argument("--rel", type=float, default=REL_DELTA,
                    help="std of each module's LoRA delta (scaling * B @ A) relative to the std of its base weight")
    ap.add_argument("--no-tgz", action="store_true", help="do not (re)write DIR.tgz")
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
        "peft": peft.__version__,
    }
    banner("make_lora_fixtures: versions")
    log(f"python {sys.version.split()[0]}, {json.dumps(versions)}, safetensors {safetensors.__version__}, "
        f"numpy {np.__version__}")

    out = Path(args.out_dir).resolve()
    for kind in MODELS:
        for need in (out / "models" / kind / "config.json", out / "parity" / f"{kind}.json"):
            if not need.exists():
                raise SystemExit(f"{need} is missing: run make_fixtures.py --out-dir {out} first")
    adapters_dir = out / "adapters"
    if adapters_dir.exists():
        shutil.rmtree(adapters_dir)
    adapters_dir.mkdir(parents=True)

    notes, summaries = [], []
    for kind in MODELS:
        banner(kind)
        base_doc = json.loads((out / "parity" / f"{kind}.json").read_text(encoding="utf-8"))
        n_new = args.new_tokens
        assert all(len(c["output_ids"]) >= n_new for c in base_doc["cases"])
        # Sanity: the base model here reproduces the stored base reference tokens.
        base = load_base(out / "models" / kind)
        bcases, _ = run_reference(base, base_doc["cases"], n_new)
        same = [c["output_ids"] == b["output_ids"][:n_new] for c, b in zip(bcases, base_doc["cases"])]
        log(f"[{kind}] base model reproduces parity/{kind}.json tokens: {same}")
        if not all(same):
            log(f"WARNING: [{kind}] base tokens differ from parity/{kind}.json on this machine "
                "(diffs below are against the stored base reference)")
        del base
        if kind == "tiny-qwen3":
            cfgj = json.loads((out / "models" / kind / "config.json").read_text())
            log(f"[{kind}] tie_word_embeddings={cfgj.get('tie_word_embeddings')}")

        doc = {
            "generator": SCRIPT_REL,
            "versions": versions,
            "model": kind,
            "reference": REFERENCE_DESC,
            "top_k": TOP_K,
            "logit_steps": LOGIT_STEPS,
            "adapters": {},
        }
        for name, cfg_kwargs in adapter_specs(kind):
            log()
            log(f"--- {kind}/{name}: {cfg_kwargs}")
            entry, summ = make_adapter(kind, name, cfg_kwargs, out, base_doc, n_new, args, notes)
            doc["adapters"][name] = entry
            summaries.append(summ)
        pj = out / "parity" / f"lora-{kind}.json"
        with open(pj, "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"), ensure_ascii=False)
            f.write("\n")
        log(f"[{kind}] wrote {pj} ({pj.stat().st_size} bytes)")

    banner("bad adapters (tiny-llama)")
    make_bad(out, notes)

    banner("files")
    total = 0
    for f in sorted((out / "adapters").rglob("*")) + sorted((out / "parity").glob("lora-*.json")):
        if f.is_file():
            sz = f.stat().st_size
            total += sz
            log(f"{sz:>10}  {f.relative_to(out.parent)}")
    log(f"{total:>10}  total (new files)")
    if not args.no_tgz:
        tgz = out.parent / (out.name + ".tgz")
        tmp = out.parent / (out.name + ".tgz.tmp")
        with tarfile.open(tmp, "w:gz") as tf:
            tf.add(str(out), arcname=out.name)
        os.replace(tmp, tgz)
        log(f"{tgz.stat().st_size:>10}  {tgz}")

    banner("summary")
    for s in summaries:
        log(f"{s['kind']}/{s['name']}: seed {s['seed']}, tokens differing from base per case {s['per_case']} "
            f"(first diff at step {s['first']}), step-0 max logit shift {max(s['dl']):.2f}, "
            f"min margin {s['mm']:.5f}, {len(s['keys'])} tensors")
    if notes:
        log("PEFT warnings:")
        for n in dict.fromkeys(notes):
            log(f"  - {n[:500]}")
    log(f"done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
