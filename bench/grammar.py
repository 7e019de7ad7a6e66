"""Bench: what the tool-call grammar (`decoding.grammar: tool_call`) costs the sampler and
the trainer, on the same model and prompts.

Run: `.venv/bin/python bench/grammar.py [--model models/policy-sft] [--quick]`. The sampler
side times TorchEngine turns (G samples per prompt, up to `--new` tokens, stopping at
end of turn) with and without the grammar, alternating in this one process, best of
`--repeats`, and reports seconds per generated token of each and their ratio (constrained
turns are different tokens, so tokens/s, not wall time, is the comparable unit). The trainer
side times `TokenGrammar.replay` (the masks the trainer recomputes for every policy token)
per token. Without `--model` a random CPU-default-sized model is built (its turns are
noise, so its grammar states are unlike a trained policy's); `--qwen` builds the tiny Qwen3
under the real 151,669-token Qwen vocabulary and template instead (`rlvr.engines.tiny_model`),
sampled under its own format's grammar (`tool_call.hermes`).

At that vocabulary it also reports what the grammar costs to build (the engine's first
`grammar()` call: llguidance's tokenizer over the vocabulary + the compile) and what the
trainer's logprobs cost in memory: the peak RSS of a child process scoring `--score-tokens`
selected tokens with the LM head applied in chunks of `--chunks` rows, with gradients
(`rlvr.engines.logprobs.sequence_logprobs`, the SFT/GRPO path). The bound is one chunk of
logits, chunk x V x 4 bytes (x ~3 with the log-softmax and its gradient), not N x V.
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

from rlvr.agent.codecs import load_codec  # noqa: E402
from rlvr.agent.prompt import system_prompt  # noqa: E402
from rlvr.engines.base import SamplingParams  # noqa: E402
from rlvr.engines.torch_engine import TorchEngine  # noqa: E402

INSTRUCTIONS = ("`count_below` counts one value too many. Fix it.",
                "`parse_duration` rejects valid input. Fix it.",
                "`allocate` loses a cent when it splits an amount. Fix it.",
                "`lru_get` evicts the wrong entry. Fix it.")


def policy_dir(args) -> Path:
    if args.model:
        return Path(args.model)
    if args.qwen:
        from rlvr.engines.tiny_model import build_tiny_qwen

        return build_tiny_qwen(Path(tempfile.mkdtemp(prefix="bench-grammar-")) / "tiny-qwen3")
    from rlvr.engines.local_policy import build_local_policy, policy_corpus

    out = Path(tempfile.mkdtemp(prefix="bench-grammar-")) / "policy"
    texts, _ = policy_corpus(ROOT)
    build_local_policy(out, texts, seed=0, vocab_size=4096,
                       hidden_size=128, layers=4, heads=4, kv_heads=2, intermediate_size=512)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="", help="a policy directory (default: a random one)")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new", type=int, default=384, help="max tokens per turn (deployment: 384)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--quick", action="store_true", help="small run (CI smoke)")
    ap.add_argument("--qwen", action="store_true", help="the tiny Qwen3 at the 151k vocabulary")
    ap.add_argument("--score-tokens", type=int, default=4096,
                    help="selected tokens of the logprob-memory probe (0 = skip it)")
    ap.add_argument("--chunks", default="512,4096", help="LM-head row chunks to probe")
    args = ap.parse_args()
    if args.quick:
        args.group, args.new, args.repeats = 2, 48, 1
    torch.set_num_threads(args.threads)
    model = policy_dir(args)
    engine = TorchEngine(model, prefix_cache_tokens=0)  # every call prefills: equal work
    codec = load_codec(model)
    system = system_prompt(bool(codec.describe()))
    prompts = [codec.initial_prompt(system, text) for text in INSTRUCTIONS]
    batch = [p for p in prompts for _ in range(args.group)]
    name = "tool_call" if codec.format.name == "rlvr" else f"tool_call.{codec.format.name}"
    t0 = time.perf_counter()
    grammar = engine.grammar(name)
    build_s = time.perf_counter() - t0

    def params(g: str) -> SamplingParams:
        return SamplingParams(temperature=1.0, max_new_tokens=args.new,
                              stop_token_ids=tuple(codec.stop_ids), grammar=g)

    best = {"free": float("inf"), "tool_call": float("inf")}
    t0 = time.perf_counter()
    engine.grammar(name).start([prompts[0]])
    start_ms = (time.perf_counter() - t0) * 1e3
    tokens, ended = {}, {}
    for r in range(args.repeats):
        for kind, g in (("free", ""), ("tool_call", name)):
            t0 = time.perf_counter()
            out = engine.generate(batch, params(g), seed=r)
            dt = time.perf_counter() - t0
            n = sum(len(s.token_ids) for s in out)
            best[kind] = min(best[kind], dt / n)
            tokens[kind], ended[kind] = n, sum(s.finish_reason == "stop" for s in out)
            if g:
                constrained = [s.token_ids for s in out]
    t0 = time.perf_counter()
    replayed = sum(len(grammar.replay(ids)) for ids in constrained)
    replay_ms = (time.perf_counter() - t0) / replayed * 1e3
    result = {
        "model": str(model), "vocab": codec.vocab_size, "grammar": name,
        "grammar_build_s": round(build_s, 3), "matcher_start_ms": round(start_ms, 3),
        "prompt_tokens": len(prompts[0]), "samples": len(batch), "max_new_tokens": args.new,
        "ms_per_token_free": round(best["free"] * 1e3, 4),
        "ms_per_token_grammar": round(best["tool_call"] * 1e3, 4),
        "grammar_over_free": round(best["tool_call"] / best["free"], 3),
        "tokens_free": tokens["free"], "tokens_grammar": tokens["tool_call"],
        "turns_ended_free": ended["free"], "turns_ended_grammar": ended["tool_call"],
        "replay_ms_per_token": round(replay_ms, 4),
    }
    if args.score_tokens:
        result["logprob_peak_rss_mb"] = {c: logprob_peak_rss_mb(model, args.score_tokens, c)
                                         for c in map(int, args.chunks.split(","))}
    print(f"grammar {name} over {codec.vocab_size} tokens: built in {build_s:.2f} s")
    print(f"sampler: {result['ms_per_token_free']} ms/token free, "
          f"{result['ms_per_token_grammar']} ms/token under the grammar "
          f"(x{result['grammar_over_free']}); trainer replay {result['replay_ms_per_token']} "
          "ms/token")
    print(json.dumps(result))


def logprob_peak_rss_mb(model: Path, n_tokens: int, chunk: int) -> float:
    """Peak RSS (MB) of a fresh child process that loads `model` and runs one forward +
    backward of `sequence_logprobs` over `n_tokens` selected tokens, head chunk `chunk`,
    minus its RSS just before (the model and the interpreter)."""
    import subprocess

    code = f"""
import resource, torch
from rlvr.engines.logprobs import sequence_logprobs
from rlvr.engines.model_dir import load_policy
torch.set_num_threads(1)
model = load_policy({str(model)!r}).model.train()
ids = torch.randint(0, model.config.vocab_size, (1, {n_tokens} + 1))
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
scores = sequence_logprobs(model, ids, only=torch.ones_like(ids, dtype=torch.bool)[:, 1:],
                           chunk_tokens={chunk})
scores.logprobs.sum().backward()
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    return round(float(out.stdout.strip().splitlines()[-1]), 1)


if __name__ == "__main__":
    main()
