"""One MLflow parent run per pipeline run; each stage's run nests under it.

Stages run as separate processes (`dvc repro`, `dvc exp run`, the Prefect flow), so a stage
finds its parent by a *pipeline key*, the value of the parent run's tag `rlvr.pipeline_run`:

1. `RLVR_PIPELINE_RUN` when set — the contract for drivers: `make pipeline`
   (scripts/pipeline.sh) and the Prefect flow set it once per run (any string of letters,
   digits and `._:@/-`, at most 200 chars); every stage started with the same value joins
   the same parent, so re-running a failed pipeline with the same value resumes it.
2. else under `dvc exp run`: the experiment (`dvc-exp:<name>@<baseline commit>`);
3. else under `dvc repro`: the `dvc` process this stage descends from
   (`dvc-repro:<host>:<pid>:<start ticks>`), read from /proc — one parent per invocation;
4. else (a stage run by hand, a test): no parent, the stage run stands alone.

The first stage of a pipeline run creates the parent; later stages find it by tag. Should
two stages create it at once, the earliest-started parent wins and the other is deleted.
The parent's status follows its stages: RUNNING while one runs, then the status of the
stage that ended last (FAILED when it failed), so a pipeline stopped by a failing stage
shows FAILED; a driver may set the final status itself (`close_pipeline_run`).
"""
from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from rlvr.errors import ConfigError
from rlvr.tracking.lineage import DVC_STAGE_ENV, dvc_experiment
from rlvr.tracking.store import EXPERIMENT, tracking_uri as default_uri

PIPELINE_ENV = "RLVR_PIPELINE_RUN"
PIPELINE_TAG = "rlvr.pipeline_run"
SOURCE_TAG = "rlvr.pipeline_source"
_KEY = re.compile(r"[A-Za-z0-9._:@/\-]{1,200}")


@dataclass(frozen=True)
class PipelineKey:
    key: str      # the parent run's `rlvr.pipeline_run` tag
    source: str   # env | dvc exp run | dvc repro


def pipeline_key(environ: Mapping[str, str] | None = None) -> PipelineKey | None:
    env = os.environ if environ is None else environ
    value = env.get(PIPELINE_ENV)
    if value:
        if not _KEY.fullmatch(value):
            raise ConfigError(f"{PIPELINE_ENV}={value!r}: use at most 200 letters, digits or "
                              "'._:@/-'")
        return PipelineKey(value, "env")
    exp = dvc_experiment() if environ is None else (
        (env["DVC_EXP_NAME"], env.get("DVC_EXP_BASELINE_REV", ""))
        if env.get("DVC_EXP_NAME") else None)
    if exp:
        name, baseline = exp
        return PipelineKey(f"dvc-exp:{name}@{baseline[:12]}", "dvc exp run")
    if env.get(DVC_STAGE_ENV):
        found = dvc_ancestor()
        if found:
            pid, start = found
            return PipelineKey(f"dvc-repro:{socket.gethostname()}:{pid}:{start}", "dvc repro")
    return None


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time in clock ticks) of a Linux process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "
    return int(fields[1]), fields[19]


def _is_dvc(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    words = [a.decode(errors="replace") for a in argv if a]
    runs_dvc = any(os.path.basename(w) == "dvc" for w in words[:3]) or \
        any(words[i:i + 2] == ["-m", "dvc"] for i in range(min(len(words), 3)))
    return runs_dvc and bool({"repro", "exp"} & set(words))


def dvc_ancestor(pid: int | None = None, depth: int = 6) -> tuple[int, str] | None:
    """(pid, start ticks) of the nearest `dvc repro` / `dvc exp` process above this one."""
    current = os.getpid() if pid is None else pid
    for _ in range(depth):
        stat = _stat(current)
        if stat is None or stat[0] <= 1:
            return None
        parent = stat[0]
        if _is_dvc(parent):
            parent_stat = _stat(parent)
            return (parent, parent_stat[1]) if parent_stat else None
        current = parent
    return None


def _find(client, experiment_id: str, key: str) -> str | None:
    runs = client.search_runs([experiment_id], filter_string=f"tags.`{PIPELINE_TAG}` = '{key}'",
                              max_results=50)
    runs = [r for r in runs if r.data.tags.get("mlflow.parentRunId") is None]
    if not runs:
        return None
    return min(runs, key=lambda r: (r.info.start_time, r.info.run_id)).info.run_id


def open_parent(client, experiment_id: str, key: PipelineKey, tags: Mapping[str, str]) -> str:
    """The parent run of `key` (created when none exists yet), set RUNNING."""
    found = _find(client, experiment_id, key.key)
    if found is None:
        mine = client.create_run(experiment_id, run_name=f"pipeline {key.key}"[:250],
                                 tags={PIPELINE_TAG: key.key, SOURCE_TAG: key.source, **tags})
        found = _find(client, experiment_id, key.key)
        if found != mine.info.run_id:
            client.delete_run(mine.info.run_id)
    client.update_run(found, status="RUNNING")
    return found


def find_pipeline_run(key: str, tracking_uri: str | None = None) -> str | None:
    """Run id of the parent run of pipeline key `key` (e.g. the `RLVR_PIPELINE_RUN` a driver
    set), or None: how a driver links to its MLflow run."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri or default_uri())
    exp = client.get_experiment_by_name(EXPERIMENT)
    return _find(client, exp.experiment_id, key) if exp else None


def close_pipeline_run(key: str, status: str = "FINISHED",
                       tracking_uri: str | None = None) -> str | None:
    """Set the parent run of `key` to `status` (FINISHED | FAILED | KILLED); its id, or None
    when no stage of that pipeline run opened one."""
    from mlflow import MlflowClient

    run_id = find_pipeline_run(key, tracking_uri)
    if run_id is not None:
        MlflowClient(tracking_uri or default_uri()).set_terminated(run_id, status)
    return run_id
