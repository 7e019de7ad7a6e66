"""The Prefect face of the one DAG: `dvc.yaml`, read through DVC's own API, run stage by stage.

There is exactly one DAG definition, `dvc.yaml`. `rlvr.orchestrate.dag.load_dag` asks DVC
for it (`dvc.repo.Repo(root).index`: its pipeline stages and the dependency graph DVC itself
builds from deps/outs), so nothing here parses it or holds a second graph. This module is
only the Prefect wiring; running a stage and classifying its failure
(`rlvr.orchestrate.stage_process`) and its report (`rlvr.orchestrate.stage_report`) are
library code. Each stage is one Prefect
task that runs `dvc repro --single-item <stage>` with this interpreter's DVC (the venv's, not
whatever `dvc` is first on PATH), so DVC still decides what is up to date and writes
`dvc.lock`; every line the stage prints is streamed to the Prefect run log as it comes.

Entry points (all address the module-level flow `rlvr_pipeline`):

    python -m flows.pipeline                       # whole DAG
    python -m flows.pipeline curate selfcheck      # a subset, still in DAG order
    python -m flows.pipeline rollout --upstream    # rollout and every stage it depends on
    python -m flows.pipeline -S rollout.seed=1     # `dvc exp run -S` semantics, per-stage tasks
    python -m flows.pipeline --serve               # the scheduled deployment (NIGHTLY)
    prefect deploy flows/pipeline.py:rlvr_pipeline # one process; work pools: flows/pools.py

Failures. A stage that exits non-zero (2 = bad input, 1 = a bug) fails its task at once with
`StageFailed` naming the stage and exit code; it is not retried, a re-run would fail the
same way. Only an *infrastructure* failure is retried (`InfrastructureFailure`): the DVC
process could not be launched (OSError), it or the stage's process was killed by a signal
(e.g. SIGKILL from the OOM killer; DVC reports the stage as "exited with -9", or with 137
when a shell ran it: `killed_by_signal`), or another DVC process held the repository lock. The first failing stage stops the run, as `dvc repro`
does.

SQLite "database is locked". With no `PREFECT_API_URL`, a flow run starts a temporary
Prefect server on a SQLite file under `PREFECT_HOME`. On a fresh `PREFECT_HOME` that
server's telemetry service (`send_telemetry_heartbeat`, one of the few services Prefect runs
in the ephemeral server) writes its session row while the server's own startup writes hold
the database, and SQLite refuses the second writer at once ("database is locked", a
deferred transaction upgrading to a write is not covered by busy_timeout; PrefectHQ/prefect
#18934, #19771: "sqlite locking is hard to avoid with the ephemeral client"). Importing this
module therefore defaults `PREFECT_SERVER_ANALYTICS_ENABLED=false` (that service off) and
`PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=90` (the 20 s default is too tight on two
cores); an explicit value in the environment wins. For anything beyond a one-off run, start
one server (`prefect server start`, the only process that owns the database) and point
every client at it with `PREFECT_API_URL` (README "Scheduling with Prefect").
"""
from __future__ import annotations

import os

# Before Prefect is imported: these configure the temporary server a flow run starts when
# no PREFECT_API_URL is set (see the module docstring).
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")

import time  # noqa: E402
import tomllib  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import yaml  # noqa: E402
from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.artifacts import create_markdown_artifact  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402
from prefect.runtime import flow_run as current_flow_run  # noqa: E402

from rlvr.errors import ConfigError, exit_on_error  # noqa: E402
from rlvr.orchestrate.dag import (DagStage, load_dag, project_root, select_stages,  # noqa: E402
                                  stage_changes, stages_needing)
from rlvr.orchestrate.params import apply_param_overrides  # noqa: E402
from rlvr.orchestrate.stage_process import (PIPELINE_ENV, InfrastructureFailure,  # noqa: E402
                                            StageFailed, dvc_command, run_streamed, stage_env)
