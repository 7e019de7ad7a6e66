"""Bench: TorchEngine vs Hugging Face `model.generate`, same model, same prompts, G per prompt.

Run: `.venv/bin/python bench/engine.py [--quick]`. Both sides sample (temperature 1, no
top-k, top-p as given), produce exactly `--new` tokens per sample (no stop tokens; HF gets
min_new_tokens = max_new_tokens), and are timed in this one process, alternating, best of
`--repeats`. Reported per model size: generated tokens/s of each, the ratio (target >= 3x),
and the prefill work saved by prefix sharing. Two engine ablations explain the gap:
`share_prefix=False` (no group prefill / shared prompt KV) and `backend="hf"` (the engine's
loop over the model's own forward); a third, `prefix_cache_tokens=0`, shows what keeping
each sample's KV for a next turn costs a single-turn workload. The runs are interleaved
round-robin. On a small model use `--threads 1`: a second intra-op thread only spin-waits
on ops this small (and on a loaded machine it slows every contender several-fold).

The multi-turn case (`--cases multi_turn`) drives `--turns`-turn episodes as
`rlvr.agent.collector` does: one `generate` per turn over all episodes, turn t+1's prompt =
turn t's prompt + its `--turn-new` sampled ids + an observation (`--obs-chars` of a real
source file), per-(episode, turn) sample seeds. It times the whole episode set with the
cross-turn prefix cache (the engine default) against re-prefilling every transcript
(`prefix_cache_tokens=0`), each from a cold cache, and asserts both sampled the same ids.
The last line is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlvr.engines.base import SamplingParams  # noqa: E402
from rlvr.engines.local_policy import build_local_policy, corpus_files, policy_corpus, render_chat  # noqa: E402
from rlvr.engines.torch_engine import TorchEngine  # noqa: E402

SIZES = {
    "cpu-default": dict(hidden_size=128, layers=4, heads=4, kv_heads=2, intermediate_size=512),
    "larger": dict(hidden_size=384, layers=6, heads=6, kv_heads=2, intermediate_size=1024),
}


def make_prompts(tokenizer, n: int, max_chars: int) -> list[list[int]]:
    """n agent-like prompts: system + user turn carrying a real source file."""
    files = [p for p in corpus_files(ROOT) if "/tests/" not in p.as_posix()][:n]
    prompts = []
    for path in files:
        code = path.read_text()[:max_chars]
        text = render_chat([
            {"role": "system", "content": "You are a coding agent. Fix the bug; one tool call per turn."},
            {"role": "user", "content": f"A test fails. Here is {path.name}:\n{code}"},
        ], add_generation_prompt=True)
        prompts.append(tokenizer.encode(text))
    return prompts


def time_best(runs: dict, repeats: int) -> dict[str, float]:
    """Best wall time of each run, the runs interleaved round-robin so that a change in
    machine load hits every contender alike."""
    best = {k: float("inf") for k in runs}
    for _ in range(repeats):
        for k, fn in runs.items():
            t = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t)
    return best


def hf_generate(model, prompts, new_tokens: int, top_p: float, seed: int):
    L = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), L, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, L - len(p):] = torch.tensor(p)
        mask[i, L - len(p):] = 1
    ids, mask = ids.to(model.device), mask.to(model.device)
    torch.manual_seed(seed)
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0,
                             top_k=0, top_p=top_p, max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, pad_token_id=0, eos_token_id=None)
    assert out.shape[1] == L + new_tokens
    return out


def bench_size(name: str, size: dict, texts, args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        build_local_policy(Path(tmp) / "policy", texts, seed=0, vocab_size=args.vocab, **size)
        engine = TorchEngine(Path(tmp) / "policy")
    model = engine.model
    base = make_prompts(engine.tokenizer, args.prompts, args.prompt_chars)
    prompts = [p for p in base for _ in range(args.group)]
    params = SamplingParams(temperature=1.0, top_p=args.top_p, max_new_tokens=args.new)
    no_share = TorchEngine.from_model(model, policy_version="bench", share_prefix=False)
    hf_loop = TorchEngine.from_model(model, policy_version="bench", backend="hf")
    no_cache = TorchEngine.from_model(model, policy_version="bench", prefix_cache_tokens=0)
    runs = {
        "hf_generate": lambda: hf_generate(model, prompts, args.new, args.top_p, 0),
        "engine": lambda: engine.generate(prompts, params, seed=0),
        "engine_no_share": lambda: no_share.generate(prompts, params, seed=0),
        "engine_hf_backend": lambda: hf_loop.generate(prompts, params, seed=0),
        "engine_no_cache": lambda: no_cache.generate(prompts, params, seed=0),
    }
    short = SamplingParams(temperature=1.0, top_p=args.top_p, max_new_tokens=2)
    hf_generate(model, prompts[:2], 2, args.top_p, 0)  # warm-up
    for e in (engine, no_share, hf_loop, no_cache):
        e.generate(prompts[:2], short, seed=0)
    seconds = time_best(runs, args.repeats)
    engine.generate(prompts, params, seed=0)
    stats = engine.last_stats
    n_tokens = len(prompts) * args.new
    tok_s = {k: round(n_tokens / v, 1) for k, v in seconds.items()}
    result = {
        "size": name, **size, "vocab": engine.vocab_size,
        "params": sum(p.numel() for p in model.parameters()),
        "prompts": args.prompts, "group": args.group, "samples": len(prompts),
        "prompt_tokens_mean": round(sum(len(p) for p in base) / len(base), 1),
        "new_tokens": args.new, "tokens_per_s": tok_s,
        "ratio": round(tok_s["engine"] / tok_s["hf_generate"], 2),
        "ratio_no_share": round(tok_s["engine_no_share"] / tok_s["hf_generate"], 2),
        "ratio_hf_backend": round(tok_s["engine_hf_backend"] / tok_s["hf_generate"], 2),
        "ratio_no_cache": round(tok_s["engine_no_cache"] / tok_s["hf_generate"], 2),
        "prefill_tokens_requested": stats["prefill_tokens_requested"],
        "prefill_tokens_computed": stats["prefill_tokens_computed"],
        "prefill_saved_fraction": round(stats["prefill_tokens_saved"]
                                        / stats["prefill_tokens_requested"], 4),
    }
    print(f"{name:12s} hf {tok_s['hf_generate']:8.1f} tok/s | engine {tok_s['engine']:8.1f} "
          f"({result['ratio']}x) | no-share {tok_s['engine_no_share']:8.1f} | hf-backend "
          f"{tok_s['engine_hf_backend']:8.1f} | no-cache {tok_s['engine_no_cache']:8.1f} | "
          f"prefill {stats['prefill_tokens_computed']}/"
          f"{stats['prefill_tokens_requested']}", flush=True)
    return result


def observation(files: list[Path], episode: int, turn: int, chars: int) -> str:
    """Tool-output-like text: a slice of a real source file, its own per (episode, turn)."""
    text = files[(episode + turn) % len(files)].read_text()
    start = (episode * 7919 + turn * 104729) % max(1, len(text) - chars)
    return text[start:start + chars]


def run_episodes(engine: TorchEngine, first: list[list[int]], obs: list[list[list[int]]],
                 params: SamplingParams, turns: int) -> list[list[list[int]]]:
    """All episodes, `turns` turns, one generate per turn (from a cold prefix cache).
    Returns the sampled ids per episode and turn."""
    engine.close()  # drops the prefix cache: each timed run starts cold
    transcripts = [list(p) for p in first]
    ids: list[list[list[int]]] = [[] for _ in first]
    for t in range(turns):
        samples = engine.generate(transcripts, params, seed=0,
                                  sample_seeds=[e * 1000 + t for e in range(len(first))])
        for e, s in enumerate(samples):
            ids[e].append(s.token_ids)
            transcripts[e] += s.token_ids + obs[e][t]
    return ids


def bench_multi_turn(name: str, size: dict, texts, args) -> dict:
    """Cross-turn KV reuse vs re-prefill over `args.turns`-turn episodes (module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        build_local_policy(Path(tmp) / "policy", texts, seed=0, vocab_size=args.vocab, **size)
        reuse = TorchEngine(Path(tmp) / "policy")
    model, tok = reuse.model, reuse.tokenizer
    reprefill = TorchEngine.from_model(model, policy_version="bench", prefix_cache_tokens=0)
    base = make_prompts(tok, args.prompts, args.prompt_chars)
    first = [p for p in base for _ in range(args.group)]
    files = [p for p in corpus_files(ROOT) if "/tests/" not in p.as_posix()]
    obs = [[tok.encode(observation(files, e, t, args.obs_chars)) for t in range(args.turns)]
           for e in range(len(first))]
    params = SamplingParams(temperature=1.0, top_p=args.top_p, max_new_tokens=args.turn_new)
    short = SamplingParams(temperature=1.0, top_p=args.top_p, max_new_tokens=2)
    for e in (reuse, reprefill):  # warm-up
        run_episodes(e, first[:2], obs[:2], short, 2)
    got: dict[str, list] = {}

    def run(key, engine):
        def go():
            engine.stats.clear()  # afterwards: the counters of the last run
            got[key] = run_episodes(engine, first, obs, params, args.turns)
        return go
    seconds = time_best({"reuse": run("reuse", reuse), "reprefill": run("reprefill", reprefill)},
                        args.repeats)
    assert got["reuse"] == got["reprefill"], "KV reuse changed the sampled ids"
    st = reuse.stats
    n_tokens = sum(len(turn) for ep in got["reuse"] for turn in ep)
    tok_s = {k: round(n_tokens / v, 1) for k, v in seconds.items()}
    final = [len(first[e]) + sum(len(x) + len(o) for x, o in zip(got["reuse"][e], obs[e]))
             for e in range(len(first))]
    result = {
        "case": "multi_turn", "size": name, **size,
        "params": sum(p.numel() for p in model.parameters()),
        "episodes": len(first), "group": args.group, "turns": args.turns,
        "turn_new_tokens": args.turn_new,
        "obs_tokens_mean": round(sum(len(o) for ep in obs for o in ep) / (len(first) * args.turns), 1),
        "first_prompt_tokens_mean": round(sum(len(p) for p in base) / len(base), 1),
        "final_transcript_tokens_mean": round(sum(final) / len(final), 1),
        "generated_tokens": n_tokens, "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "tokens_per_s": tok_s, "ratio_reuse": round(tok_s["reuse"] / tok_s["reprefill"], 2),
        "same_sampled_ids": True,
        "prefill_tokens_requested": st["prefill_tokens_requested"],
        "prefill_tokens_computed": st["prefill_tokens_computed"],
        "prefill_tokens_reused": st["prefill_tokens_reused"],
        "prefill_tokens_saved_in_batch": st["prefill_tokens_saved"],
        "prefix_cache_tokens_end": st["prefix_cache_tokens"],
    }
    print(f"{name:12s} multi-turn x{args.turns}: reuse {tok_s['reuse']:8.1f} tok/s | re-prefill "
          f"{tok_s['reprefill']:8.1f} tok/s ({result['ratio_reuse']}x) | prefill computed "
          f"{st['prefill_tokens_computed']}, reused {st['prefill_tokens_reused']} of "
          f"{st['prefill_tokens_requested']} | same ids", flush=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--prompt-chars", type=int, default=2000)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    ap.add_argument("--sizes", default=",".join(SIZES))
    ap.add_argument("--cases", default="single,multi_turn",
                    help="single (vs HF generate) and/or multi_turn (KV reuse vs re-prefill)")
    ap.add_argument("--turns", type=int, default=12, help="multi_turn: turns per episode")
    ap.add_argument("--turn-new", type=int, default=32, help="multi_turn: sampled tokens per turn")
    ap.add_argument("--obs-chars", type=int, default=200, help="multi_turn: observation length")
    ap.add_argument("--quick", action="store_true", help="small run (CI smoke)")
    args = ap.parse_args()
    if args.quick:
        args.new, args.repeats, args.prompt_chars = 16, 1, 600
        args.turns, args.turn_new = 4, 8
    if args.threads:
        torch.set_num_threads(args.threads)
    cases = args.cases.split(",")
    if not cases or not set(cases) <= {"single", "multi_turn"}:
        ap.error(f"--cases: expected single and/or multi_turn, got {args.cases!r}")
    texts, corpus = policy_corpus(ROOT, seed=0, synthetic_samples=100)
    sizes = args.sizes.split(",")
    out = {"bench": "engine", "threads": torch.get_num_threads()}
    if "single" in cases:
        results = [bench_size(name, SIZES[name], texts, args) for name in sizes]
        out.update(ratio_min=min(r["ratio"] for r in results), target_ratio=3.0, results=results)
    if "multi_turn" in cases:
        multi = [bench_multi_turn(name, SIZES[name], texts, args) for name in sizes]
        out.update(multi_turn_ratio_min=min(r["ratio_reuse"] for r in multi), multi_turn=multi)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
