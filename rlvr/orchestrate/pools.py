"""Stages in other checkouts: what travels between them, and the DVC remote that carries the
artifacts.

When the DAG runs on Prefect work pools (flows/pools.py) every stage may run in a different
checkout, on a different host: a GPU worker's for `sft`, `grpo`, `evaluate`, a CPU worker's for
the rest. Three things must travel for `dvc repro --single-item STAGE` in that checkout to do
what it would do in one checkout, and each travels by the owner's own means:

- the artifacts (every cached out: Parquet files, model directories) through the DVC remote:
  a stage pulls its upstream stages' outs (`Repo.pull`), runs, and pushes its own
  (`Repo.push`);
- the lock (`dvc.lock`: which hashes the upstream stages produced, so that `pull` knows what to
  fetch and `repro` what is up to date) as text, handed from stage to stage by the driving flow;
  its bytes are copied, never parsed;
- the small uncached outs (metrics, details, plots: `cache: false`, so not in the remote) as
  bytes in the stage's result, written back into the driving checkout.

The sources are not shipped: every checkout must be at the driver's git revision with no
modified tracked source (`source_revision` names the files otherwise), so the code that ran is
the code of that one commit. Stages run one at a time in DAG order, as `dvc repro` runs them
(one lock in flight, no merge).
"""
from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterable, Mapping

from rlvr.artifacts.io import atomic_path
from rlvr.errors import ConfigError, RlvrError
from rlvr.orchestrate.dag import REPO_ROOT, DagStage, stage_target

STAGE_FLOW = "rlvr-stage"            # the flow a worker runs: one stage in its checkout
CPU_POOL, GPU_POOL = "rlvr-cpu", "rlvr-gpu"
DEPLOYMENTS = {"cpu": CPU_POOL, "gpu": GPU_POOL}   # deployment name -> work pool (prefect.yaml)
GPU_STAGES = frozenset({"sft", "grpo", "evaluate"})   # the rest need cores, not an accelerator
CHECKOUT_ENV = "RLVR_CHECKOUT"       # a worker's checkout, when not the one its venv installs
LOCKFILE = "dvc.lock"


class PoolStageFailed(RlvrError):
    """A stage's flow run on a work pool did not complete: its name, pool and final state."""


def deployment_of(stage: str, overrides: Mapping[str, str] | None = None) -> str:
    """The deployment (`cpu` / `gpu`) whose pool runs `stage`: `overrides[stage]` if given."""
    name = (overrides or {}).get(stage) or ("gpu" if stage in GPU_STAGES else "cpu")
    if name not in DEPLOYMENTS:
        raise ConfigError(f"pools[{stage!r}] = {name!r}: not a deployment of {STAGE_FLOW} "
                          f"(prefect.yaml has: {', '.join(DEPLOYMENTS)})")
    return name


