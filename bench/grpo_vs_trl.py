"""Bench: one GRPO optimizer step of this trainer (rlvr) vs TRL `GRPOTrainer`, same setup.

Run: `OMP_NUM_THREADS=1 .venv/bin/python bench/grpo_vs_trl.py [--group 8 --prompts 4
--max-new 128 --epochs 2 --steps 4 --threads 1 --repeats 2] [--lora R]`. `--lora R`: both
sides train rank-R LoRA adapters (alpha 2R, every major matrix) instead of every weight: TRL
through its `peft_config`, rlvr through `grpo.lora` (adapters only to the sampler). One process run; each side trains in a
fresh subprocess (so its peak RSS is its own), TRL first, on:
* the same model: the CPU-default policy architecture (`rlvr.engines.local_policy`: Qwen2
  style, hidden 128, 4 layers, 4 heads / 2 kv heads, MLP 512, BPE vocab 4096 trained on this
  repo's code, seeded random init), fp32, CPU, one HF directory both sides load;
* the same single-turn verifiable reward (`reward`, pure Python on the decoded completion):
  prompts "a + b =" in the chat format; 1.0 if the completion contains the number a+b, else
  a partial credit for the answer's digits it contains (so groups are rarely all equal);
* the same RL setup: G = `--group` completions per prompt, `--prompts` prompts per
  generation batch, `--max-new` completion tokens (stop on the same EOS ids), temperature 1,
  `--epochs` optimizer steps per generated batch (TRL `num_iterations`; ours `epochs`, one
  mini-batch), β = 0 (no reference model), clip ε_low 0.2 / ε_high 0.28, advantages
  r − mean r (TRL `scale_rewards="none"`, ours `dr_grpo`), token-mean aggregation over the
  batch (TRL `loss_type="dapo"`, ours `token_mean`), no importance-sampling correction (TRL
  applies it only with vLLM: ours `tis_cap=None`), AdamW lr 1e-5 constant, β2 0.95, no
  weight decay, grad clip 1.0, no checkpoint or evaluation inside the timed part, no vLLM.

What each side runs per generation batch (one "loop step" = `--epochs` optimizer steps):
* TRL: `GRPOTrainer.train()` as shipped: HF `generate` (no vLLM), reward, advantages, the
  old-logprob forward (μ > 1), and μ x (forward + loss + backward + AdamW step).
* rlvr: the GRPO trainer's own pieces (`rlvr.train.grpo_*`), as its loop calls them, with
  this single-turn reward in place of the agent episode + enclave verdict: the in-process
  `TorchEngine.generate` on a separate copy of the weights (G members of a prompt share one
  prefill), `train_on` (the loop's training half: `update_policy` — per optimizer step one
  forward + SPEC §7 `grpo_loss` + backward per micro-batch, π_old = epoch 0's own detached
  forward, the shared AdamW backend — with the behaviour metrics the loop logs every
  step, entropy + sampler/trainer logprob mismatch, taken from that same forward),
  `state_version` and `engine.sync_weights`. Every group is trained on (no dynamic
  sampling), as TRL does.

Timing: seconds per optimizer step = wall time of the loop steps after the first (warmup)
one / their optimizer steps; TRL's from `on_step_end` callbacks. Each side runs `--repeats`
times in ABBA order (trl, ours, ours, trl): the median is reported, each run's value kept.
The same per optimizer step in CPU seconds of the process (`time.process_time`, every
thread): on a shared, loaded machine a side's wall time moves with its neighbours' load
(repeats differ by up to 2x), its CPU seconds much less, so both ratios are printed.
Also per side: the share of that wall time spent in generation (TRL: its HF `generate`
call; rlvr: `TorchEngine.generate`) and in the other phases, peak RSS of the process
(ru_maxrss, imports included; the largest over repeats), RSS before training started
(imports + model), mean reward. The last line is JSON.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RLVR_PROGRESS", "0")
os.environ.setdefault("WANDB_DISABLED", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _common import run_side  # noqa: E402

LR = 1e-5
EPS_LOW, EPS_HIGH = 0.2, 0.28


# ---- shared setup -----------------------------------------------------------------------
def make_model_dir(out: Path) -> dict:
    """The init_policy default: tokenizer trained on this repo's code, seeded random LM."""
    from dataclasses import asdict

    from rlvr.engines.local_policy import build_local_policy, policy_corpus

    texts, _ = policy_corpus(ROOT, seed=0)
    return asdict(build_local_policy(out, texts, seed=0))


