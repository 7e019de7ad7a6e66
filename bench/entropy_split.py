"""Bench: where a GRPO run's token entropy lives — the free reasoning text of a turn or its
tool call (from `<tool_call>` to the end of the turn).

`train/entropy` is a mean over every policy token: the free reasoning text of each turn
(about a third of the tokens at the CPU default's SFT start), which no verdict favours
either way, and the grammar-constrained call that decides the reward. The trainer logs the
split every step since it was found here (`train/entropy_call`, `train/entropy_reasoning`,
the same `rlvr.train.grpo_behaviour.call_region`); this bench measures it after the fact, for runs
that predate it, on fixed transcripts: two policies scored teacher-forced on the *same*
rollouts (the trainer's own `sequence_logprobs` under the replayed grammar masks, i.e. the
distribution `train/entropy` measures), the start policy and a GRPO checkpoint, on the
rollouts of a run's first loop step (sampled by the start policy) and of its last (sampled
by the checkpoint's predecessor). Run:

    .venv/bin/python bench/entropy_split.py --params params.yaml --base models/policy-sft \\
        --checkpoint build/collapse-c/collapse/seed0 \\
        --rollouts build/collapse-c/collapse/seed0-work --out entropy_split.json

The last line is one JSON object: per rollout set and policy, mean entropy and token count
of each region.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlvr.agent.passport import read_trajectories  # noqa: E402
from rlvr.agent.rollout import load_params as load_rollout_params  # noqa: E402
from rlvr.engines.base import SamplingParams  # noqa: E402
from rlvr.engines.constraint import TokenGrammar  # noqa: E402
from rlvr.engines.model_dir import load_policy  # noqa: E402
from rlvr.train.grpo_batch import grammar_masks  # noqa: E402
from rlvr.train.grpo_behaviour import call_region, call_token_id  # noqa: E402
from rlvr.engines.logprobs import sequence_logprobs  # noqa: E402


def region_entropy(model, rows, scoring: SamplingParams, grammar, call_id: int) -> dict:
    """Mean processed-distribution entropy of the policy tokens of `rows`, per region."""
    sums = {"reasoning": 0.0, "call": 0.0}
    counts = {"reasoning": 0, "call": 0}
    with torch.inference_mode():
        for r in rows:
            ids = torch.tensor(r["token_ids"], dtype=torch.long)
            mask = torch.tensor(r["loss_mask"], dtype=torch.bool)
            turns = torch.tensor(r["turn_ids"], dtype=torch.long)
            allowed = grammar_masks(ids, mask, turns, grammar)
            scores = sequence_logprobs(model, ids[None], only=mask[None, 1:], params=scoring,
                                       with_entropy=True, allowed=allowed)
            ent = scores.entropy[0][mask[1:]]
            region = call_region(ids[None], mask[None, 1:], turns[None, 1:].clamp(min=0), call_id)
            in_call = region[0][mask[1:]]
            for name, sel in (("call", in_call), ("reasoning", ~in_call)):
                sums[name] += float(ent[sel].sum())
                counts[name] += int(sel.sum())
    total = sum(counts.values())
    return {**{f"{k}_entropy": round(sums[k] / counts[k], 4) if counts[k] else None for k in sums},
            **{f"{k}_tokens": counts[k] for k in counts},
            "all_entropy": round(sum(sums.values()) / total, 4) if total else None}


def rollout_sets(rollouts: Path) -> dict[str, list[dict]]:
    """The rollouts of the first loop step (policy_step 0) and of the last one recorded."""
    rows = [r for f in sorted(rollouts.rglob("*.parquet")) if ".timings" not in f.name
            for r in read_trajectories(f).to_pylist()]
    if not rows:
        raise SystemExit(f"{rollouts}: no rollout shards")
    last = max(r["policy_step"] for r in rows)
    return {"first_step": [r for r in rows if r["policy_step"] == 0],
            f"last_step (policy_step {last})": [r for r in rows if r["policy_step"] == last]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml", help="its rollout.decoding")
    ap.add_argument("--base", type=Path, required=True, help="the run's start policy")
    ap.add_argument("--checkpoint", type=Path, required=True, help="the GRPO checkpoint")
    ap.add_argument("--rollouts", type=Path, required=True, help="the run's work directory")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rollout, _ = load_rollout_params(args.params)
    policies = {"start": load_policy(args.base), "checkpoint": load_policy(args.checkpoint)}
    tok = policies["start"].tokenizer
    call_id = call_token_id(tok)
    if call_id is None:
        raise SystemExit(f"{args.base}: the tokenizer has no <tool_call> token to split at")
    scoring = SamplingParams.of(rollout.decoding, max_new_tokens=1)
    grammar = (TokenGrammar(scoring.grammar, tok, policies["start"].model.config.vocab_size)
               if scoring.grammar else None)
    result: dict = {"checkpoint": str(args.checkpoint), "grammar": scoring.grammar}
    for set_name, rows in rollout_sets(args.rollouts).items():
        result[set_name] = {"rollouts": len(rows)}
        for name, policy in policies.items():
            result[set_name][name] = region_entropy(policy.model, rows, scoring, grammar, call_id)
            print(set_name, name, result[set_name][name], flush=True)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
