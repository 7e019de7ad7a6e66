"""Stage `grpo` (thin): params + tasks + base policy in, the policy directory with its card,
metrics and the dashboard CSV out; bad input is a named error, exit 2, nothing written."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

import stages.grpo
from agentkit import count_task, tiny_policy_dir
from rlvr.tasks.pool import save_tasks
from rlvr.train.grpo_draws import STATUSES

ROOT = Path(__file__).resolve().parents[1]


def _params(tmp_path: Path, **grpo) -> Path:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["grpo"].update({"steps": 1, "group_size": 2, "groups_per_step": 1,
                           "tasks_per_draw": 1, "max_draws": 1, "consensus_runs": 1, **grpo})
    params["rollout"]["budgets"].update({"max_turns": 2, "max_new_tokens_per_turn": 16,
                                         "max_new_tokens_per_episode": 32})
    params["rollout"]["workers"] = 1
    params["sandbox"]["workers"] = 1
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def _argv(tmp_path: Path, params: Path) -> list[str]:
    return ["--params", str(params), "--tasks", str(tmp_path / "tasks.parquet"),
            "--base", str(tiny_policy_dir()), "--out", str(tmp_path / "policy-grpo"),
            "--work", str(tmp_path / "work"), "--metrics", str(tmp_path / "m.json"),
            "--plots", str(tmp_path / "c.csv")]


def test_the_stage_writes_policy_card_metrics_and_curves(tmp_path, monkeypatch, bwrap_sandbox):
    monkeypatch.setenv("RLVR_PROGRESS", "0")
    save_tasks(tmp_path / "tasks.parquet", [count_task()])
    stages.grpo.main(_argv(tmp_path, _params(tmp_path)))
    card = json.loads((tmp_path / "policy-grpo" / "training.json").read_text())
    assert card["trainer"] == "rlvr.train.grpo" and card["steps"] == 1
    assert card["passport"]["mode"] == "synchronous"
    assert [c["step"] for c in card["curves"]] == [1]
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["steps"] == 1 and set(metrics["flags"]) == set(card["flags"])
    # the untrained tiny policy solves nothing: its one group is dropped, and said so
    assert metrics["groups"]["identical_rewards"] == 1 and metrics["policy_step"] == 0
    assert set(metrics["groups"]) == set(STATUSES)       # `stale` too: every status counted
    rows = list(csv.DictReader((tmp_path / "c.csv").open()))
    assert [r["step"] for r in rows] == ["1"] and "train_reward" in rows[0]
    assert (tmp_path / "policy-grpo" / "model.safetensors").is_file()


def _exit2(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        stages.grpo.main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_the_stage_names_an_unknown_params_key(tmp_path, capsys):
    err = _exit2(_argv(tmp_path, _params(tmp_path, group_sise=2)), capsys)
    assert "grpo.group_sise" in err
    assert not (tmp_path / "m.json").exists() and not (tmp_path / "policy-grpo").exists()


def test_the_stage_names_a_meaningless_value(tmp_path, capsys):
    err = _exit2(_argv(tmp_path, _params(tmp_path, loss={"eps_low": 0.3, "eps_high": 0.1})),
                 capsys)
    assert "grpo.loss.eps_high" in err
    assert not (tmp_path / "policy-grpo").exists()


def test_the_stage_names_a_missing_tasks_file(tmp_path, capsys):
    err = _exit2(_argv(tmp_path, _params(tmp_path)), capsys)
    assert "tasks.parquet" in err
    assert not (tmp_path / "policy-grpo").exists()