def make_prompts(n: int, seed: int = 0) -> list[dict]:
    """`n` addition questions as single-turn chat prompts (text), with their answers."""
    from rlvr.engines.local_policy import render_chat

    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        text = render_chat([{"role": "user", "content": f"Add: {a} + {b} ="}],
                           add_generation_prompt=True)
        rows.append({"prompt": text, "answer": str(a + b)})
    return rows


def reward(completion: str, answer: str) -> float:
    """Verifiable reward: 1.0 if `completion` contains the number `answer` (not inside a
    longer number), else half the share of the answer's distinct digits it contains."""
    if re.search(rf"(?<!\d){re.escape(answer)}(?!\d)", completion):
        return 1.0
    digits = set(answer)
    return 0.5 * len(digits & set(completion)) / len(digits)


def rss_mb() -> float:
    """Current resident set size of this process (MB)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def stop_ids(model_dir: Path, tokenizer) -> list[int]:
    """TRL's EOS list: the tokenizer's eos first, then the model's generation_config ones."""
    from transformers import GenerationConfig

    eos = GenerationConfig.from_pretrained(model_dir).eos_token_id
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    return eos if tokenizer.eos_token_id in eos else [tokenizer.eos_token_id, *eos]


# ---- rlvr ---------------------------------------------------------------------------------
def run_ours(model_dir: Path, prompts: list[dict], a) -> dict:
    import torch

    from rlvr.engines.base import Decoding, SamplingParams
    from rlvr.engines.model_dir import load_policy
    from rlvr.engines.torch_engine import TorchEngine
    from rlvr.rl.advantages import AdvantageConfig
    from rlvr.rl.loss import GRPOLossConfig
    from rlvr.train.backend import BackendParams, build_backend
    from rlvr.train.grpo_checkpoint import state_version
    from rlvr.train.grpo_config import GRPOParams
    from rlvr.train.grpo_update import train_on

    G, B, steps = a.group, a.prompts, a.steps + 1
    params = GRPOParams(
        seed=0, steps=steps, group_size=G, groups_per_step=B, tasks_per_draw=B, max_draws=1,
        epochs=a.epochs, mini_batches=1, learning_rate=LR, warmup_steps=0, grad_clip=1.0,
        weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.95, adam_eps=1e-8,
        micro_batch_tokens=16384, dtype="float32", device="cpu", backend="torch",
        loss=GRPOLossConfig(advantage=AdvantageConfig(estimator="dr_grpo"), eps_low=EPS_LOW,
                            eps_high=EPS_HIGH, beta=0.0, loss_aggregation="token_mean",
                            tis_cap=None)).check()
    torch.manual_seed(0)
    policy = load_policy(model_dir, device="cpu", dtype="float32")
    model, tok = policy.model, policy.tokenizer
    if a.lora:  # adapters only: trained, and all the sampler is sent after each update
        from rlvr.train.lora import RLLoraParams, adapter_weights, apply_lora

        model = apply_lora(model, RLLoraParams(enabled=True, r=a.lora, alpha=2 * a.lora), "bench")
    backend = build_backend(model, BackendParams.of(params))
    engine = TorchEngine.from_model(copy.deepcopy(model), tok, policy_version=policy.version)
    decoding = Decoding(temperature=1.0, top_p=1.0, top_k=0)
    sp = SamplingParams.of(decoding, max_new_tokens=a.max_new,
                           stop_token_ids=stop_ids(model_dir, tok))
    scoring = SamplingParams.of(decoding, max_new_tokens=1)
    encoded = [tok(p["prompt"], add_special_tokens=False)["input_ids"] for p in prompts]
    rss_start = rss_mb()
    model.train()
    policy_step, step_s, cpu_s, gen_s, rewards, tokens = 0, [], [], [], [], 0
    phases: dict[str, float] = {}
    for k in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        batch = list(range(k * B, (k + 1) * B))
        flat = [encoded[i] for i in batch for _ in range(G)]
        samples = engine.generate(flat, sp, seed=k)
        t1 = time.perf_counter()
        texts = tok.batch_decode([s.token_ids for s in samples], skip_special_tokens=True)
        groups = []
        for gi, i in enumerate(batch):
            rows = []
            for g in range(G):
                s, p = samples[gi * G + g], encoded[i]
                n = len(s.token_ids)
                rows.append({"trajectory_id": f"s{k}-p{i}-{g}", "logprobs_kind": "behaviour",
                             "token_ids": p + s.token_ids, "loss_mask": [0] * len(p) + [1] * n,
                             "logprobs": [0.0] * len(p) + s.logprobs,
                             "turn_ids": [-1] * len(p) + [0] * n, "n_turns": 1})
            r = [reward(texts[gi * G + g], prompts[i]["answer"]) for g in range(G)]
            groups.append({"rows": rows, "rewards": r, "status": "accepted"})
            rewards += r
        tokens += sum(len(s.token_ids) for s in samples)
        t2 = time.perf_counter()
        upd = train_on(model, backend, groups, params, scoring, None, 0.0, policy_step)
        t4 = time.perf_counter()
        policy_step += int(upd["train/optimizer_steps"])
        engine.sync_weights(adapter_weights(model) if a.lora else model.state_dict(),
                            state_version(model), policy_step)
        step_s.append(time.perf_counter() - t0)
        cpu_s.append(time.process_time() - c0)
        gen_s.append(t1 - t0)
        if k:  # after the warmup step
            for key, v in (("reward", t2 - t1), ("train_on", t4 - t2),
                           ("sync", step_s[-1] - (t4 - t0))):
                phases[key] = phases.get(key, 0.0) + v
    res = _result(step_s, cpu_s, gen_s, a.epochs, policy_step, rewards, tokens, rss_start)
    res["phase_share"] = {k: v / sum(step_s[1:]) for k, v in phases.items()}
    return res


