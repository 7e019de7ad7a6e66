"""Bench: the `sft` trainer (rlvr.train.sft) vs TRL `SFTTrainer`, same model, data, batch.

Run: `.venv/bin/python bench/sft.py [--demos 48 --batch 8 --threads 2]`. One process run;
each side trains in a fresh subprocess (so its peak RSS is its own) on:
* the same model: a random-init Qwen2-style LM of the `init_policy` default size
  (hidden 128, 4 layers, 4 heads / 2 kv heads, MLP 512, vocab 4096), fp32, CPU;
* the same data: `--demos` synthetic multi-turn agent transcripts, pre-tokenized, with a loss
  mask (a prompt, then turns of policy tokens and longer observations; ~20% of tokens are
  policy tokens, lengths 400-2400, like the teacher's demonstrations). TRL gets them as
  `input_ids` + `assistant_masks` columns (its labels are -100 off the mask);
* the same optimisation: AdamW, constant lr, `--batch` demonstrations per optimizer step, one
  epoch (demos / batch steps), no gradient accumulation on TRL's side (its batch is padded
  to its longest row), no evaluation, no checkpoint inside the timed part.

Reported per side: training tokens/s (real, unpadded tokens of the epoch / seconds of the
training loop), peak RSS of the process (ru_maxrss), and the ratios. The last line is JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RLVR_PROGRESS", "0")
os.environ.setdefault("WANDB_DISABLED", "true")
warnings.filterwarnings("ignore")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _common import run_side  # noqa: E402

SIZE = dict(hidden_size=128, layers=4, heads=4, kv_heads=2, intermediate_size=512)
VOCAB = 4096


def make_model_dir(out: Path) -> None:
    """The init_policy-default architecture with vocab 4096 (a tiny tokenizer is enough:
    the data is pre-tokenized; it is there for TRL's pad token and for the HF directory)."""
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr.engines.local_policy import PolicySize, build_tiny_policy, model_config

    build_tiny_policy(out)
    config = model_config(PolicySize(vocab_size=VOCAB, max_position_embeddings=4096, **SIZE),
                          VOCAB)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(out)


def make_data(n: int, seed: int = 0) -> list[dict]:
    """Synthetic agent transcripts: prompt (masked), then turns of policy tokens (trained)
    and observations (masked) until the drawn length."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        target = rng.randint(400, 2400)
        ids = [rng.randrange(5, VOCAB) for _ in range(rng.randint(200, 300))]
        mask = [0] * len(ids)
        while len(ids) < target:
            act, obs = rng.randint(30, 80), rng.randint(100, 300)
            ids += [rng.randrange(5, VOCAB) for _ in range(act + obs)]
            mask += [1] * act + [0] * obs
        ids, mask = ids[:target], mask[:target]
        rows.append({"trajectory_id": f"d{i}", "task_id": f"t{i % 16}", "part": "train",
                     "token_ids": ids, "loss_mask": mask, "token_hash": str(i)})
    return rows


def run_ours(model_dir: Path, rows: list[dict], a) -> dict:
    from rlvr.train.sft_config import EarlyStopParams, SFTParams
    from rlvr.train.sft import train_sft

    p = SFTParams(learning_rate=1e-3, lr_scheduler_type="constant", warmup_steps=0, epochs=1,
                  batch_size=a.batch, micro_batch_tokens=a.micro_batch_tokens, eval_every=0,
                  grad_clip=1.0, seed=0, max_seq_len=4096,
                  early_stop=EarlyStopParams(parse_error_stop=None, patience=0))
    with tempfile.TemporaryDirectory() as tmp:
        res = train_sft(model_dir, rows, [], p, Path(tmp) / "out")
    return {"seconds": res.seconds, "tokens": res.tokens, "steps": res.steps,
            "padded_tokens": res.padded_tokens, "final_loss": res.train_loss}


def run_trl(model_dir: Path, rows: list[dict], a) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    class Clock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_train_end(self, args, state, control, **kw):
            self.seconds = time.perf_counter() - self.t0

    data = Dataset.from_list([{"input_ids": r["token_ids"], "assistant_masks": r["loss_mask"]}
                              for r in rows])
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(model_dir)
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = SFTConfig(output_dir=tmp, per_device_train_batch_size=a.batch,
                        gradient_accumulation_steps=1, num_train_epochs=1, learning_rate=1e-3,
                        lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=1.0,
                        weight_decay=0.0, adam_beta2=0.95, logging_steps=10**6,
                        save_strategy="no", eval_strategy="no", report_to=[], use_cpu=True,
                        bf16=False, fp16=False, seed=0, max_length=4096, packing=False,
                        dataloader_num_workers=0, disable_tqdm=True)
        trainer = SFTTrainer(model=model, args=cfg, train_dataset=data, processing_class=tok,
                             callbacks=[clock])
        out = trainer.train()
    return {"seconds": clock.seconds, "tokens": sum(len(r["token_ids"]) for r in rows),
            "steps": out.global_step, "final_loss": out.training_loss}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demos", type=int, default=48)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--micro-batch-tokens", type=int, default=16384)
    ap.add_argument("--side", choices=["ours", "trl"], help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.side:
        return run_side(a, run_ours, run_trl)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, data = Path(tmp) / "model", Path(tmp) / "data.json"
        make_model_dir(model_dir)
        rows = make_data(a.demos)
        data.write_text(json.dumps(rows))
        n_tok = sum(len(r["token_ids"]) for r in rows)
        n_pol = sum(sum(r["loss_mask"]) for r in rows)
        print(f"data: {len(rows)} transcripts, {n_tok} tokens, {n_pol} policy tokens "
              f"({n_pol / n_tok:.0%}); batch {a.batch}, {a.threads} threads, fp32, CPU")
        results = {}
        for name in ("trl", "ours"):
            cmd = [sys.executable, __file__, "--side", name, "--data", str(data),
                   "--model", str(model_dir), "--batch", str(a.batch),
                   "--threads", str(a.threads), "--micro-batch-tokens", str(a.micro_batch_tokens)]
            out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
            if out.returncode or not line:
                sys.exit(f"{name} side failed:\n{out.stderr[-3000:]}")
            results[name] = json.loads(line[-1][len("RESULT "):])
            results[name]["tokens_per_s"] = results[name]["tokens"] / results[name]["seconds"]
    t, o = results["trl"], results["ours"]
    print(f"| trainer | steps | tokens/s | peak RSS | final loss |")
    print(f"|---|---|---|---|---|")
    for name, r in (("TRL SFTTrainer", t), ("rlvr sft", o)):
        print(f"| {name} | {r['steps']} | {r['tokens_per_s']:,.0f} | {r['peak_rss_mb']:,.0f} MB "
              f"| {r['final_loss']:.3f} |")
    ratio = {"tokens_per_s": o["tokens_per_s"] / t["tokens_per_s"],
             "peak_rss": o["peak_rss_mb"] / t["peak_rss_mb"]}
    print(f"ratio rlvr/TRL: tokens/s {ratio['tokens_per_s']:.2f}x, peak RSS "
          f"{ratio['peak_rss']:.2f}x; rlvr padding overhead "
          f"{o['padded_tokens'] / o['tokens'] - 1:.1%}")
    print(json.dumps({"trl": t, "ours": o, "ratio": ratio}))


if __name__ == "__main__":
    main()
