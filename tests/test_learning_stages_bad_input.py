"""Bad input to the `sft` and `evaluate` stages: a named error, exit 2, nothing written."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import stages.evaluate
import stages.sft

ROOT = Path(__file__).resolve().parents[1]


def _params(tmp_path: Path, section: str, **changes) -> Path:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params[section].update(changes)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def _exit2(main, argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def _sft_argv(tmp_path: Path, params: Path, trajectories: Path) -> list[str]:
    return ["--params", str(params), "--trajectories", str(trajectories),
            "--tasks", str(tmp_path / "tasks.parquet"), "--base", str(tmp_path / "base"),
            "--out", str(tmp_path / "policy-sft"), "--data-out", str(tmp_path / "d.parquet"),
            "--drops-out", str(tmp_path / "x.parquet"), "--metrics", str(tmp_path / "m.json"),
            "--plots", str(tmp_path / "c.csv")]


def test_sft_names_an_unknown_params_key(tmp_path, capsys):
    params = _params(tmp_path, "sft", learnig_rate=0.1)
    err = _exit2(stages.sft.main, _sft_argv(tmp_path, params, tmp_path / "t.parquet"), capsys)
    assert "learnig_rate" in err
    assert not any(tmp_path.glob("*.json")) and not (tmp_path / "policy-sft").exists()


def test_sft_names_a_meaningless_value(tmp_path, capsys):
    params = _params(tmp_path, "sft", learning_rate=-1.0)
    err = _exit2(stages.sft.main, _sft_argv(tmp_path, params, tmp_path / "t.parquet"), capsys)
    assert "sft.learning_rate" in err


def test_sft_names_a_missing_trajectories_file(tmp_path, capsys):
    params = _params(tmp_path, "sft")
    err = _exit2(stages.sft.main, _sft_argv(tmp_path, params, tmp_path / "missing.parquet"),
                 capsys)
    assert "missing.parquet" in err
    assert not (tmp_path / "policy-sft").exists() and not (tmp_path / "m.json").exists()


def test_evaluate_names_an_unknown_params_key(tmp_path, capsys):
    params = _params(tmp_path, "evaluate", samples_per_tsk=2)
    out = tmp_path / "eval.parquet"
    err = _exit2(stages.evaluate.main, [
        "--params", str(params), "--tasks", str(tmp_path / "tasks.parquet"), "--out", str(out),
        "--report", str(tmp_path / "r.json"), "--metrics", str(tmp_path / "m.json"),
        "--plots", str(tmp_path / "p.csv")], capsys)
    assert "samples_per_tsk" in err
    assert not out.exists() and not (tmp_path / "m.json").exists()