def place(dag: Mapping[str, DagStage], order: Iterable[str],
          overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """Each stage of `order` -> its deployment; an override naming no stage of the DAG, or no
    deployment, is a ConfigError before any run."""
    unknown = sorted(set(overrides or {}) - set(dag))
    if unknown:
        raise ConfigError(f"pools: unknown stage(s) {', '.join(unknown)} "
                          f"(dvc.yaml has: {', '.join(dag)})")
    for stage in overrides or {}:
        deployment_of(stage, overrides)
    return {name: deployment_of(name, overrides) for name in order}


def checkout_root() -> Path:
    """This worker's checkout: $RLVR_CHECKOUT, else the checkout whose `rlvr` is imported."""
    root = Path(os.environ.get(CHECKOUT_ENV) or REPO_ROOT).resolve()
    if not (root / "dvc.yaml").is_file():
        raise ConfigError(f"{CHECKOUT_ENV}={root}: not an rlvr checkout (no dvc.yaml there)")
    return root


def enter_checkout() -> dict[str, str]:
    """Prefect pull step (prefect.yaml): run the flow in this worker's checkout, with its
    `flows` and `stages` importable. Returns the directory, as Prefect's own steps do."""
    root = checkout_root()
    os.chdir(root)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return {"directory": str(root)}


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if done.returncode:
        raise ConfigError(f"{root}: not a git checkout the pools can use: git {' '.join(args)}: "
                          f"{done.stderr.strip()}")
    return done.stdout


def source_revision(root: Path, dag: Mapping[str, DagStage]) -> str:
    """The checkout's git revision; a ConfigError naming any modified tracked file other than
    the lock files and the DAG's outs (a worker could not run the code it does not have)."""
    outputs = {LOCKFILE, *(out for stage in dag.values() for out in stage.outs)}
    changed = [line[3:] for line in _git(root, "status", "--porcelain",
                                          "--untracked-files=no").splitlines()]
    sources = sorted(p for p in changed
                     if not any(p == o or p.startswith(o.rstrip("/") + "/") for o in outputs))
    if sources:
        raise ConfigError(f"{root}: tracked sources differ from the commit, and workers run the "
                          f"commit: {', '.join(sources[:10])}{' …' if len(sources) > 10 else ''}"
                          " (commit them, or run `python -m flows.pipeline` in this checkout)")
    return _git(root, "rev-parse", "HEAD").strip()


def require_revision(root: Path, dag: Mapping[str, DagStage], revision: str) -> None:
    """Refuse to run a stage in a checkout at another commit than the driver's."""
    here = source_revision(root, dag)
    if here != revision:
        raise ConfigError(f"{root}: this worker's checkout is at {here[:12]}, the run at "
                          f"{revision[:12]}: check out the run's revision (git checkout "
                          f"{revision[:12]}) before the worker takes its stages")


def read_lock(root: Path) -> str:
    """The lock's text ('' when the DAG never ran here)."""
    path = root / LOCKFILE
    return path.read_text() if path.is_file() else ""


def install_lock(root: Path, text: str) -> None:
    """Make `text` this checkout's lock (atomically; '' removes it)."""
    path = root / LOCKFILE
    if not text:
        path.unlink(missing_ok=True)
        return
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def _dvc_error(what: str, exc: Exception) -> RlvrError:
    from dvc.config import NoRemoteError

    if isinstance(exc, NoRemoteError):
        return ConfigError(f"{what}: no DVC remote to carry the artifacts between checkouts: "
                           "add one in every checkout (`dvc remote add -d --local shared "
                           "PATH_OR_URL`) or pass `remote`")
    return RlvrError(f"{what}: {exc}")


def _require_remote(repo, remote: str | None, what: str) -> None:
    """A pull without a remote only warns in DVC; here it is the missing piece, named."""
    from dvc.exceptions import DvcException

    try:
        repo.cloud.get_remote(remote, "pull")
    except DvcException as exc:
        raise _dvc_error(what, exc) from None


def pull_inputs(root: Path, stage: DagStage, remote: str | None) -> None:
    """Fetch into this checkout the outs of the stage's upstream stages (they must be in the
    remote) and its own outs where the remote has them (an up-to-date stage then skips)."""
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    what = f"stage {stage.name}: pulling its inputs from the DVC remote"
    with Repo(str(root)) as repo:
        _require_remote(repo, remote, what)
        try:
            if stage.upstream:
                repo.pull(targets=[stage_target(root, u) for u in stage.upstream], remote=remote)
            (own,) = repo.stage.collect(stage_target(root, stage.name))
            if any(out.hash_info for out in own.outs if out.use_cache):  # the lock knows them
                repo.pull(targets=[stage_target(root, stage.name)], remote=remote,
                          allow_missing=True)
        except DvcException as exc:
            raise _dvc_error(what, exc) from None


def push_outputs(root: Path, stage: str, remote: str | None) -> None:
    """Send the stage's cached outs to the remote, for the next stage's checkout."""
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        try:
            repo.push(targets=[stage_target(root, stage)], remote=remote)
        except DvcException as exc:
            raise _dvc_error(f"stage {stage}: pushing its outs to the DVC remote", exc) from None


def uncached_outputs(root: Path, stage: str) -> dict[str, str]:
    """The stage's `cache: false` outs (metrics, details, plots) as base64 bytes by path: the
    remote does not hold them; files of a directory out are listed one by one."""
    from dvc.repo import Repo

    files: dict[str, str] = {}
    with Repo(str(root)) as repo:
        (found,) = repo.stage.collect(stage_target(root, stage))
        for out in found.outs:
            if out.use_cache:
                continue
            path = Path(out.fs_path)
            for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
                if f.is_file():
                    files[str(f.relative_to(root))] = base64.b64encode(f.read_bytes()).decode()
    return files


def write_files(root: Path, files: Mapping[str, str]) -> None:
    """Write a stage's uncached outs (from `uncached_outputs`) into this checkout, atomically;
    a path outside the checkout is refused."""
    root = root.resolve()
    for rel, data in files.items():
        path = (root / rel).resolve()
        if root not in path.parents:
            raise RlvrError(f"{rel}: a stage result names a file outside {root}")
        with atomic_path(path) as tmp:
            tmp.write_bytes(base64.b64decode(data))


def checkout_outputs(root: Path, stages: Iterable[str], remote: str | None) -> None:
    """Bring the stages' cached outs into the driving checkout (what `dvc repro` leaves)."""
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    what = "pulling the run's outputs into the driving checkout"
    with Repo(str(root)) as repo:
        _require_remote(repo, remote, what)
        try:
            repo.pull(targets=[stage_target(root, s) for s in stages], remote=remote)
        except DvcException as exc:
            raise _dvc_error(what, exc) from None
