"""Demonstration selection: only verified, clean, distinct trajectories are kept; every other
rollout is logged with the reason of the first rule it broke; caps and the task-level
validation split are seeded."""
from __future__ import annotations

import pytest

from rlvr.artifacts import schemas
from rlvr.errors import ArtifactError
from rlvr.train.demos import (data_hash, read_demonstrations, select_demonstrations,
                              token_hash, write_selection)
from rlvr.train.sft_config import DemoParams, SFTParams


def rollout(tid: str, task: str = "t1", **over) -> dict:
    """A verified, clean, submitted rollout passport (the fields selection reads)."""
    ids = [1, 7, 8, 9] + [10 + ord(ch) for ch in tid][:2] + [200 + sum(map(ord, tid)) % 50, 2]
    row = {
        "trajectory_id": tid, "task_id": task, "family": "fam", "engine": "scripted",
        "policy_version": "teacher-1", "token_ids": ids, "loss_mask": [0, 0, 0, 0] + [1] * (len(ids) - 4),
        "reward_outcome": 1.0, "stop_reason": "submitted", "stop_detail": "", "truncated": False,
        "truncation_source": "", "infra_error": False, "n_invalid_actions": 0,
        "turns": [{"turn": 0, "action_valid": True}, {"turn": 1, "action_valid": True}],
        "verdict_reason": "none",
    }
    row.update(over)
    return row


PARAMS = SFTParams(demos=DemoParams(max_per_task=0, val_fraction=0.0), max_seq_len=100)


@pytest.mark.parametrize("over, reason", [
    ({"infra_error": True, "stop_reason": "infra_error", "reward_outcome": None}, "infra_error"),
    ({"verdict_reason": "infra_error", "reward_outcome": None}, "infra_error"),
    ({"reward_outcome": 0.0, "verdict_reason": "tests_failed"}, "not_verified"),
    ({"reward_outcome": None, "verdict_reason": None}, "not_verified"),
    ({"stop_reason": "max_turns"}, "not_submitted"),
    ({"truncated": True, "truncation_source": "observation"}, "truncated"),
    ({"n_invalid_actions": 1}, "invalid_action"),
    ({"turns": [{"turn": 0, "action_valid": True}, {"turn": 1, "action_valid": False}]},
     "invalid_action"),
    ({"token_ids": list(range(101)), "loss_mask": [1] * 101}, "too_long"),
])
def test_each_rule_drops_a_crafted_demonstration_with_its_reason(over, reason):
    sel = select_demonstrations([rollout("good-1"), rollout("bad-2", **over)], PARAMS)
    assert [d["trajectory_id"] for d in sel.train] == ["good-1"]
    assert len(sel.drops) == 1
    drop = sel.drops[0]
    assert (drop["trajectory_id"], drop["reason"]) == ("bad-2", reason)
    assert drop["detail"]
    assert sel.summary()[f"dropped_{reason}"] == 1


def test_a_verified_success_with_an_infra_error_is_an_infra_error_not_a_demo():
    """The infra rule comes first: an infra error is never a task outcome."""
    sel = select_demonstrations([rollout("x-1", infra_error=True)], PARAMS)
    assert not sel.train and sel.drops[0]["reason"] == "infra_error"


def test_token_identical_rollouts_are_deduplicated_across_tasks():
    a = rollout("a-1", task="t1")
    b = rollout("b-1", task="t2", token_ids=list(a["token_ids"]))  # same ids, other task
    c = rollout("c-2", task="t1")
    sel = select_demonstrations([a, b, c], PARAMS)
    kept = {d["trajectory_id"] for d in sel.train}
    assert len(kept) == 2 and "c-2" in kept and len(kept & {"a-1", "b-1"}) == 1
    (dup,) = sel.drops
    assert dup["reason"] == "duplicate" and dup["token_hash"] == token_hash(a["token_ids"])
    assert len({d["token_hash"] for d in sel.train}) == 2


def test_cap_keeps_a_seeded_subset_per_task_and_logs_the_rest():
    rows = [rollout(f"t1-{i}", task="t1") for i in range(6)] + [rollout("t2-9", task="t2")]
    params = SFTParams(demos=DemoParams(max_per_task=2, val_fraction=0.0), seed=3)
    sel = select_demonstrations(rows, params)
    per_task = {}
    for d in sel.train:
        per_task[d["task_id"]] = per_task.get(d["task_id"], 0) + 1
    assert per_task == {"t1": 2, "t2": 1}
    assert sorted(d["reason"] for d in sel.drops) == ["over_cap"] * 4
    # same seed, rows in another order: the same choice; another seed: a different one
    again = select_demonstrations(list(reversed(rows)), params)
    assert [d["trajectory_id"] for d in again.train] == [d["trajectory_id"] for d in sel.train]
    others = {tuple(sorted(d["trajectory_id"] for d in select_demonstrations(
        rows, SFTParams(demos=DemoParams(max_per_task=2, val_fraction=0.0), seed=s)).train))
        for s in range(6)}
    assert len(others) > 1


def test_validation_holds_out_whole_tasks_seeded():
    rows = [rollout(f"{t}-{i}", task=t) for t in ("a", "b", "c", "d", "e") for i in range(3)]
    params = SFTParams(demos=DemoParams(max_per_task=0, val_fraction=0.4), seed=1)
    sel = select_demonstrations(rows, params)
    train_tasks = {d["task_id"] for d in sel.train}
    val_tasks = {d["task_id"] for d in sel.val}
    assert len(val_tasks) == 2 and not train_tasks & val_tasks
    assert len(sel.train) + len(sel.val) == 15 and all(d["part"] == "val" for d in sel.val)
    assert select_demonstrations(rows, params).val == sel.val
    # a single task is never split away: nothing would be left to train on
    one = select_demonstrations(rows[:3], params)
    assert len(one.train) == 3 and not one.val


def test_artifacts_round_trip_under_their_contracts(tmp_path):
    rows = [rollout(f"t{i}-{i}", task=f"t{i}") for i in range(5)]
    rows.append(rollout("bad-7", reward_outcome=0.0))
    params = SFTParams(demos=DemoParams(max_per_task=1, val_fraction=0.2))
    sel = select_demonstrations(rows, params)
    write_selection(sel, tmp_path / "sft_data.parquet", tmp_path / "sft_drops.parquet")
    train, val = read_demonstrations(tmp_path / "sft_data.parquet")
    assert train == sel.train and val == sel.val
    assert data_hash(train + val) == data_hash(list(reversed(sel.train + sel.val)))
    assert data_hash(train) != data_hash(train + val)
    from rlvr.artifacts.io import read_table
    drops = read_table(tmp_path / "sft_drops.parquet", schemas.SFT_DROPS, "sft_drops")
    assert drops.column("reason").to_pylist() == ["not_verified"]


def test_a_drop_log_with_an_unknown_reason_breaks_the_contract(tmp_path):
    from rlvr.artifacts.io import write_table
    bad = [{"trajectory_id": "x", "task_id": "t", "family": "f", "reason": "bored",
            "detail": "d", "token_hash": ""}]
    with pytest.raises(ArtifactError, match="sft_drops"):
        write_table(tmp_path / "d.parquet", bad, schemas.SFT_DROPS, "sft_drops")