from rlvr.orchestrate.stage_report import (artifact_key, find_mlflow_run,  # noqa: E402
                                           metrics_markdown, read_metrics, stage_outcome)

STAGE_RETRIES = 2                       # infrastructure failures only
STAGE_RETRY_DELAY_S = 10

# The served deployment: every night at 03:00 (server time zone UTC unless the server says
# otherwise), the whole DAG with a second seed for rollouts and evaluation, saved as the DVC
# experiment `nightly-seed1` so `dvc exp show` compares it with the workspace.
NIGHTLY_NAME = "rlvr-nightly"
NIGHTLY_CRON = "0 3 * * *"
NIGHTLY_PARAMETERS: dict[str, Any] = {
    "targets": None,
    "set_params": ["rollout.seed=1", "evaluate.seed=1"],
    "experiment": "nightly-seed1",
}


# ----------------------------------------------------------------------------- one stage
def retry_infrastructure_only(task_, task_run, state) -> bool:
    """Prefect `retry_condition_fn`: retry when the failure was InfrastructureFailure."""
    try:
        state.result()
    except InfrastructureFailure:
        return True
    except BaseException:  # noqa: BLE001 - any other failure is final
        return False
    return False


def publish_stage_artifact(stage: DagStage, root: Path, outcome: str, since_ms: int) -> None:
    logger = get_run_logger()
    metrics = {}
    for rel in stage.metrics:
        try:
            metrics[rel] = read_metrics(root / rel)
        except (ValueError, yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
            logger.warning("%s: unreadable metrics file: %s", rel, exc)
            metrics[rel] = None
    try:
        link = find_mlflow_run(stage.name, since_ms, root)
    except Exception as exc:  # noqa: BLE001 - a link lookup must never fail the stage
        logger.warning("no MLflow link for stage %s: %s", stage.name, exc)
        link = None
    create_markdown_artifact(key=artifact_key(stage.name),
                             markdown=metrics_markdown(stage.name, outcome, metrics, link),
                             description=f"dvc stage {stage.name}: metrics and MLflow run")


@task(name="dvc-stage", task_run_name="stage:{stage}", retries=STAGE_RETRIES,
      retry_delay_seconds=STAGE_RETRY_DELAY_S, retry_condition_fn=retry_infrastructure_only,
      cache_policy=NO_CACHE)  # DVC, not Prefect's result cache, decides what is up to date
def run_stage(stage: str, root: str, pipeline_key: str | None = None,
              metrics: tuple[str, ...] = ()) -> str:
    """`dvc repro --single-item <stage>`: output streamed to the run log, a Markdown artifact
    with the stage's metrics and MLflow run; returns the stage name."""
    logger = get_run_logger()
    root_path = Path(root)
    info = DagStage(stage, (), tuple(metrics))
    since_ms = int(time.time() * 1000)
    changes = stage_changes(root_path, stage)   # before: did DVC find anything to run?
    argv = dvc_command("repro", "--single-item", stage)
    logger.info("$ %s", " ".join(argv))
    try:
        lines = run_streamed(stage, argv, root_path, stage_env(pipeline_key), logger.info)
    except StageFailed as exc:
        publish_stage_artifact(info, root_path, f"failed, exit code {exc.exit_code}", since_ms)
        raise
    publish_stage_artifact(info, root_path, stage_outcome(changes, lines), since_ms)
    return stage


@flow(name="rlvr-pipeline")
def rlvr_pipeline(targets: list[str] | None = None, set_params: list[str] | None = None,
                  root: str | None = None, with_upstream: bool = False,
                  experiment: str | None = None) -> list[str]:
    """Run dvc.yaml's stages (all, or `targets` in DAG order) as Prefect tasks.

    targets: stage names; a subset runs in DAG order, each after its upstream stages.
    set_params: `-S` overrides as `dvc exp run -S` takes them ("rollout.seed=1",
      "params.yaml:sft.lr=1e-4"). They are written into the params files (DVC's code for
      -S), the stages run, then the workspace is saved as a DVC experiment (`dvc exp save`,
      named `experiment` if given): together what `dvc exp run -S` does, one task per stage.
      Every stage that reads an overridden param, or is downstream of one, must be in the
      run (a ConfigError names the missing ones before anything is written): an experiment
      never shows metrics from before its params.
    root: the DVC repository (default: this checkout).
    with_upstream: also run every stage the targets depend on (`dvc repro TARGET`).
    Returns the stages run, in order.
    """
    logger = get_run_logger()
    root_path = project_root(root)
    dag = load_dag(root_path)
    order = select_stages(dag, targets, with_upstream)
    key = os.environ.get(PIPELINE_ENV) or f"prefect:{current_flow_run.id}"
    if set_params:
        missing = [n for n in stages_needing(dag, set_params) if n not in order]
        if missing:
            raise ConfigError(
                f"set_params {list(set_params)}: stage(s) {', '.join(missing)} read them or "
                "depend on one that does, and are not in this run: the saved experiment would "
                "show their metrics from before the overrides. Run them too (or drop "
                "`targets` to run the whole DAG).")
        applied = apply_param_overrides(root_path, set_params)
        logger.info("param overrides applied: %s", applied)
    logger.info("stages: %s", " -> ".join(order))
    states: dict[str, Any] = {}
    for name in order:
        upstream = [states[u] for u in dag[name].upstream if u in states]
        state = run_stage(name, str(root_path), key, dag[name].metrics,
                          wait_for=upstream, return_state=True)
        states[name] = state
        state.result()  # the stage's own exception (StageFailed, ...) stops the run here
    if set_params:
        argv = dvc_command("exp", "save", "--force", *(["-n", experiment] if experiment else []),
                           *order)  # cache these stages' outs (all outs must exist otherwise)
        run_streamed("exp save", argv, root_path, stage_env(key), logger.info)
    return order


def nightly_deployment(name: str = NIGHTLY_NAME, cron: str = NIGHTLY_CRON,
                       parameters: dict[str, Any] | None = None):
    """The scheduled deployment `--serve` runs (a RunnerDeployment; `prefect.serve` it)."""
    return rlvr_pipeline.to_deployment(
        name=name, cron=cron,
        parameters=dict(NIGHTLY_PARAMETERS if parameters is None else parameters),
        description="dvc.yaml's DAG, one task per stage; see flows/pipeline.py",
        tags=["rlvr", "dvc"])


def _parse_args(argv: list[str] | None):
    import argparse

    p = argparse.ArgumentParser(prog="python -m flows.pipeline",
                                description="Run dvc.yaml's stages as a Prefect flow, or serve "
                                            "the scheduled deployment.")
    p.add_argument("stages", nargs="*", help="stage names (default: all), run in DAG order")
    p.add_argument("-S", "--set-param", action="append", default=[], metavar="[FILE:]KEY=VALUE",
                   help="param override as for `dvc exp run -S`; the run is saved as a DVC "
                        "experiment")
    p.add_argument("--name", help="the DVC experiment's name (with -S)")
    p.add_argument("--upstream", action="store_true",
                   help="also run every stage the named stages depend on")
    p.add_argument("--root", help="the DVC repository (default: this checkout)")
    p.add_argument("--serve", action="store_true",
                   help=f"serve the deployment '{NIGHTLY_NAME}' (cron '{NIGHTLY_CRON}') until "
                        "interrupted; needs a Prefect server (PREFECT_API_URL)")
    p.add_argument("--cron", default=NIGHTLY_CRON, help="the served deployment's schedule")
    return p.parse_args(argv)


@exit_on_error
def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    if args.serve:
        from prefect import serve

        serve(nightly_deployment(cron=args.cron))
        return
    select_stages(load_dag(args.root), args.stages)  # a bad name fails before a flow run starts
    rlvr_pipeline(targets=args.stages or None, set_params=args.set_param or None,
                  root=args.root, with_upstream=args.upstream, experiment=args.name)


if __name__ == "__main__":
    main()
