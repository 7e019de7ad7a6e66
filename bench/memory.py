"""Bench: peak memory of one GRPO update per trainer configuration, measured, then a
formula fitted to it and projected to real sizes (issue 37).

Run: `.venv/bin/python bench/memory.py [--quick]`. One process run; every configuration
trains in a fresh subprocess (so its peak RSS is its own): load a random-init model, run two
`update_policy` calls (the GRPO loop's update: forward + SPEC §7 loss + backward per
micro-batch, AdamW step; the second runs with the optimizer state the first allocated) on `--seqs` sequences of `--tokens` tokens of random ids (every position a
policy token), and report `ru_maxrss` minus its value once the model is loaded (imports and
the weights resident: `loaded_mb`; the current RSS would miss the weights, which
safetensors maps lazily), beside the model's parameter count. Configurations: full fine-tune vs LoRA (r 16, every major matrix)
x activation checkpointing off / on, on
* `tiny-qwen3`: the tiny Qwen3 of the tests (hidden 128, 2 layers) at the real 151,669-token
  vocabulary (`rlvr.engines.tiny_model`), and
* `qwen0.5b-L{n}`: Qwen2.5-0.5B's shape (hidden 896, 14 heads / 2 KV heads, MLP 4864, vocab
  151,936, tied embeddings) with n of its 24 layers: the full model's fp32 AdamW state alone is
  ~8 GB, so it is measured at 2 and 4 layers and extrapolated per layer.

The fit (`fit`): the bytes a decoder layer keeps per token and hidden unit for the backward,
from the difference between 2 and 4 layers at equal everything else; then the projected per-GPU memory of
Qwen2.5-1.5B / 7B / 32B on 8 x 80 GB (`project`: bf16 weights and activations, fp32 AdamW,
ZeRO 0 / 2 / 3, full vs LoRA, checkpointing off / on), a Markdown table. The last line is
one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QWEN05 = dict(hidden=896, heads=14, kv_heads=2, intermediate=4864, vocab=151936, layers=24)


def rss_mb() -> float:
    """Peak RSS so far (ru_maxrss)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build(model: str, layers: int, out: Path) -> Path:
    """An HF directory of `model` (random init, seeded) with `layers` decoder layers."""
    if model == "tiny-qwen3":
        from rlvr.engines.tiny_model import build_tiny_qwen

        return build_tiny_qwen(out, layers=layers)
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    q = QWEN05
    cfg = Qwen2Config(vocab_size=q["vocab"], hidden_size=q["hidden"], num_hidden_layers=layers,
                      num_attention_heads=q["heads"], num_key_value_heads=q["kv_heads"],
                      intermediate_size=q["intermediate"], tie_word_embeddings=True,
                      max_position_embeddings=4096)
    Qwen2ForCausalLM(cfg).save_pretrained(out)
    import shutil

    from rlvr.engines.tiny_model import TOKENIZER_FILES, qwen_tokenizer_files

    for name in TOKENIZER_FILES:  # the real Qwen tokenizer: a policy directory carries one
        shutil.copy(qwen_tokenizer_files() / name, out / name)
    return out


