"""One tracked stage run: params, input hashes, metrics -> MLflow and a DVC metrics file.

Every stage opens a `StageRun`; it is how a metric traces back to the exact params and
input artifacts (by content hash) that made it (SPEC §9). MLflow uses a sqlite store at the
repo root unless MLFLOW_TRACKING_URI says otherwise (its file store is deprecated).
"""
from __future__ import annotations

import logging
import os
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from rlvr.artifacts.io import file_sha256, write_json
from rlvr.config import as_dict

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
EXPERIMENT = "rlvr"


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


@dataclass
class StageRun:
    stage: str
    metrics_path: Path
    metrics: dict[str, Any] = field(default_factory=dict)
    artifacts: list[Path] = field(default_factory=list)
    # (step, {name: value}) in order: curves (loss, lr, eval numbers) logged with `step`
    steps: list[tuple[int, dict[str, float]]] = field(default_factory=list)

    def log_metrics(self, values: dict[str, Any]) -> None:
        self.metrics.update(values)

    def log_step(self, step: int, values: dict[str, Any]) -> None:
        """Per-step numbers (a training loop's `log` callback): MLflow gets them with `step`."""
        self.steps.append((int(step), _numeric(values)))

    def log_artifact(self, path: Path | str) -> None:
        self.artifacts.append(Path(path))


def _numeric(values: dict[str, Any]) -> dict[str, float]:
    out = {}
    for k, v in values.items():
        if isinstance(v, bool):
            out[k] = float(v)
        elif isinstance(v, (int, float)):
            out[k] = float(v)
        elif isinstance(v, dict):
            out.update({f"{k}.{kk}": vv for kk, vv in _numeric(v).items()})
    return out


@contextmanager
def stage_run(stage: str, params: Any, *, inputs: dict[str, Path | str] | None = None,
              metrics_path: Path | str) -> Iterator[StageRun]:
    """Track one stage. Metrics are written (atomically) only if the stage body succeeds."""
    run = StageRun(stage=stage, metrics_path=Path(metrics_path))
    input_hashes = {f"input.{name}.sha256": file_sha256(p)
                    for name, p in (inputs or {}).items() if Path(p).is_file()}
    yield run
    write_json(run.metrics_path, run.metrics)
    _log_to_mlflow(stage, params, input_hashes, run)


def _log_to_mlflow(stage: str, params: Any, input_hashes: dict[str, str], run: StageRun) -> None:
    if os.environ.get("RLVR_TRACKING", "mlflow") == "off":
        return
    logging.getLogger("alembic").setLevel(logging.WARNING)
    import mlflow

    mlflow.set_tracking_uri(os.environ.get("MLFLOW_TRACKING_URI", DEFAULT_TRACKING_URI))
    mlflow.set_experiment(EXPERIMENT)
    flat = {k: str(v)[:500] for k, v in as_dict(params).items()} if params is not None else {}
    with mlflow.start_run(run_name=stage):
        mlflow.set_tags({"stage": stage, "git_commit": git_commit(), **input_hashes})
        if flat:
            mlflow.log_params(flat)
        mlflow.log_metrics(_numeric(run.metrics))
        for step, values in run.steps:
            mlflow.log_metrics(values, step=step)
        for path in run.artifacts:
            if path.is_file() and path.stat().st_size < (8 << 20):
                mlflow.log_artifact(str(path))
