"""Prefect flow that runs the DVC stages: schedulable from the Prefect UI, same DAG as `dvc repro`.

There is exactly one DAG definition, `dvc.yaml`; this flow reads it, orders the stages by
their deps/outs, and runs each as a Prefect task through `dvc repro --single-item`, so DVC
still decides what is up to date and records the lock file. Run:

    python -m flows.pipeline                 # whole DAG
    python -m flows.pipeline curate verify   # a subset (their order still follows the DAG)
"""
from __future__ import annotations

import os
import subprocess
import sys
from graphlib import TopologicalSorter
from pathlib import Path

import yaml

from rlvr.errors import ConfigError

DVC_YAML = Path("dvc.yaml")


def _paths(entries) -> list[str]:
    out = []
    for e in entries or []:
        out.extend(e.keys() if isinstance(e, dict) else [e])
    return [str(p).rstrip("/") for p in out]


def stage_order(dvc_yaml: Path = DVC_YAML) -> list[str]:
    """Stages of dvc.yaml in dependency order (a stage after every stage whose outs it uses)."""
    try:
        stages = (yaml.safe_load(dvc_yaml.read_text()) or {}).get("stages") or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{dvc_yaml}: cannot read the DAG: {exc}") from None
    producers = {}
    for name, spec in stages.items():
        for out in _paths(spec.get("outs")) + _paths(spec.get("metrics")) + _paths(spec.get("plots")):
            producers[out] = name
    graph = {}
    for name, spec in stages.items():
        deps = set()
        for dep in _paths(spec.get("deps")):
            for out, producer in producers.items():
                if producer != name and (dep == out or dep.startswith(out + "/")
                                         or out.startswith(dep + "/")):
                    deps.add(producer)
        graph[name] = deps
    return list(TopologicalSorter(graph).static_order())


def run_stage_cmd(stage: str) -> None:
    subprocess.run([sys.executable, "-m", "dvc", "repro", "--single-item", stage], check=True)


def build_flow():
    """The Prefect flow object (imported lazily: Prefect's import is heavy)."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    from prefect import flow, task

    run_stage = task(name="dvc-stage", retries=0)(run_stage_cmd)

    @flow(name="rlvr-pipeline")
    def rlvr_pipeline(stages: list[str] | None = None) -> list[str]:
        order = [s for s in stage_order() if not stages or s in stages]
        previous = None
        for stage in order:
            previous = run_stage.with_options(name=f"stage:{stage}").submit(
                stage, wait_for=[previous] if previous else None)
            previous.result()
        return order

    return rlvr_pipeline


if __name__ == "__main__":
    build_flow()(sys.argv[1:] or None)