def side(a) -> None:
    """One configuration, in this (fresh) process: print RESULT {json}."""
    import torch

    torch.set_num_threads(a.threads)
    from rlvr.engines.base import SamplingParams
    from rlvr.engines.model_dir import load_policy
    from rlvr.train.backend import BackendParams, build_backend
    from rlvr.train.grpo_config import parse_grpo_params
    from rlvr.train.grpo_update import update_policy
    from rlvr.train.lora import RLLoraParams, apply_lora

    zero = {"backend": "deepspeed", "zero_stage": a.zero} if a.zero >= 0 else {}
    params = parse_grpo_params({
        "steps": 1, "group_size": 2, "groups_per_step": a.seqs // 2, "tasks_per_draw": 1,
        "max_draws": 1, "consensus_runs": 1, "epochs": 1, "micro_batch_tokens": a.micro,
        "activation_checkpointing": a.ckpt, "head_chunk_tokens": a.head_chunk, "packed": a.packed,
        "lora": {"enabled": a.lora > 0, "r": max(a.lora, 1), "alpha": 2 * max(a.lora, 1)},
        **zero})
    model = load_policy(a.model_dir).model
    n_total = sum(q.numel() for q in model.parameters())
    if a.lora:
        model = apply_lora(model, params.lora, "bench")
    n_train = sum(q.numel() for q in model.parameters() if q.requires_grad)
    model.train()
    g = torch.Generator().manual_seed(0)
    V = model.config.vocab_size

    def length(i: int) -> int:  # --vary: every other sequence a quarter as long
        return a.tokens // 4 if a.vary and i % 2 else a.tokens

    groups = [{"rewards": [1.0, 0.0], "status": "accepted", "rows": [
        {"trajectory_id": f"g{gi}#{si}", "token_ids": torch.randint(0, V, (n,), generator=g).tolist(),
         "loss_mask": [0] + [1] * (n - 1), "logprobs": [0.0] + [-1.0] * (n - 1),
         "turn_ids": [-1] + [0] * (n - 1), "n_turns": 1, "logprobs_kind": "behaviour"}
        for si, n in ((si, length(2 * gi + si)) for si in range(2))]} for gi in range(a.seqs // 2)]
    base = rss_mb()  # the high-water mark after loading: the weights resident
    backend = build_backend(model, BackendParams.of(params), "bench")
    # Two updates: AdamW allocates its state at the first step, so only the second one's
    # backward runs with everything a training run holds (weights, grads, optimizer state,
    # activations, the head's chunk) - the steady state the peak must describe.
    scoring = SamplingParams(temperature=1.0)
    update_policy(model, backend, groups, params, scoring, None, 0.0, 0)
    t0 = time.perf_counter()
    update_policy(model, backend, groups, params, scoring, None, 0.0, 1)
    seconds = time.perf_counter() - t0
    backend.finish()
    print("RESULT " + json.dumps({"peak_mb": rss_mb(), "loaded_mb": base, "seconds": seconds,
                                  "rank": backend.rank,
                                  "params_total": n_total, "params_trainable": n_train,
                                  "hidden": model.config.hidden_size,
                                  "layers": model.config.num_hidden_layers}), flush=True)


def forward_tokens(r: dict) -> int:
    """Tokens in one forward: the update runs micro-batches of <= `micro` padded tokens."""
    return min(r["micro"], r["tokens"] * r["seqs"])


def fit(rows: list[dict]) -> dict:
    """c_act, the bytes a decoder layer keeps per token and hidden unit for the backward
    (fp32), from the qwen0.5b rows without checkpointing: the update's extra memory at 4
    layers minus at 2 layers, less the 12 bytes (fp32 grad + AdamW m, v) of each extra
    trainable parameter, over 2 layers x the tokens of one forward x hidden; full and LoRA
    averaged. With checkpointing a layer keeps only its input (4 bytes per token and hidden)
    and one layer's activations exist at a time (the recompute) — the model used in the
    projection; the measured checkpointed rows are reported beside it, not fitted (RSS
    differences of ~100 MB sit in the allocator's noise at these sizes)."""
    per = []
    for lora in (0, 16):
        rs = sorted((r for r in rows if r["model"].startswith("qwen0.5b") and r["lora"] == lora
                     and not r["ckpt"]), key=lambda r: r["layers"])
        if len(rs) < 2:
            continue
        lo, hi = rs[0], rs[-1]
        d = (hi["peak_mb"] - hi["loaded_mb"] - (lo["peak_mb"] - lo["loaded_mb"])) * 2**20
        d -= 12 * (hi["params_trainable"] - lo["params_trainable"])
        per.append(d / ((hi["layers"] - lo["layers"]) * forward_tokens(hi) * hi["hidden"]))
    if not per:
        return {}
    return {"c_act_fp32_bytes": round(sum(per) / len(per), 1),
            "c_act_each": [round(x, 1) for x in per]}


# Qwen2.5 shapes (config.json of each release): hidden, layers, MLP, heads, KV heads, vocab
SHAPES = {"1.5B": dict(hidden=1536, layers=28, intermediate=8960, heads=12, kv_heads=2, vocab=151936, tied=True),
          "7B": dict(hidden=3584, layers=28, intermediate=18944, heads=28, kv_heads=4, vocab=152064, tied=False),
          "32B": dict(hidden=5120, layers=64, intermediate=27648, heads=40, kv_heads=8, vocab=152064, tied=False)}
GPUS, GPU_GB = 8, 80
LORA_RANK = 16


def shape_params(s: dict) -> tuple[float, float]:
    """(total params, LoRA r16 params on every major matrix) of a Qwen2.5 shape."""
    h, i, L, V = s["hidden"], s["intermediate"], s["layers"], s["vocab"]
    kv = h // s["heads"] * s["kv_heads"]
    attn = h * h * 2 + h * kv * 2 + h + 2 * kv           # q, o; k, v; q/k/v biases
    mlp = 3 * h * i
    total = L * (attn + mlp + 2 * h) + V * h * (1 if s["tied"] else 2) + h
    lora = L * LORA_RANK * ((h + h) * 2 + (h + kv) * 2 + 3 * (h + i))
    return total, lora


def project(fit_: dict, micro_tokens: int = 16384, head_chunk: int = 4096) -> list[dict]:
    """Per-GPU bytes of the GRPO update on 8 GPUs, bf16 weights and activations, fp32 AdamW
    (master copy, m, v), for each shape x {full, LoRA} x ZeRO {0, 2, 3} x checkpointing:
    weights 2P (/8 under ZeRO-3); full fine-tune: bf16 grads 2P (/8 from ZeRO-2) + 12P of
    optimizer state (/8 from ZeRO-1); LoRA: 16 bytes per adapter param; activations over one
    micro-batch of `micro_tokens`: c_act / 2 (bf16) x layers x tokens x hidden, or with
    checkpointing 2 x layers x tokens x hidden (the layer inputs) + one layer's c_act / 2 x
    tokens x hidden; the LM head's logits chunk: head_chunk x V x 12 bytes (fp32 logits,
    log-softmax and its gradient). Memory only: ZeRO-3 is refused by the trainer today."""
    if "c_act_fp32_bytes" not in fit_:
        return []
    c = fit_["c_act_fp32_bytes"] / 2
    rows = []
    for name, s in SHAPES.items():
        P, p_lora = shape_params(s)
        L, h = s["layers"], s["hidden"]
        head = head_chunk * s["vocab"] * 12
        for lora in (False, True):
            for ckpt in (False, True):
                act = (2 * L + c) * micro_tokens * h if ckpt else c * L * micro_tokens * h
                for zero in (0, 2, 3):
                    w = 2 * P / (GPUS if zero == 3 else 1)
                    if lora:
                        state = 16 * p_lora
                    else:
                        state = 2 * P / (GPUS if zero >= 2 else 1) + 12 * P / (GPUS if zero >= 1 else 1)
                    total = w + state + act + head
                    rows.append({"model": name, "params_b": round(P / 1e9, 2),
                                 "update": "LoRA r16" if lora else "full", "zero": zero,
                                 "checkpointing": ckpt, "weights_gb": w / 1e9, "state_gb": state / 1e9,
                                 "activations_gb": act / 1e9, "head_gb": head / 1e9,
                                 "total_gb": total / 1e9, "fits_80gb": total / 1e9 <= GPU_GB * 0.9})
    return rows


def run_side(cmd: list[str], name: str, env: dict[str, str]) -> list[dict]:
    """Run a side (or torchrun's ranks of one) and return every RESULT object it printed: two
    ranks may interleave their lines, so objects are found anywhere in the text (they are
    flat JSON: no nested braces). A failed or silent side ends the bench, naming `name`."""
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    found = [json.loads(m) for m in re.findall(r"RESULT (\{[^{}]*\})", done.stdout)]
    if done.returncode or not found:
        sys.exit(f"{name} failed:\n{done.stderr[-3000:]}")
    return found


def variants(a) -> None:
    """Packed vs padded and ZeRO 0 / 2 / 3 on `--model` at the real vocabulary, same data
    per comparison, full fine-tune, checkpointing off: one line each, then one JSON line."""
    rows = []
    env = {**os.environ, "RLVR_PROGRESS": "0", "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        d = build(a.model, a.layers, Path(tmp) / f"{a.model}-L{a.layers}")
        common = ["--side", "--model-dir", str(d), "--tokens", str(a.tokens), "--seqs",
                  str(a.seqs), "--micro", str(a.micro), "--head-chunk", str(a.head_chunk)]
        runs = [(f"{'packed' if p else 'padded'}, lengths {a.tokens} / {a.tokens // 4}",
                 [sys.executable, __file__, *common, "--threads", str(a.threads), "--vary"]
                 + (["--packed"] if p else [])) for p in (False, True)]
        runs += [(f"ZeRO {z}, 2 ranks", [sys.executable, "-m", "torch.distributed.run",
                                         "--nproc-per-node", "2", "--master-port", "0",
                                         "--rdzv-backend", "c10d", "--rdzv-endpoint",
                                         "127.0.0.1:0", __file__, *common, "--threads", "1",
                                         "--zero", str(z)]) for z in (0, 2, 3)]
        for name, cmd in runs:
            for found_row in run_side(cmd, name, env):
                r = {"config": name, **found_row}
                rows.append(r)
                print(f"{name:<32} rank {r['rank']}  loaded {r['loaded_mb']:7.0f} MB  peak "
                      f"{r['peak_mb']:7.0f} MB  update +{r['peak_mb'] - r['loaded_mb']:6.0f} MB  "
                      f"{r['seconds']:6.2f} s", flush=True)
    print(json.dumps({"variants": rows, "args": vars(a)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny-qwen3 only")
    ap.add_argument("--tokens", type=int, default=512, help="tokens per sequence")
    ap.add_argument("--seqs", type=int, default=4, help="sequences in the update (even)")
    ap.add_argument("--micro", type=int, default=4096, help="micro_batch_tokens")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", help="a previous run's JSON line: fit and project its rows again")
    ap.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    ap.add_argument("--lora", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--ckpt", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--head-chunk", type=int, default=1024, help="head_chunk_tokens")
    ap.add_argument("--packed", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--vary", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--zero", type=int, default=-1, help=argparse.SUPPRESS)
    ap.add_argument("--model", default="tiny-qwen3", choices=["tiny-qwen3", "qwen0.5b"],
                    help="with --variants: the model shape")
    ap.add_argument("--layers", type=int, default=2, help="with --variants: its layers")
    ap.add_argument("--variants", action="store_true",
                    help="instead: packed vs padded (sequences of two lengths, 1 process) and "
                         "ZeRO 0 / 2 / 3 (2 ranks under torchrun, peak per rank) on --model")
    a = ap.parse_args()
    if a.side:
        return side(a)
    if a.variants:
        return variants(a)
    models = [("tiny-qwen3", 2)] + ([] if a.quick else [("qwen0.5b", 2), ("qwen0.5b", 4)])
    rows = []
    if a.rows:
        rows = [{"micro": a.micro, **r} for r in json.loads(Path(a.rows).read_text().splitlines()[-1])["rows"]]
        models = []
    with tempfile.TemporaryDirectory() as tmp:
        for model, layers in models:
            d = build(model, layers, Path(tmp) / f"{model}-L{layers}")
            for lora in (0, 16):
                for ckpt in (False, True):
                    cmd = [sys.executable, __file__, "--side", "--model-dir", str(d),
                           "--lora", str(lora), "--tokens", str(a.tokens), "--seqs", str(a.seqs),
                           "--micro", str(a.micro), "--threads", str(a.threads)] + (["--ckpt"] if ckpt else [])
                    found = run_side(cmd, f"{model} L{layers} lora {lora} ckpt {ckpt}",
                                     {**os.environ, "RLVR_PROGRESS": "0"})[0]
                    r = {"model": f"{model}-L{layers}", "lora": lora, "ckpt": ckpt,
                         "tokens": a.tokens, "seqs": a.seqs, "micro": a.micro, **found}
                    rows.append(r)
                    print(f"{r['model']:<14} {'LoRA r16' if lora else 'full':<8} ckpt {'on ' if ckpt else 'off'} "
                          f"params {r['params_total'] / 1e6:7.1f} M (trainable {r['params_trainable'] / 1e6:7.2f} M) "
                          f"loaded {r['loaded_mb']:7.0f} MB  peak {r['peak_mb']:7.0f} MB  "
                          f"update +{r['peak_mb'] - r['loaded_mb']:6.0f} MB  {r['seconds']:6.1f} s", flush=True)
    fitted = fit(rows)
    projected = project(fitted)
    if projected:
        print("| model | update | ZeRO | checkpointing | weights | optimizer+grads | activations | head | per GPU | fits 80 GB (90%) |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in projected:
            print(f"| {r['model']} ({r['params_b']} B) | {r['update']} | {r['zero']} | "
                  f"{'on' if r['checkpointing'] else 'off'} | {r['weights_gb']:.1f} | "
                  f"{r['state_gb']:.1f} | {r['activations_gb']:.1f} | {r['head_gb']:.1f} | "
                  f"**{r['total_gb']:.1f} GB** | {'yes' if r['fits_80gb'] else 'no'} |")
    print(json.dumps({"rows": rows, "fit": fitted, "projection": projected, "args": vars(a)}))


if __name__ == "__main__":
    main()
