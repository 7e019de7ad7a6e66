"""Synthetic evaluations for the gate tests: `schemas.EVAL` rows of one checkpoint whose
per-task successes are given exactly, so a test states the numbers a rule must see."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Mapping

from rlvr.gate.params import GateParams

TIERS = ("train", "heldout_function", "heldout", "regression")


def rows(name: str, solved: Mapping[str, Callable[[int], int]] | None = None, *, tasks: int = 80,
         n: int = 4, version: str | None = None, step: int = 0,
         invalid: Callable[[str, int, int], int] = lambda tier, t, i: 0,
         infra: Callable[[str, int, int], bool] = lambda tier, t, i: False,
         tokens: int = 100, seed_base: int = 1000, task_prefix: str = "t",
         tiers=TIERS) -> list[dict]:
    """n samples of `tasks` tasks per tier; `solved[tier](t)`: how many of task t's samples
    succeed (default 2 of n); `invalid(tier, t, i)`: unparsed turns of sample i (of 4 turns);
    `infra(tier, t, i)`: that sample ended in an infra error."""
    solved = solved or {}
    out = []
    for tier in tiers:
        for t in range(tasks):
            c = solved.get(tier, lambda t: 2)(t)
            for i in range(n):
                bad = infra(tier, t, i)
                out.append({
                    "checkpoint": name, "run": "", "tier": tier, "family": f"fam{t % 3}",
                    "task_id": f"{task_prefix}-{tier}-{t:03d}", "sample_index": i,
                    "seed": seed_base + 10 * t + i,
                    "success": None if bad else i < c, "infra_error": bad,
                    "verdict_reason": "infra_error" if bad else
                    ("none" if i < c else "tests_failed"),
                    "safety_flags": [],
                    "stop_reason": "infra_error" if bad else "submitted",
                    "n_turns": 4, "n_invalid_actions": invalid(tier, t, i),
                    "n_trainable_tokens": tokens, "n_tokens": 4 * tokens,
                    "trajectory_id": f"traj-{tier}-{t:03d}-{i}",
                    "policy_version": version or f"sha256:{name:0>16}"[:23],
                    "policy_step": step,
                })
    return out


def params(**changes) -> GateParams:
    """Gate params for synthetic rows: no directories (the rows' policy versions are the
    hashes), a fast bootstrap."""
    base = GateParams(candidate="cand", champion="champ", candidate_dir="", champion_dir="",
                      bootstrap=400)
    return replace(base, **changes)


def better_on_target(t: int) -> int:
    """2 of 4 on every task, 4 of 4 on the first 10: +0.0625 on 80 tasks."""
    return 4 if t < 10 else 2
