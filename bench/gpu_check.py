"""Bench: the library's GPU path, run on a CUDA machine beside its CPU path in one process.

CI and the CPU default never touch a GPU, so this is where "the same code runs on a GPU" is
checked. Run: `python bench/gpu_check.py --root <a make-pipeline checkout> --out gpu.json`
(the root needs `models/policy-{init,sft}` and the `artifacts/` task, SFT-data Parquets).
Each case is independent; a failing one is recorded with its traceback and the next runs.
The JSON is rewritten after every case (a run cut short keeps what it finished).

* `engine` — the pipeline's SFT policy in `TorchEngine` on CPU fp32, CUDA fp32 and CUDA bf16,
  same prompts × G, same seeds: the share of samples whose ids equal the CPU's (sampling
  draws from the engine's own per-sample streams, so only logit rounding can change a
  draw), |Δ logp| where they agree, each engine's behaviour logprobs against its own
  teacher-forced `score_batch` (the trainer's code path: the mismatch TIS corrects), tok/s.
* `qwen_shape` — a seeded random model of Qwen2.5-Coder-0.5B's shape (24 layers, 896 wide,
  GQA 14/2, 151,936-token vocabulary, tied embeddings) in bf16 on the GPU, loaded from a
  model directory by `load_policy` like a real checkpoint: the engine against
  `model.generate` (same prompts × G, same new tokens, alternating, best of `--repeats`),
  and the bf16 behaviour-vs-trainer logprob mismatch at this size.
* `stream` — continuous batching (`TorchEngine.stream`) against static batches of
  `generate` on a workload of varied lengths, same seeds (`stream_arms`): tok/s, decode
  steps and the share of identical samples, on the SFT policy (fp32) and the Qwen shape (bf16).
* `sft` — `train_sft` of the init policy on the pipeline's SFT data, `--sft-steps` steps, on
  the CPU and on CUDA (fp32, same seed): the two loss curves and seconds per step.
* `grpo` — `train_grpo` of the SFT policy on CUDA, `--grpo-steps` steps of the pipeline's
  `grpo` section, against the enclave (bwrap sandbox) as stage `grpo` runs it: the loop's
  curves (first-pass ratio deviation, sampler mismatch, rewards) and seconds per step.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RLVR_TRACKING", "off")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import grpo_scratch_run, mismatch  # noqa: E402
from bench.engine import hf_generate, make_prompts, time_best  # noqa: E402
from rlvr.engines.base import SamplingParams  # noqa: E402
from rlvr.engines.torch_engine import TorchEngine  # noqa: E402

# Qwen2.5-Coder-0.5B's config.json (the architecture; the weights here are random).
QWEN_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
                tie_word_embeddings=True)


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def env_case(args) -> dict:
    import transformers
    out = {"python": platform.python_version(), "torch": torch.__version__,
           "transformers": transformers.__version__, "cuda": torch.version.cuda,
           "cuda_available": torch.cuda.is_available(), "cpus": os.cpu_count(),
           "tools": {t: bool(shutil.which(t)) for t in ("bwrap", "setpriv", "prlimit")}}
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
    return out


def agreement(ref, got) -> dict:
    """Share of samples with the reference's ids; max |Δ logp| over those samples."""
    same = [(a, b) for a, b in zip(ref, got) if a.token_ids == b.token_ids]
    diff = max((abs(x - y) for a, b in same for x, y in zip(a.logprobs, b.logprobs)), default=0.0)
    return {"same_ids": f"{len(same)}/{len(ref)}", "max_abs_dlogp_same_ids": diff}


def engine_mismatch(engine: TorchEngine, prompts, samples, params) -> dict:
    """Behaviour logprobs recorded while decoding vs the teacher-forced forward (the
    trainer's `sequence_logprobs`) of the same tokens, same weights and dtype."""
    scored = engine.score_batch(prompts, [s.token_ids for s in samples], params)
    return mismatch([s.logprobs for s in samples], scored)