def _result(step_s, cpu_s, gen_s, epochs, opt_steps, rewards, tokens, rss_start) -> dict:
    """Loop step 0 is the warmup; seconds per optimizer step over the rest: wall and CPU
    (process_time, all threads of the process: on a shared machine the CPU seconds move
    far less with the load than the wall seconds)."""
    timed, timed_gen = step_s[1:], gen_s[1:]
    return {"optimizer_steps": opt_steps, "timed_optimizer_steps": len(timed) * epochs,
            "s_per_opt_step": sum(timed) / (len(timed) * epochs),
            "cpu_s_per_opt_step": sum(cpu_s[1:]) / (len(timed) * epochs),
            "s_per_loop_step": [round(s, 4) for s in step_s],
            "generate_share": sum(timed_gen) / sum(timed),
            "warmup_s": step_s[0], "mean_reward": statistics.fmean(rewards),
            "completion_tokens": tokens, "rss_before_train_mb": rss_start}


# ---- TRL ----------------------------------------------------------------------------------
def run_trl(model_dir: Path, prompts: list[dict], a) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    G, B, steps = a.group, a.prompts, a.steps + 1

    class Clock(TrainerCallback):
        """Wall time at train start and after every optimizer step."""

        def on_train_begin(self, args, state, control, **kw):
            self.marks = [time.perf_counter()]
            self.cpu = [time.process_time()]

        def on_step_end(self, args, state, control, **kw):
            self.marks.append(time.perf_counter())
            self.cpu.append(time.process_time())

    class Timed(GRPOTrainer):
        """GRPOTrainer unchanged, plus wall times: of each HF `generate` call (`gen_s`) and
        of each whole generation batch (generate, reward, advantages, old-logprob forward:
        `batch_s`)."""

        gen_s: list[float] = []
        batch_s: list[float] = []

        def _generate_single_turn(self, *args, **kw):
            t0 = time.perf_counter()
            out = super()._generate_single_turn(*args, **kw)
            self.gen_s.append(time.perf_counter() - t0)
            return out

        def _generate_and_score_completions(self, inputs):
            t0 = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            self.batch_s.append(time.perf_counter() - t0)
            return out

    seen: list[float] = []
    tokens = [0]

    def trl_reward(completions, answer, completion_ids, **kw):
        r = [reward(c, ans) for c, ans in zip(completions, answer)]
        seen.extend(r)
        tokens[0] += sum(len(c) for c in completion_ids)
        return r

    torch.manual_seed(0)
    data = Dataset.from_list(prompts[: B * steps])
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(model_dir)
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = GRPOConfig(
            output_dir=tmp, per_device_train_batch_size=B * G, gradient_accumulation_steps=1,
            num_generations=G, max_completion_length=a.max_new, num_iterations=a.epochs,
            max_steps=steps * a.epochs, learning_rate=LR, lr_scheduler_type="constant",
            warmup_steps=0, max_grad_norm=1.0, weight_decay=0.0, adam_beta1=0.9,
            adam_beta2=0.95, adam_epsilon=1e-8, beta=0.0, epsilon=EPS_LOW,
            epsilon_high=EPS_HIGH, scale_rewards="none", loss_type="dapo", temperature=1.0,
            top_p=1.0, top_k=0, use_vllm=False, shuffle_dataset=False, logging_steps=10**6,
            save_strategy="no", eval_strategy="no", report_to=[], use_cpu=True, bf16=False,
            fp16=False, seed=0, dataloader_num_workers=0, disable_tqdm=True,
            log_completions=False)
        peft = None
        if a.lora:  # TRL's own LoRA path: its peft_config, the same matrices and rank
            from peft import LoraConfig

            from rlvr.train.lora import LORA_TARGETS

            peft = LoraConfig(r=a.lora, lora_alpha=2 * a.lora, lora_dropout=0.0,
                              target_modules=list(LORA_TARGETS), bias="none", task_type="CAUSAL_LM")
        trainer = Timed(model=model, reward_funcs=trl_reward, args=cfg, train_dataset=data,
                        processing_class=tok, callbacks=[clock], peft_config=peft)
        rss_start = rss_mb()
        out = trainer.train()
    marks = clock.marks
    # loop step k = optimizer steps k*μ+1 .. (k+1)*μ; its time runs from the mark before
    step_s = [marks[(k + 1) * a.epochs] - marks[k * a.epochs] for k in range(steps)]
    cpu_s = [clock.cpu[(k + 1) * a.epochs] - clock.cpu[k * a.epochs] for k in range(steps)]
    if len(Timed.gen_s) != steps or len(Timed.batch_s) != steps:
        raise RuntimeError(f"TRL generated {len(Timed.gen_s)} batches, expected {steps}")
    res = _result(step_s, cpu_s, Timed.gen_s, a.epochs, out.global_step, seen, tokens[0],
                  rss_start)
    res["phase_share"] = {"generation_batch": sum(Timed.batch_s[1:]) / sum(step_s[1:])}
    return res


