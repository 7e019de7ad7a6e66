"""`rollout_differences`: how two schedules (or devices) that must sample the same rollouts
are compared (tests/test_continuous_schedule.py, bench/schedule.py). Float rounding of the
behaviour logprobs and of their per-turn sums passes; any other difference is named."""
from __future__ import annotations

import copy

from rlvr.agent.passport import rollout_differences


def _row() -> dict:
    return {"trajectory_id": "t@s0#0", "token_ids": [1, 2, 3],
            "logprobs": [float("nan"), -0.5, -1.25],
            "turns": [{"turn": 0, "action_text": "x", "gen_tokens": 2, "logprob_sum": -1.75}],
            "reward": 0.0}


def test_rounding_passes_and_anything_else_is_named():
    a = [_row()]
    b = copy.deepcopy(a)
    b[0]["logprobs"][2] += 3e-6
    b[0]["turns"][0]["logprob_sum"] += 3e-6
    assert rollout_differences(a, b) == []
    for field, change in (("token_ids", lambda r: r["token_ids"].__setitem__(2, 4)),
                          ("logprobs", lambda r: r["logprobs"].__setitem__(1, -0.6)),
                          ("logprobs", lambda r: r["logprobs"].__setitem__(0, -0.1)),
                          ("turns", lambda r: r["turns"][0].__setitem__("action_text", "y")),
                          ("turns", lambda r: r["turns"][0].__setitem__("logprob_sum", -1.7)),
                          ("reward", lambda r: r.__setitem__("reward", 1.0)),
                          ("extra", lambda r: r.__setitem__("extra", 1))):
        c = copy.deepcopy(a)
        change(c[0])
        assert rollout_differences(a, c) == [f"t@s0#0: {field}"]
    assert rollout_differences(a, a + a) == ["1 rollouts against 2"]
