"""Lineage: every stage run reaches MLflow with its params, metrics and input hashes, and the
Prefect flow runs dvc.yaml's stages in dependency order (one DAG definition)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import pytest

from rlvr.orchestrate.dag import stage_order
from rlvr.errors import ConfigError
from rlvr.tracking.stage import stage_run


@dataclass(frozen=True)
class P:
    seed: int = 3
    name: str = "x"


def test_stage_run_logs_params_metrics_and_input_hashes(tmp_path, monkeypatch):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv("RLVR_TRACKING", raising=False)
    data = tmp_path / "in.parquet"
    data.write_bytes(b"input bytes")
    metrics = tmp_path / "metrics.json"
    with stage_run("demo", P(), inputs={"tasks": data}, metrics_path=metrics) as run:
        run.log_metrics({"accepted": 4, "by": {"train": 3}})
    assert json.loads(metrics.read_text()) == {"accepted": 4, "by": {"train": 3}}
    mlflow.set_tracking_uri(uri)
    (found,) = mlflow.search_runs(experiment_names=["rlvr"], output_format="list")
    assert found.data.params == {"seed": "3", "name": "x"}
    assert found.data.metrics == {"accepted": 4.0, "by.train": 3.0}
    assert found.data.tags["input.tasks.md5"] == hashlib.md5(data.read_bytes()).hexdigest()
    assert found.data.tags["stage"] == "demo"


def test_failed_stage_writes_no_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_TRACKING", "off")
    metrics = tmp_path / "metrics.json"
    metrics.write_text('{"old": 1}\n')
    with pytest.raises(RuntimeError):
        with stage_run("demo", P(), metrics_path=metrics):
            raise RuntimeError("stage body failed")
    assert json.loads(metrics.read_text()) == {"old": 1}


def test_flow_order_follows_dvc_yaml():
    order = stage_order()
    assert order.index("curate") < order.index("selfcheck")
    for before, after in [("curate", "synthesize"), ("synthesize", "rollout"), ("curate", "rollout"),
                          ("init_policy", "rollout"), ("rollout", "verify")]:
        if before in order and after in order:
            assert order.index(before) < order.index(after)


def test_flow_order_reads_dependencies(tmp_path):
    dag = tmp_path / "dvc.yaml"
    dag.write_text(
        "stages:\n"
        "  b:\n    cmd: x\n    deps: [out/a.parquet]\n    outs: [out/b.parquet]\n"
        "  a:\n    cmd: x\n    deps: [data]\n    outs: [out/a.parquet]\n"
        "  c:\n    cmd: x\n    deps: [out/b.parquet, out/a.parquet]\n")
    assert stage_order(dag) == ["a", "b", "c"]


def test_unreadable_dag_is_named(tmp_path):
    with pytest.raises(ConfigError, match="dvc.yaml"):
        stage_order(tmp_path / "dvc.yaml")
