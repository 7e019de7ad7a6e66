"""`apply_verdict` / `apply_verdicts`: the one place a verdict becomes a reward. A success, a
failure, a verifier infra error (no reward, never a failure), a diff the patch policy
refused, a rollout that never submitted; the rebuild check and the data contract agree."""
from __future__ import annotations

import pytest

from agentkit import ReplayEngine, count_task, tiny_policy_dir
from rlvr.agent.collector import episode_specs
from rlvr.agent.drive import run_episode, step_token
from rlvr.agent.episode import Budgets, Episode, EpisodeConfig
from rlvr.agent.passport import (apply_verdict, apply_verdicts, needs_verdict, outcome_summary,
                                 passport_row, read_trajectories, rebuild_check,
                                 write_trajectories)
from rlvr.agent.tools import format_tool_call
from rlvr.agent.transcript import ChatCodec
from rlvr.errors import ArtifactError

SUBMIT = format_tool_call("submit", {}, "Done.")
VIEW = format_tool_call("view", {"path": "mini/core.py", "start": 1, "end": 3})
FIX = format_tool_call("edit", {"path": "mini/core.py", "old": "if v <= limit:",
                                "new": "if v < limit:"}, "Flip the comparison.")


def verdict(reason: str, version: str = "enclave-x") -> dict:
    return {"success": reason == "none", "reason": reason, "verifier_version": version}


@pytest.fixture(scope="module")
def cfg():
    return EpisodeConfig(codec=ChatCodec.from_model_dir(tiny_policy_dir()),
                         budgets=Budgets(max_turns=4, max_new_tokens_per_turn=128,
                                         max_new_tokens_per_episode=800,
                                         max_context_tokens=4096))


def rollout(cfg, actions, index=0) -> dict:
    spec = episode_specs(count_task(), index + 1, cfg.run_seed)[index]
    row = passport_row(run_episode(spec, ReplayEngine(cfg.codec, actions), cfg))
    assert rebuild_check(row) == []
    return row


@pytest.fixture(scope="module")
def submitted(cfg):
    row = rollout(cfg, [VIEW, FIX, SUBMIT])
    assert needs_verdict(row) and row["verdict_reason"] is None and row["reward"] is None
    return row


@pytest.fixture(scope="module")
def refused(cfg):
    """A diff touching a build file: the static patch policy refuses it at rollout time."""
    spec = episode_specs(count_task(), 3, cfg.run_seed)[2]
    ep = Episode(spec, cfg, engine_name="replay")
    ep.start()
    (ep.workspace.repo / "setup.cfg").write_text("[tool:pytest]\naddopts = -p no:randomly\n")
    step_token(ReplayEngine(cfg.codec, [SUBMIT]), [ep], cfg)
    ep.finish()
    return passport_row(ep)


def test_success(submitted):
    row = apply_verdict(submitted, verdict("none"))
    assert (row["reward_outcome"], row["verdict_reason"], row["verifier_version"]) == (
        1.0, "none", "enclave-x")
    assert row["reward"] == pytest.approx(1.0 + 0.05 * row["reward_format"]
                                          - 0.05 * row["reward_length"])
    assert rebuild_check(row) == []
    assert submitted["reward"] is None  # the input row is not modified


@pytest.mark.parametrize("reason", ["tests_failed", "apply_failed", "timeout",
                                    "resource_limit", "patch_rejected"])
def test_failure(submitted, reason):
    row = apply_verdict(submitted, verdict(reason))
    assert (row["reward_outcome"], row["verdict_reason"]) == (0.0, reason)
    assert row["reward"] == pytest.approx(0.05 * row["reward_format"]
                                          - 0.05 * row["reward_length"])
    assert rebuild_check(row) == []


def test_a_verifier_infra_error_is_no_reward_and_never_a_failure(submitted, refused):
    row = apply_verdict(submitted, verdict("infra_error"))
    assert row["reward_outcome"] is None and row["reward"] is None
    assert (row["verdict_reason"], row["verifier_version"]) == ("infra_error", "enclave-x")
    assert rebuild_check(row) == []
    failed = apply_verdict(submitted, verdict("tests_failed"))
    ok = apply_verdict(submitted, verdict("none"))
    summary = outcome_summary([row, failed, ok, refused])
    # judged: the failure, the success and the refused diff; the infra error counted apart
    assert (summary["judged"], summary["infra_errors"]) == (3, 1)
    assert summary["success_rate"] == pytest.approx(1 / 3)
    assert summary["outcome_reasons"] == {"infra_error": 1, "none": 1, "patch_rejected": 1,
                                          "tests_failed": 1}


