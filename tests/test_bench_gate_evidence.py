"""bench/gate_evidence.py on a miniature pipeline checkout: it evaluates exactly the gate's
champion and candidate (params.yaml `gate`), on the pipeline's seeded sets at the tier sizes
given, paired on the same tasks and sample seeds, and writes the eval.parquet `rlvr gate`
reads."""
from __future__ import annotations

import shutil
import sys

import pytest

from agentkit import build_tiny_policy, curated_pair
from rlvr.evaluate.report import check_pairing, read_eval
from rlvr.orchestrate.params import apply_param_overrides
from rlvr.tasks.pool import save_tasks
from scriptkit import REPO, load_script


@pytest.fixture
def checkout(tmp_path, bwrap_sandbox, monkeypatch):
    monkeypatch.setenv("RLVR_PROGRESS", "0")
    root = tmp_path / "checkout"
    (root / "artifacts").mkdir(parents=True)
    shutil.copyfile(REPO / "params.yaml", root / "params.yaml")
    apply_param_overrides(root, [
        "evaluate.budgets.max_turns=2", "evaluate.budgets.max_new_tokens_per_turn=12",
        "evaluate.budgets.max_new_tokens_per_episode=24", "evaluate.decoding.grammar=''",
        "evaluate.workers=1", "evaluate.consensus_runs=1"])
    train, heldout = curated_pair()
    save_tasks(root / "artifacts" / "tasks_authored.parquet", [train])
    save_tasks(root / "artifacts" / "tasks_synthetic.parquet", [heldout])
    build_tiny_policy(root / "models" / "policy-sft", seed=0)
    build_tiny_policy(root / "models" / "policy-grpo", seed=1)
    return root


def test_the_gate_pair_is_evaluated_paired_on_the_given_tiers(checkout, tmp_path, monkeypatch):
    out = tmp_path / "evidence"
    monkeypatch.setattr(sys, "argv", ["gate_evidence.py", "--root", str(checkout),
                                      "--tasks-per-tier", "1", "0", "1", "0",
                                      "--samples", "2", "--out", str(out)])
    load_script("bench/gate_evidence.py").main()
    rows = read_eval(out / "eval.parquet")
    assert {r["checkpoint"] for r in rows} == {"sft", "grpo"}  # params.yaml gate: champion, candidate
    assert {(r["tier"], r["task_id"]) for r in rows} == {("train", "mini-count"), ("heldout", "shop-price")}
    assert len(rows) == 2 * 2 * 2  # checkpoints x tasks x samples
    assert check_pairing(rows) == {"train": 2, "heldout": 2}  # same tasks, same sample seeds