# ---- driver -------------------------------------------------------------------------------
def combine(runs: list[dict]) -> dict:
    """One side's repeats: median seconds per optimizer step (and of each share), the
    largest peak RSS; everything else from the first run; each run's s/step kept."""
    out = dict(runs[0])
    out["s_per_opt_step"] = statistics.median(r["s_per_opt_step"] for r in runs)
    out["cpu_s_per_opt_step"] = statistics.median(r["cpu_s_per_opt_step"] for r in runs)
    out["generate_share"] = statistics.median(r["generate_share"] for r in runs)
    out["phase_share"] = {k: statistics.median(r["phase_share"][k] for r in runs)
                          for k in runs[0]["phase_share"]}
    out["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    out["runs_s_per_opt_step"] = [r["s_per_opt_step"] for r in runs]
    out["runs_cpu_s_per_opt_step"] = [r["cpu_s_per_opt_step"] for r in runs]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--group", type=int, default=8, help="G, completions per prompt")
    ap.add_argument("--prompts", type=int, default=4, help="prompts per generation batch")
    ap.add_argument("--max-new", type=int, default=128, help="max completion tokens")
    ap.add_argument("--epochs", type=int, default=2, help="optimizer steps per batch (μ)")
    ap.add_argument("--steps", type=int, default=4, help="timed generation batches (+1 warmup)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2,
                    help="subprocess runs per side, ABBA order; the median s/step is reported")
    ap.add_argument("--lora", type=int, default=0,
                    help="LoRA rank on both sides (alpha 2r, every major matrix); 0 = full fine-tune")
    ap.add_argument("--side", choices=["ours", "trl"], help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    a = ap.parse_args()
    for key in ("group", "prompts", "max_new", "epochs", "steps", "threads", "repeats"):
        if getattr(a, key) < 1:
            ap.error(f"--{key.replace('_', '-')} must be >= 1, got {getattr(a, key)}")
    if a.side:
        return run_side(a, run_ours, run_trl)
    passed = ["--group", str(a.group), "--prompts", str(a.prompts), "--max-new", str(a.max_new),
              "--epochs", str(a.epochs), "--steps", str(a.steps), "--threads", str(a.threads),
              "--lora", str(a.lora)]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, data = Path(tmp) / "model", Path(tmp) / "prompts.json"
        built = make_model_dir(model_dir)
        data.write_text(json.dumps(make_prompts(a.prompts * (a.steps + 1))))
        print(f"model: {built['param_count']:,} params, vocab {built['vocab_size']}, fp32, CPU; "
              f"G {a.group} x {a.prompts} prompts, <= {a.max_new} new tokens, μ {a.epochs}, "
              f"{a.steps} timed batches + 1 warmup, {a.threads} thread(s), "
              f"{f'LoRA r={a.lora}' if a.lora else 'full fine-tune'}, "
              f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
        runs: dict[str, list[dict]] = {"trl": [], "ours": []}
        # ABBA order (trl, ours, ours, trl, ...): a drift in the shared machine's load hits
        # both sides alike
        order = [n for r in range(a.repeats) for n in (("trl", "ours") if r % 2 == 0
                                                         else ("ours", "trl"))]
        for name in order:
            cmd = [sys.executable, __file__, "--side", name, "--data", str(data),
                   "--model", str(model_dir), *passed]
            out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
            if out.returncode or not line:
                sys.exit(f"{name} side failed:\n{out.stderr[-3000:]}")
            runs[name].append(json.loads(line[-1][len("RESULT "):]))
            print(f"  {name} run {len(runs[name])}: {runs[name][-1]['s_per_opt_step']:.3f} "
                  f"s/step ({runs[name][-1]['cpu_s_per_opt_step']:.3f} CPU s), peak RSS {runs[name][-1]['peak_rss_mb']:,.0f} MB", flush=True)
    results = {name: combine(rs) for name, rs in runs.items()}
    t, o = results["trl"], results["ours"]
    print("| trainer | s / optimizer step | CPU s / optimizer step | generation share "
          "| peak RSS | RSS before train | mean reward | completion tokens |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in (("TRL GRPOTrainer", t), ("rlvr grpo", o)):
        print(f"| {name} | {r['s_per_opt_step']:.3f} | {r['cpu_s_per_opt_step']:.3f} "
              f"| {r['generate_share']:.0%} "
              f"| {r['peak_rss_mb']:,.0f} MB | {r['rss_before_train_mb']:,.0f} MB "
              f"| {r['mean_reward']:.3f} | {r['completion_tokens']:,} |")
    for name, r in (("TRL", t), ("rlvr", o)):
        print(f"{name} share of timed wall: " + ", ".join(
            f"{k} {v:.0%}" for k, v in {"generate": r["generate_share"],
                                         **r["phase_share"]}.items()))
    ratio = {"speedup": t["s_per_opt_step"] / o["s_per_opt_step"],
             "speedup_cpu": t["cpu_s_per_opt_step"] / o["cpu_s_per_opt_step"],
             "peak_rss": o["peak_rss_mb"] / t["peak_rss_mb"]}
    print(f"rlvr vs TRL: {ratio['speedup']:.2f}x faster per optimizer step (wall; "
          f"{ratio['speedup_cpu']:.2f}x in CPU seconds), peak RSS "
          f"{ratio['peak_rss']:.2f}x TRL's (target >= 3x at <= 1.0x)")
    print(json.dumps({"trl": t, "ours": o, "ratio": ratio, "args": vars(a)}))


if __name__ == "__main__":
    main()