def engine_case(args) -> dict:
    sft = args.root / "models/policy-sft"
    cpu = TorchEngine(sft)
    prompts = [p for p in make_prompts(cpu.tokenizer, args.prompts, 1500) for _ in range(args.group)]
    params = SamplingParams(temperature=1.0, max_new_tokens=args.new)
    engines = {"cpu_fp32": cpu, "cuda_fp32": TorchEngine(sft, device=args.device),
               "cuda_bf16": TorchEngine(sft, device=args.device, dtype="bfloat16")}
    out: dict = {"prompts": args.prompts, "group": args.group, "new_tokens": args.new}
    samples = {}
    for name, e in engines.items():
        e.generate(prompts[:2], dataclasses.replace(params, max_new_tokens=2), seed=1)  # warm-up
        t = time.perf_counter()
        samples[name] = e.generate(prompts, params, seed=0)
        sync()
        secs = time.perf_counter() - t
        n = sum(len(s.token_ids) for s in samples[name])
        out[name] = {"tokens_per_s": round(n / secs, 1),
                     "mismatch": engine_mismatch(e, prompts, samples[name], params)}
        if name != "cpu_fp32":
            out[name]["vs_cpu_fp32"] = agreement(samples["cpu_fp32"], samples[name])
    return out


def qwen_shape_engine(args) -> tuple[TorchEngine, dict]:
    """The seeded random model of Qwen2.5-Coder-0.5B's shape, saved as a model directory
    (the pipeline's tokenizer beside it) and loaded by the engine like a real checkpoint."""
    from transformers import AutoModelForCausalLM, Qwen2Config
    shape = dict(QWEN_05B, **({"num_hidden_layers": 2} if args.quick else {}))
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "qwen-shape"
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(Qwen2Config(**shape), dtype=torch.bfloat16)
        model.save_pretrained(d)
        del model
        sft = args.root / "models/policy-sft"
        for f in sft.iterdir():
            if f.name.startswith("tokenizer"):
                shutil.copy2(f, d / f.name)
        return TorchEngine(d, device=args.device, dtype="bfloat16"), shape


def qwen_shape_case(args) -> dict:
    engine, shape = qwen_shape_engine(args)
    model = engine.model
    prompts = [p for p in make_prompts(engine.tokenizer, args.prompts, 3000) for _ in range(args.group)]
    params = SamplingParams(temperature=1.0, max_new_tokens=args.new)
    short = dataclasses.replace(params, max_new_tokens=2)
    hf_generate(model, prompts[:2], 2, 1.0, 0)
    engine.generate(prompts[:2], short, seed=1)
    got = {}

    def run_engine():
        got["engine"] = engine.generate(prompts, params, seed=0)
        sync()

    def run_hf():
        hf_generate(model, prompts, args.new, 1.0, 0)
        sync()

    def run_variant(variant):
        def go():
            variant.generate(prompts, params, seed=0)
            sync()
        return go
    no_share = TorchEngine.from_model(model, policy_version="bench", share_prefix=False)
    hf_loop = TorchEngine.from_model(model, policy_version="bench", backend="hf")
    for e in (no_share, hf_loop):
        e.generate(prompts[:2], short, seed=1)
    seconds = time_best({"hf_generate": run_hf, "engine": run_engine,
                         "engine_no_share": run_variant(no_share),
                         "engine_hf_backend": run_variant(hf_loop)}, args.repeats)
    n = len(prompts) * args.new
    tok_s = {k: round(n / v, 1) for k, v in seconds.items()}
    return {"shape": shape, "params": sum(p.numel() for p in model.parameters()),
            "samples": len(prompts), "prompt_tokens_mean": round(sum(map(len, prompts)) / len(prompts), 1),
            "new_tokens": args.new, "tokens_per_s": tok_s,
            "ratio": round(tok_s["engine"] / tok_s["hf_generate"], 2),
            "finish_lengths": sorted({len(s.token_ids) for s in got["engine"]})[:3],
            "mismatch_bf16": engine_mismatch(engine, prompts, got["engine"], params),
            "peak_gpu_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)
            if torch.cuda.is_available() else None}


