"""Compare two pipeline runs stage by stage: what changed in params, metrics and artifacts.

The MLflow UI compares runs side by side; this is the same question asked of two *pipeline*
runs (two parent runs, `rlvr.tracking.pipeline`) from a terminal:

    python -m rlvr.tracking.compare KEY_A KEY_B      # pipeline keys, e.g. make-2026…-123

For every stage either run has (the latest run of that stage under each parent): the
params whose values differ, the metrics that differ (a, b, b - a), and the input / output
datasets whose DVC digest differs — an unchanged digest means the very same bytes.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from typing import Any

from rlvr.errors import ConfigError, exit_on_error
from rlvr.tracking.pipeline import find_pipeline_run
from rlvr.tracking.store import EXPERIMENT, tracking_uri as default_uri


@dataclass
class StageDiff:
    stage: str
    runs: tuple[str | None, str | None]      # run ids in a, b (None: the stage did not run)
    statuses: tuple[str | None, str | None]
    params: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    metrics: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    datasets: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)


def _stage_runs(client, experiment_id: str, parent_id: str) -> dict[str, Any]:
    runs = client.search_runs([experiment_id],
                              filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}'",
                              order_by=["attributes.start_time ASC"], max_results=1000)
    latest: dict[str, Any] = {}
    for r in runs:  # a rerun of a stage under the same parent supersedes the earlier one
        latest[r.data.tags.get("stage", r.info.run_name)] = r
    return latest


def _datasets(client, run) -> dict[str, str]:
    full = client.get_run(run.info.run_id)
    out = {}
    for d in full.inputs.dataset_inputs:
        context = {t.key: t.value for t in d.tags}.get("mlflow.data.context", "input")
        out[f"{context}:{d.dataset.name}"] = d.dataset.digest
    return out


def _differs(x: float | None, y: float | None) -> bool:
    if x is None or y is None:
        return x is not y
    return x != y and not (math.isnan(x) and math.isnan(y))


def diff_runs(client, run_a, run_b) -> StageDiff:
    """The differences between two runs of one stage (either may be None)."""
    stage = (run_a or run_b).data.tags.get("stage", (run_a or run_b).info.run_name)
    pa = run_a.data.params if run_a else {}
    pb = run_b.data.params if run_b else {}
    ma = run_a.data.metrics if run_a else {}
    mb = run_b.data.metrics if run_b else {}
    da = _datasets(client, run_a) if run_a else {}
    db = _datasets(client, run_b) if run_b else {}
    return StageDiff(
        stage=stage,
        runs=(run_a.info.run_id if run_a else None, run_b.info.run_id if run_b else None),
        statuses=(run_a.info.status if run_a else None, run_b.info.status if run_b else None),
        params={k: (pa.get(k), pb.get(k)) for k in sorted({*pa, *pb}) if pa.get(k) != pb.get(k)},
        metrics={k: (ma.get(k), mb.get(k)) for k in sorted({*ma, *mb})
                 if _differs(ma.get(k), mb.get(k))},
        datasets={k: (da.get(k), db.get(k)) for k in sorted({*da, *db})
                  if da.get(k) != db.get(k)})


def compare_pipeline_runs(key_a: str, key_b: str,
                          tracking_uri: str | None = None) -> list[StageDiff]:
    """Stage-by-stage differences between the pipeline runs of keys `key_a` and `key_b`."""
    from mlflow import MlflowClient

    uri = tracking_uri or default_uri()
    client = MlflowClient(uri)
    parents = []
    for key in (key_a, key_b):
        parent = find_pipeline_run(key, uri)
        if parent is None:
            raise ConfigError(f"pipeline run {key!r}: no MLflow parent run tagged "
                              f"rlvr.pipeline_run={key!r} in {uri}")
        parents.append(parent)
    experiment_id = client.get_experiment_by_name(EXPERIMENT).experiment_id
    a, b = (_stage_runs(client, experiment_id, p) for p in parents)
    return [diff_runs(client, a.get(s), b.get(s)) for s in sorted({*a, *b})]


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v).replace("|", "\\|")


def render_markdown(diffs: list[StageDiff], key_a: str, key_b: str) -> str:
    lines = [f"# {key_a} vs {key_b}", ""]
    for d in diffs:
        lines += [f"## {d.stage} ({_fmt(d.statuses[0])} / {_fmt(d.statuses[1])})", ""]
        if not (d.params or d.metrics or d.datasets):
            lines += ["no difference in params, metrics or artifacts", ""]
            continue
        rows = [("param", k, _fmt(x), _fmt(y), "") for k, (x, y) in d.params.items()]
        rows += [("metric", k, _fmt(x), _fmt(y),
                  _fmt(y - x) if x is not None and y is not None else "")
                 for k, (x, y) in d.metrics.items()]
        rows += [("dataset", k, _fmt(x), _fmt(y), "") for k, (x, y) in d.datasets.items()]
        lines += ["| kind | name | a | b | b − a |", "|---|---|---|---|---|"]
        lines += [f"| {' | '.join(r)} |" for r in rows]
        lines.append("")
    return "\n".join(lines)


@exit_on_error
def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m rlvr.tracking.compare",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("a", help="pipeline key of the first run (its RLVR_PIPELINE_RUN)")
    p.add_argument("b", help="pipeline key of the second run")
    p.add_argument("--tracking-uri", default=None)
    args = p.parse_args(argv)
    print(render_markdown(compare_pipeline_runs(args.a, args.b, args.tracking_uri),
                          args.a, args.b))


if __name__ == "__main__":
    main()
