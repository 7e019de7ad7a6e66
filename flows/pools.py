"""The one DAG (`dvc.yaml`) on Prefect work pools: each stage a flow run of the deployment
`rlvr-stage/gpu` (work pool `rlvr-gpu`: sft, grpo, evaluate) or `rlvr-stage/cpu` (work pool
`rlvr-cpu`: everything else), taken by a worker in its own checkout, chained in DAG order by
the driving flow `rlvr-pools`.

What crosses between checkouts, and by which means, is `rlvr.orchestrate.pools`' docstring:
artifacts through the DVC remote (pull before, push after), the lock as text from stage to
stage, the uncached metrics/details/plots in the stage's result. A stage runs in its worker's
checkout exactly as `flows.pipeline` runs it (`run_stage`: `dvc repro --single-item`, output
streamed to the run log, infrastructure failures retried), so `dvc.lock` and the artifacts
equal `dvc repro`'s. The driver ends with the lock and every output in its own checkout.

Set-up (README "Work pools"): one Prefect server; in every checkout a DVC remote all of them
reach (`dvc remote add -d --local shared PATH_OR_URL`); the pools and deployments from
`prefect.yaml` (`prefect work-pool create rlvr-cpu --type process`, the same for `rlvr-gpu`,
`prefect --no-prompt deploy --all`); one worker per pool, each started from its checkout's
venv (`.venv/bin/prefect worker start --pool rlvr-gpu`), which is the checkout it runs stages
in (`RLVR_CHECKOUT` overrides). Flow results are persisted (Prefect's result storage): one
host by default; across hosts set a shared result storage (`PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK`),
and point every checkout's MLflow at one server (`MLFLOW_TRACKING_URI`).

    python -m flows.pools                              # the whole DAG through the pools
    python -m flows.pools curate selfcheck             # a subset, in DAG order
    python -m flows.pools --pool selfcheck=gpu         # a stage on the other pool
    python -m flows.pools --remote shared              # a named DVC remote (default: the default)
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.deployments import run_deployment
from prefect.runtime import flow_run as current_flow_run
from prefect.settings import get_current_settings

from flows.pipeline import run_stage
from rlvr.errors import ConfigError, exit_on_error
from rlvr.orchestrate.dag import load_dag, project_root, select_stages
from rlvr.orchestrate.pools import (STAGE_FLOW, PoolStageFailed, checkout_outputs,
                                    checkout_root, install_lock, place, pull_inputs,
                                    push_outputs, read_lock, require_revision, source_revision,
                                    uncached_outputs, write_files)
from rlvr.orchestrate.stage_process import PIPELINE_ENV


@flow(name=STAGE_FLOW, persist_result=True)
def rlvr_stage(stage: str, lock: str, revision: str, remote: str | None = None,
               pipeline_key: str | None = None) -> dict[str, Any]:
    """One stage in this worker's checkout: the run's lock installed, the upstream outs
    pulled, `dvc repro --single-item`, its outs pushed. Returns the lock after it and the
    stage's uncached outs (base64 by path)."""
    logger = get_run_logger()
    root = checkout_root()
    dag = load_dag(root)
    if stage not in dag:
        raise ConfigError(f"stage {stage!r}: not in {root / 'dvc.yaml'}")
    require_revision(root, dag, revision)
    install_lock(root, lock)
    pull_inputs(root, dag[stage], remote)
    logger.info("stage %s in %s at %s", stage, root, revision[:12])
    run_stage(stage, str(root), pipeline_key, dag[stage].metrics)
    push_outputs(root, stage, remote)
    return {"stage": stage, "lock": read_lock(root), "files": uncached_outputs(root, stage)}


@flow(name="rlvr-pools")
def rlvr_pools(targets: list[str] | None = None, with_upstream: bool = False,
               remote: str | None = None, pools: dict[str, str] | None = None,
               root: str | None = None, checkout: bool = True) -> list[str]:
    """Run dvc.yaml's stages (all, or `targets` in DAG order) on the work pools.

    targets, with_upstream: as `rlvr-pipeline`'s.
    remote: the DVC remote every checkout shares (default: each checkout's default remote).
    pools: stage -> deployment (`cpu` / `gpu`) where the default placement should not hold.
    root: the driving checkout (default: this process's, `rlvr.orchestrate.pools.checkout_root`);
      its revision is the run's.
    checkout: end with every output of the run in the driving checkout, as `dvc repro` does
      (False: only the lock and the uncached metrics, the artifacts stay in the remote).
    Returns the stages run, in order.
    """
    logger = get_run_logger()
    root_path = project_root(root) if root else checkout_root()
    dag = load_dag(root_path)
    order = select_stages(dag, targets, with_upstream)
    placed = place(dag, order, pools)   # a bad placement before any run
    revision = source_revision(root_path, dag)
    lock = read_lock(root_path)
    key = os.environ.get(PIPELINE_ENV) or f"prefect:{current_flow_run.id}"
    logger.info("stages at %s: %s", revision[:12],
                " -> ".join(f"{n} [{placed[n]}]" for n in order))
    for name in order:
        run = run_deployment(f"{STAGE_FLOW}/{placed[name]}", timeout=None,
                             parameters={"stage": name, "lock": lock, "revision": revision,
                                         "remote": remote, "pipeline_key": key})
        if not run.state or not run.state.is_completed():
            state = run.state.name if run.state else "no state"
            raise PoolStageFailed(f"stage '{name}' on pool {placed[name]}: flow run "
                                  f"{run.name} ended {state}: "
                                  f"{run.state.message if run.state else ''}")
        result = run.state.result()
        lock = result["lock"]
        write_files(root_path, result["files"])
        install_lock(root_path, lock)
        logger.info("stage %s done on %s (flow run %s)", name, placed[name], run.name)
    if checkout:
        checkout_outputs(root_path, order, remote)
    return order


def _parse_args(argv: list[str] | None):
    import argparse

    p = argparse.ArgumentParser(prog="python -m flows.pools",
                                description="Run dvc.yaml's stages on the Prefect work pools "
                                            "(needs PREFECT_API_URL and running workers).")
    p.add_argument("stages", nargs="*", help="stage names (default: all), run in DAG order")
    p.add_argument("--upstream", action="store_true",
                   help="also run every stage the named stages depend on")
    p.add_argument("--remote", help="the DVC remote every checkout shares")
    p.add_argument("--pool", action="append", default=[], metavar="STAGE=cpu|gpu",
                   help="place a stage on the other pool")
    p.add_argument("--root", help="the driving checkout (default: this one)")
    p.add_argument("--no-checkout", action="store_true",
                   help="leave the artifacts in the remote (the lock and metrics still land)")
    return p.parse_args(argv)


@exit_on_error
def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    pools = {}
    for item in args.pool:
        stage, sep, name = item.partition("=")
        if not sep:
            raise ConfigError(f"--pool {item!r}: expected STAGE=cpu or STAGE=gpu")
        pools[stage] = name
    dag = load_dag(args.root)  # bad names and placements fail before a flow run starts
    place(dag, select_stages(dag, args.stages), pools)
    if not get_current_settings().api.url:
        raise ConfigError("PREFECT_API_URL is not set: the pools' workers poll a Prefect "
                          "server; start one and point every process at it (README "
                          "\"Work pools\")")
    rlvr_pools(targets=args.stages or None, with_upstream=args.upstream, remote=args.remote,
               pools=pools or None, root=str(Path(args.root).resolve()) if args.root else None,
               checkout=not args.no_checkout)


if __name__ == "__main__":
    main()