def stream_arms(engine: TorchEngine, args) -> dict:
    """Static batches against the continuous decode on one engine, a workload of varied
    lengths: prompts × G, each sequence with its own seeded token limit in [new/8, new],
    `--slots` sequences decoding at once. Static: `generate` on each batch of `--slots`
    for the batch's longest limit, each sample cut to its own (the cohort schedule), with
    the engine's fast decoder and with its HF-backend loop (`backend="hf"`). Stream:
    all sequences queued on one `DecodeStream` bounded to `--slots`, a slot refilled the
    step its sequence stops. Same per-sample seeds, so both draw the same ids up to logit
    rounding (batch shapes differ); the prefix cache is cleared before every run."""
    import random
    rng = random.Random(0)
    prompts = [p for p in make_prompts(engine.tokenizer, args.prompts, 3000) for _ in range(args.group)]
    limits = [rng.randint(max(1, args.new // 8), args.new) for _ in prompts]
    n, S = len(prompts), args.slots
    params = SamplingParams(temperature=1.0, max_new_tokens=args.new)
    got: dict = {}
    steps: dict = {}

    def static(e: TorchEngine, name: str):
        def run():
            e.prefix_cache.clear()
            out, count = [], 0
            for i in range(0, n, S):
                chunk = range(i, min(n, i + S))
                p = dataclasses.replace(params, max_new_tokens=max(limits[j] for j in chunk))
                samples = e.generate([prompts[j] for j in chunk], p, seed=0, sample_seeds=list(chunk))
                out += [s.token_ids[:limits[j]] for j, s in zip(chunk, samples)]
                count += e.last_stats.get("decode_steps", 0)
            sync()
            got[name], steps[name] = out, count
        return run

    def continuous():
        engine.prefix_cache.clear()
        stream = engine.stream(params, seed=0, max_slots=S)
        for j in range(n):
            stream.add(j, prompts[j], sample_seed=j, max_new_tokens=limits[j])
        out = {}
        while stream.active:
            out.update((k, s.token_ids) for k, s in stream.step())
        sync()
        got["continuous"], steps["continuous"] = [out[j] for j in range(n)], stream.stats["decode_steps"]
        stream.close()

    hf_loop = TorchEngine.from_model(engine.model, policy_version="bench", backend="hf")
    arms = {"static": static(engine, "static"), "static_hf_backend": static(hf_loop, "static_hf_backend"),
            "continuous": continuous}
    for run in arms.values():  # warm-up (kernels, allocator)
        run()
    seconds = time_best(arms, args.repeats)
    tokens = sum(limits)
    same = sum(a == b for a, b in zip(got["static"], got["continuous"]))
    return {"sequences": n, "slots": S, "limits_min_mean_max": [min(limits), round(tokens / n, 1), max(limits)],
            "prompt_tokens_mean": round(sum(map(len, prompts)) / n, 1),
            "tokens": tokens, "tokens_per_s": {k: round(tokens / v, 1) for k, v in seconds.items()},
            "ratio_continuous_over_static": round(seconds["static"] / seconds["continuous"], 2),
            "ratio_continuous_over_static_hf_backend":
                round(seconds["static_hf_backend"] / seconds["continuous"], 2),
            "decode_steps": steps, "same_ids": f"{same}/{n}"}


def stream_case(args) -> dict:
    """`stream_arms` on the pipeline's SFT policy (CUDA fp32: ids must agree but for
    rounding) and on the Qwen-shaped model (bf16: the speed that matters)."""
    out = {"sft_fp32": stream_arms(TorchEngine(args.root / "models/policy-sft", device=args.device), args)}
    engine, shape = qwen_shape_engine(args)
    out["qwen_shape_bf16"] = stream_arms(engine, args)
    out["qwen_shape_bf16"]["layers"] = shape["num_hidden_layers"]
    if torch.cuda.is_available():
        out["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return out


def sft_case(args) -> dict:
    from rlvr.train.sft_config import load_sft_params
    from rlvr.train.demos import read_demonstrations
    from rlvr.train.sft import train_sft
    train, val = read_demonstrations(args.root / "artifacts/sft_data.parquet")
    base = dataclasses.replace(load_sft_params(args.root / "params.yaml"), max_steps=args.sft_steps,
                               eval_every=0, probe_tasks=0)
    out: dict = {"steps": args.sft_steps, "train_demos": len(train)}
    curves = {}
    for label, device in (("cpu", "cpu"), ("accelerator", args.device)):
        rows: list = []
        p = dataclasses.replace(base, device=device)
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            res = train_sft(args.root / "models/policy-init", train, val, p, Path(tmp) / "out",
                            log=lambda step, m: rows.append((step, m.get("train/loss"))))
            secs = time.perf_counter() - t
        curves[label] = [round(v, 5) for _, v in rows if v is not None]
        out[label] = {"device": device, "seconds_per_step": round(secs / max(1, res.steps), 3),
                      "train_loss_first_last": [curves[label][0], curves[label][-1]],
                      "val_loss": res.val_loss}
    a, b = curves["cpu"], curves["accelerator"]
    out["max_abs_loss_diff"] = max(abs(x - y) for x, y in zip(a, b))
    return out


def grpo_case(args) -> dict:
    from rlvr.agent.rollout import load_params as load_rollout_params
    from rlvr.enclave.batch import VerifyParams, enclave_verifier
    from rlvr.train.grpo_config import load_grpo_params

    params_file = args.root / "params.yaml"
    p = dataclasses.replace(load_grpo_params(params_file), device=args.device, steps=args.grpo_steps,
                            dtype=args.dtype)
    rollout, sandbox = load_rollout_params(params_file)
    verify = VerifyParams(seed=p.verify_seed, consensus_runs=p.consensus_runs)
    keep = ("train/reward", "train/pass_at_1", "train/informative_fraction", "train/entropy",
            "train/first_pass_ratio_dev", "train/mismatch/logprob_abs_diff_mean",
            "train/groups_accepted")
    with enclave_verifier(verify, sandbox, where="grpo") as (verifier, _):
        res, logged, n_tasks = grpo_scratch_run(args.root, args.root / "models/policy-sft", p,
                                                rollout, sandbox, verifier)
    return {"steps": res.steps, "policy_step": res.policy_step, "tasks": n_tasks,
            "seconds_per_step": [round(s, 1) for s in res.step_seconds],
            "flags": {k: v for k, v in res.flags.items() if v},
            "curves": [{k: c[k] for k in keep if k in c} for c in res.curves],
            "time": [{k: v for k, v in m.items() if k.startswith("time/")} for m in logged],
            "device_of_weights": args.device, "dtype": args.dtype}


CASES = {"env": env_case, "engine": engine_case, "qwen_shape": qwen_shape_case,
         "stream": stream_case, "sft": sft_case, "grpo": grpo_case}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="a make-pipeline checkout")
    ap.add_argument("--out", type=Path, required=True, help="result JSON (rewritten per case)")
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--device", default="cuda", help="the accelerator (cpu: a dry run)")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--slots", type=int, default=32, help="stream case: sequences decoding at once")
    ap.add_argument("--sft-steps", type=int, default=40)
    ap.add_argument("--grpo-steps", type=int, default=2)
    ap.add_argument("--dtype", default="float32", help="grpo case: trainer and sampler dtype")
    ap.add_argument("--quick", action="store_true", help="2-layer qwen shape (dry runs)")
    args = ap.parse_args()
    args.root = args.root.resolve()
    results: dict = {}
    for name in args.cases:
        t = time.perf_counter()
        try:
            results[name] = CASES[name](args)
        except Exception:  # noqa: BLE001 - a failing case is a result too; the next one runs
            results[name] = {"error": traceback.format_exc()}
        results[name]["case_seconds"] = round(time.perf_counter() - t, 1)
        print(name, json.dumps(results[name], default=str)[:3000], flush=True)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=2, default=str) + "\n")
        tmp.replace(args.out)


if __name__ == "__main__":
    main()