def test_a_refused_diff_is_patch_rejected_without_a_verifier(refused):
    from rlvr.tasks.patches import PATCH_POLICY_VERSION

    assert refused["stop_reason"] == "submitted" and not refused["patch_ok"]
    assert not needs_verdict(refused)
    assert (refused["reward_outcome"], refused["verdict_reason"]) == (0.0, "patch_rejected")
    assert refused["verifier_version"] == PATCH_POLICY_VERSION
    assert refused["reward"] == pytest.approx(0.05 * refused["reward_format"]
                                              - 0.05 * refused["reward_length"])
    assert rebuild_check(refused) == []
    # forced: no verdict changes it
    assert apply_verdict(refused, verdict("none")) == refused


def test_a_rollout_that_did_not_submit_keeps_its_forced_zero(cfg):
    row = rollout(cfg, [VIEW])  # max_turns
    assert row["stop_reason"] == "max_turns" and not needs_verdict(row)
    assert (row["reward_outcome"], row["reward"], row["verdict_reason"]) == (0.0, 0.0, None)
    assert apply_verdict(row, verdict("none")) == row


def test_malformed_verdicts_are_refused(submitted):
    with pytest.raises(ArtifactError, match="contradicts reason 'tests_failed'"):
        apply_verdict(submitted, {"success": True, "reason": "tests_failed",
                                  "verifier_version": "v"})
    with pytest.raises(ArtifactError, match="reason 'flaky' is not one of"):
        apply_verdict(submitted, {"success": False, "reason": "flaky", "verifier_version": "v"})


def test_rebuild_check_catches_a_reason_that_disagrees_with_the_outcome(submitted, refused):
    forged = {**apply_verdict(submitted, verdict("tests_failed")), "verdict_reason": "none"}
    assert any("verdict_reason 'none' implies 1.0" in p for p in rebuild_check(forged))
    unexplained = {**apply_verdict(submitted, verdict("none")), "verdict_reason": None}
    assert any("without a verdict_reason" in p for p in rebuild_check(unexplained))
    relabelled = {**refused, "verdict_reason": "tests_failed"}
    assert any("patch policy refused" in p for p in rebuild_check(relabelled))
    infra_scored = {**apply_verdict(submitted, verdict("infra_error")), "reward_outcome": 0.0}
    assert any("implies None" in p for p in rebuild_check(infra_scored))


def test_apply_verdicts_joins_exactly(cfg, submitted, refused):
    other = rollout(cfg, [VIEW, FIX, SUBMIT], index=1)
    rows = [submitted, refused, other]
    verdicts = [{**verdict("none"), "candidate_id": submitted["trajectory_id"],
                 "origin": f"rollout:{submitted['trajectory_id']}"},
                {**verdict("infra_error"), "candidate_id": other["trajectory_id"],
                 "origin": f"rollout:{other['trajectory_id']}"},
                {**verdict("none"), "candidate_id": "t:reference", "origin": "reference"}]
    scored = apply_verdicts(rows, verdicts)
    assert [r["verdict_reason"] for r in scored] == ["none", "patch_rejected", "infra_error"]
    assert [r["reward_outcome"] for r in scored] == [1.0, 0.0, None]
    with pytest.raises(ArtifactError, match="v.parquet: no verdict for 1 submitted rollout"):
        apply_verdicts(rows, verdicts[:1], where="v.parquet")
    ghost = {**verdicts[0], "candidate_id": "ghost#0", "origin": "rollout:ghost#0"}
    with pytest.raises(ArtifactError, match="trajectories file lacks, e.g. 'ghost#0'"):
        apply_verdicts(rows, verdicts + [ghost])
    decided = {**verdicts[0], "candidate_id": refused["trajectory_id"]}
    with pytest.raises(ArtifactError, match="decided at rollout time"):
        apply_verdicts([refused], [decided])


def test_the_contract_allows_null_reasons_and_refuses_unknown_ones(tmp_path, submitted,
                                                                  refused):
    path = tmp_path / "t.parquet"
    scored = apply_verdict(submitted, verdict("infra_error"))
    write_trajectories(path, [scored, {**refused, "trajectory_id": "r#0"},
                              {**submitted, "trajectory_id": "u#0"}])
    got = read_trajectories(path).to_pylist()
    assert [r["verdict_reason"] for r in got] == ["infra_error", "patch_rejected", None]
    with pytest.raises(ArtifactError, match="verdict_reason"):
        write_trajectories(tmp_path / "bad.parquet", [{**scored, "verdict_reason": "flaky"}])
