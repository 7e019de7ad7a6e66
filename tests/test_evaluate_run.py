"""The evaluation loop end to end (SPEC §8): real rollouts in the bwrap sandbox, real
verification in the enclave, eval rows, pairing of checkpoints, infra errors kept apart."""
from __future__ import annotations

import pytest

from agentkit import ReplayEngine, curated_pair
from rlvr.agent.episode import Budgets
from rlvr.agent.tools import format_tool_call
from rlvr.agent.transcript import ChatCodec
from rlvr.artifacts.schemas import EVAL
from rlvr.engines.local_policy import build_tiny_policy
from rlvr.evaluate.params import EvaluateParams, TierSizes
from rlvr.evaluate.report import (build_report, check_pairing, read_eval, read_eval_timings,
                                  summarize, write_eval)
from rlvr.evaluate.run import evaluate_checkpoint, evaluate_checkpoints
from rlvr.evaluate.sets import build_sets
from rlvr.sandbox.params import SandboxParams

SANDBOX = SandboxParams(backend="bwrap", workers=1)


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("RLVR_PROGRESS", "0")


def _sets():
    return build_sets(curated_pair(), TierSizes(), seed=0)


def _params(checkpoints: dict, budgets: Budgets | None = None) -> EvaluateParams:
    return EvaluateParams(
        checkpoints=checkpoints, samples_per_task=2, seed=5, workers=1, groups_per_wave=2,
        consensus_runs=1, budgets=budgets or Budgets(
            max_turns=3, max_new_tokens_per_turn=24, max_new_tokens_per_episode=60))


def test_two_checkpoints_of_the_tiny_policy_are_evaluated_paired(tmp_path, bwrap_sandbox):
    ckpts = {"a": tmp_path / "a", "b": tmp_path / "b"}
    build_tiny_policy(ckpts["a"], seed=0)
    build_tiny_policy(ckpts["b"], seed=1)
    params = _params(ckpts)
    sets = _sets()
    stats: dict = {}
    rows = evaluate_checkpoints(ckpts, sets, params, SANDBOX, parts_root=tmp_path / "parts",
                                stats=stats)
    assert len(rows) == 2 * 2 * 2  # checkpoints x tasks x samples
    write_eval(tmp_path / "eval.parquet", rows, timings_path=tmp_path / "eval.timings.parquet")
    back = read_eval(tmp_path / "eval.parquet")
    assert [set(r) for r in back] == [set(EVAL.names)] * len(rows)
    # each episode's seconds are in the sidecar, keyed like its row
    timings = read_eval_timings(tmp_path / "eval.timings.parquet")
    assert set(timings) == {(r["checkpoint"], r["run"], r["trajectory_id"]) for r in back}
    # Identical (task, seed) sets per tier; different weights.
    assert check_pairing(rows) == {"train": 2, "heldout": 2}
    keys = {name: sorted((r["tier"], r["task_id"], r["sample_index"], r["seed"],
                          r["trajectory_id"]) for r in rows if r["checkpoint"] == name)
            for name in ckpts}
    assert keys["a"] == keys["b"]
    versions = {name: {r["policy_version"] for r in rows if r["checkpoint"] == name}
                for name in ckpts}
    assert len(versions["a"]) == len(versions["b"]) == 1 and versions["a"] != versions["b"]
    # An untrained policy solves nothing; every row is graded or an infra error, nothing else.
    for r in rows:
        assert r["infra_error"] == (r["success"] is None)
        assert r["tier"] == {"mini-count": "train", "shop-price": "heldout"}[r["task_id"]]
    report = build_report(rows, checkpoints=list(ckpts), n_boot=200)
    assert set(report["paired"]) == {"b_vs_a"}
    assert set(report["checkpoints"]["a"]["tiers"]) == {"train", "heldout"}
    assert set(stats) == {"a", "b"}


class InfraOnOddItems:
    """A real enclave whose verdicts at odd positions of every batch are replaced by a
    verifier infra error flagged `server_unresponsive` (what a hung enclave worker reports)."""

    def __init__(self, inner):
        self.inner = inner

    def verify_many(self, items, seed: int = 0, progress=None):
        from rlvr.enclave.core import Verdict

        items = list(items)
        out = self.inner.verify_many(items, seed=seed, progress=progress)
        return [Verdict(v.task_id, False, "infra_error", 0, v.verifier_version, 0.0, {},
                        ["server_unresponsive"])
                if i % 2 else v for i, v in enumerate(out)]


def test_a_verifier_infra_error_is_excluded_not_a_failure(tmp_path, bwrap_sandbox):
    from rlvr.enclave.core import Enclave

    model = tmp_path / "policy"
    build_tiny_policy(model, seed=0)
    codec = ChatCodec.from_model_dir(model)
    fix = format_tool_call("edit", {"path": "mini/core.py", "old": "if v <= limit:",
                                    "new": "if v < limit:"}, "Flip the comparison.")
    engine = ReplayEngine(codec, [fix, format_tool_call("submit", {}, "Done.")])
    params = _params({"replay": str(model)}, Budgets(max_turns=4, max_new_tokens_per_turn=400,
                                                     max_new_tokens_per_episode=3000))
    with Enclave(backend="bwrap", workers=1, consensus_runs=1) as enclave:
        rows = evaluate_checkpoint(model, _sets(), params, SANDBOX, checkpoint="replay",
                                   engine=engine, enclave=InfraOnOddItems(enclave))
    by = {(r["task_id"], r["sample_index"]): r for r in rows}
    # mini-count: the fix verifies on sample 0; sample 1's verdict is an infra error.
    assert by[("mini-count", 0)]["success"] is True
    assert by[("mini-count", 1)]["success"] is None and by[("mini-count", 1)]["infra_error"]
    assert by[("mini-count", 1)]["verdict_reason"] == "infra_error"
    # shop-price: the edit names a file it lacks; the empty diff it submits fails on sample
    # 0 (the hidden tests run and reject it) and is an infra error on sample 1.
    assert [by[("shop-price", i)]["success"] for i in (0, 1)] == [False, None]
    assert by[("shop-price", 0)]["verdict_reason"] == "tests_failed"
    # the enclave's safety flags reach the eval rows of their episodes (the gate reports them)
    assert {k: r["safety_flags"] for k, r in by.items()} == {
        ("mini-count", 0): [], ("mini-count", 1): ["server_unresponsive"],
        ("shop-price", 0): [], ("shop-price", 1): ["server_unresponsive"]}
    train = summarize([r for r in rows if r["tier"] == "train"])
    assert (train["graded"], train["infra_errors"], train["pass_at_1"]) == (1, 1, 1.0)
    both = summarize(rows)
    assert both["infra_errors"] == 2 and both["graded"] == 2
    assert both["pass_at_1"] == pytest.approx(0.5)  # (1/1 + 0/1) / 2 tasks, not 1/4
