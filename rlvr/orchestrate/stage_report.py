"""What a stage run reports to its orchestrator: its DVC metrics files read back, a Markdown
table of them with a link to the stage's MLflow run (a Prefect artifact in flows/)."""
from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

from rlvr.tracking.metrics_view import flatten

MLFLOW_UI_ENV = "RLVR_MLFLOW_UI"        # base URL of the MLflow UI for artifact links
DEFAULT_MLFLOW_UI = "http://127.0.0.1:5000"
MAX_METRIC_ROWS = 200                   # per metrics file in a stage's artifact


def read_metrics(path: Path) -> dict[str, Any] | None:
    """A DVC metrics file (json / yaml / toml), flattened to dotted keys; None if absent."""
    try:
        text = path.read_text()
    except OSError:
        return None
    if path.suffix == ".toml":
        data = tomllib.loads(text)
    elif path.suffix in (".yaml", ".yml"):
        data = yaml.safe_load(text)
    else:
        data = json.loads(text)
    return flatten(data) if isinstance(data, dict) else {path.stem: data}


RUN_CACHE_LINE = "is cached - skipping run"   # dvc/stage/__init__.py, a run-cache restore


def stage_outcome(changes: list[str] | None, lines: list[str]) -> str:
    """A succeeded stage's outcome, for its artifact: ran, skipped as up to date, or restored
    from DVC's run cache. `changes`: DVC's status of the stage before `dvc repro` ran it
    (`dag.stage_changes`); `lines`: what `dvc repro` printed."""
    if changes == []:
        return "up to date: DVC found nothing changed and did not run it"
    if any(RUN_CACHE_LINE in line for line in lines):
        return "restored from DVC's run cache: not run (these deps and params ran before)"
    if changes is None:
        return "succeeded (DVC's status was unavailable: ran, or found up to date)"
    return f"ran: DVC found {', '.join(changes)}"


def metrics_markdown(stage: str, outcome: str, metrics: dict[str, dict | None],
                     mlflow_link: str | None) -> str:
    """The stage's Prefect artifact: outcome, one metrics table per file, the MLflow run."""
    parts = [f"## Stage `{stage}`", "", f"**Outcome:** {outcome}", ""]
    parts.append(f"**MLflow run:** [{mlflow_link}]({mlflow_link})" if mlflow_link
                 else "**MLflow run:** none found (tracking off, or the stage did not run)")
    for name, values in metrics.items():
        parts += ["", f"### `{name}`", ""]
        if values is None:
            parts.append("_not written_")
            continue
        parts += ["| metric | value |", "| --- | --- |"]
        items = list(values.items())
        for key, value in items[:MAX_METRIC_ROWS]:
            shown = f"{value:.6g}" if isinstance(value, float) else json.dumps(value)
            parts.append(f"| `{key}` | {shown.replace('|', '/')} |")
        if len(items) > MAX_METRIC_ROWS:
            parts.append(f"\n_{len(items) - MAX_METRIC_ROWS} more in {name}_")
    if not metrics:
        parts += ["", "_this stage declares no metrics file_"]
    return "\n".join(parts) + "\n"


def find_mlflow_run(stage: str, since_ms: int, root: Path) -> str | None:
    """Link to the newest MLflow run tagged `stage=<stage>` started since `since_ms` (the
    run rlvr/tracking opened for this execution), or None."""
    if os.environ.get("RLVR_TRACKING", "mlflow") == "off":
        return None
    uri = os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        db = root / uri[len("sqlite:///"):]
        if not db.is_file():
            return None
        uri = f"sqlite:///{db}"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    if not experiments:
        return None
    runs = client.search_runs(experiments, max_results=1, order_by=["attributes.start_time DESC"],
                              filter_string=f"tags.stage = '{stage}' and "
                                            f"attributes.start_time >= {since_ms}")
    if not runs:
        return None
    run = runs[0].info
    base = uri if uri.startswith(("http://", "https://")) else os.environ.get(
        MLFLOW_UI_ENV, DEFAULT_MLFLOW_UI)
    return f"{base.rstrip('/')}/#/experiments/{run.experiment_id}/runs/{run.run_id}"


def artifact_key(stage: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes."""
    return "stage-" + re.sub(r"[^a-z0-9-]+", "-", stage.lower()).strip("-")
