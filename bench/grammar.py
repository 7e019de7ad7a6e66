"""Bench: what the tool-call grammar (`decoding.grammar: tool_call`) costs the sampler and
the trainer, on the same model and prompts.

Run: `.venv/bin/python bench/grammar.py [--model models/policy-sft] [--quick]`. The sampler
side times TorchEngine turns (G samples per prompt, up to `--new` tokens, stopping at
end of turn) with and without the grammar, alternating in this one process, best of
`--repeats`, and reports seconds per generated token of each and their ratio (constrained
turns are different tokens, so tokens/s, not wall time, is the comparable unit). The trainer
side times `TokenGrammar.replay` (the masks the trainer recomputes for every policy token)
per token. Without `--model` a random CPU-default-sized model is built (its turns are
noise, so its grammar states are unlike a trained policy's). The last line is one JSON
object.
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

from rlvr.agent.prompt import SYSTEM_PROMPT  # noqa: E402
from rlvr.agent.transcript import ChatCodec  # noqa: E402
from rlvr.engines.base import SamplingParams  # noqa: E402
from rlvr.engines.torch_engine import TorchEngine  # noqa: E402

INSTRUCTIONS = ("`count_below` counts one value too many. Fix it.",
                "`parse_duration` rejects valid input. Fix it.",
                "`allocate` loses a cent when it splits an amount. Fix it.",
                "`lru_get` evicts the wrong entry. Fix it.")


def policy_dir(args) -> Path:
    if args.model:
        return Path(args.model)
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
    args = ap.parse_args()
    if args.quick:
        args.group, args.new, args.repeats = 2, 48, 1
    torch.set_num_threads(args.threads)
    model = policy_dir(args)
    engine = TorchEngine(model, prefix_cache_tokens=0)  # every call prefills: equal work
    codec = ChatCodec.from_model_dir(model)
    prompts = [codec.initial_prompt(SYSTEM_PROMPT, text) for text in INSTRUCTIONS]
    batch = [p for p in prompts for _ in range(args.group)]
    grammar = engine.grammar("tool_call")

    def params(g: str) -> SamplingParams:
        return SamplingParams(temperature=1.0, max_new_tokens=args.new,
                              stop_token_ids=tuple(codec.stop_ids), grammar=g)

    best = {"free": float("inf"), "tool_call": float("inf")}
    tokens, ended = {}, {}
    for r in range(args.repeats):
        for name, g in (("free", ""), ("tool_call", "tool_call")):
            t0 = time.perf_counter()
            out = engine.generate(batch, params(g), seed=r)
            dt = time.perf_counter() - t0
            n = sum(len(s.token_ids) for s in out)
            best[name] = min(best[name], dt / n)
            tokens[name], ended[name] = n, sum(s.finish_reason == "stop" for s in out)
            if g:
                constrained = [s.token_ids for s in out]
    t0 = time.perf_counter()
    replayed = sum(len(grammar.replay(ids)) for ids in constrained)
    replay_ms = (time.perf_counter() - t0) / replayed * 1e3
    result = {
        "model": str(model), "samples": len(batch), "max_new_tokens": args.new,
        "ms_per_token_free": round(best["free"] * 1e3, 4),
        "ms_per_token_grammar": round(best["tool_call"] * 1e3, 4),
        "grammar_over_free": round(best["tool_call"] / best["free"], 3),
        "tokens_free": tokens["free"], "tokens_grammar": tokens["tool_call"],
        "turns_ended_free": ended["free"], "turns_ended_grammar": ended["tool_call"],
        "replay_ms_per_token": round(replay_ms, 4),
    }
    print(f"sampler: {result['ms_per_token_free']} ms/token free, "
          f"{result['ms_per_token_grammar']} ms/token under the grammar "
          f"(x{result['grammar_over_free']}); trainer replay {result['replay_ms_per_token']} "
          "ms/token")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
