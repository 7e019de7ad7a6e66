"""bench/schedule.py's equality check between the arms: float rounding of the behaviour
logprobs (and their per-turn sums) passes, any other difference fails the bench."""
from __future__ import annotations

import copy

from scriptkit import load_script


def _row() -> dict:
    return {"trajectory_id": "t@s0#0", "token_ids": [1, 2, 3],
            "logprobs": [float("nan"), -0.5, -1.25],
            "turns": [{"turn": 0, "action_text": "x", "logprob_sum": -1.75}], "reward": 0.0}


def test_rounding_passes_and_anything_else_fails():
    same = load_script("bench/schedule.py").same_rollouts
    a = [_row()]
    b = copy.deepcopy(a)
    b[0]["logprobs"][2] += 3e-6
    b[0]["turns"][0]["logprob_sum"] += 3e-6
    assert same(a, b)
    for change in (lambda r: r["token_ids"].__setitem__(2, 4),
                   lambda r: r["logprobs"].__setitem__(1, -0.6),
                   lambda r: r["turns"][0].__setitem__("action_text", "y"),
                   lambda r: r.__setitem__("reward", 1.0)):
        c = copy.deepcopy(a)
        change(c[0])
        assert not same(a, c)
