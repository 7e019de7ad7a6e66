"""The work-pool set-up of README "Work pools" on one box, for the tests and the benchmark that
run the DAG through it: a dedicated Prefect server on a free loopback port, the two
process-type pools, the deployments of `prefect.yaml`, and one worker per pool in a checkout
of its own. Every step is the Prefect CLI command the README shows, run as a subprocess."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator, Mapping

from rlvr.errors import RlvrError
from rlvr.orchestrate.pools import CHECKOUT_ENV, DEPLOYMENTS

PREFECT = [sys.executable, "-m", "prefect"]


def clone(source: Path, dest: Path, remote: Path | None = None) -> Path:
    """A fresh git clone of `source` at `dest`; with `remote`, that directory as its default
    DVC remote (in `.dvc/config.local`, as README "Work pools" adds one per checkout)."""
    subprocess.run(["git", "clone", "-q", str(source), str(dest)], check=True)
    if remote is not None:
        subprocess.run([sys.executable, "-m", "dvc", "remote", "add", "-q", "-d", "--local",
                        "shared", str(remote)], cwd=dest, check=True)
    return dest


def cached_outs(root: Path) -> dict[str, dict[str, str]]:
    """Stage -> {cached out: hash}, as DVC's index of `root` holds them (its lock): what two
    runs of the DAG must agree on."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return {stage.name: {o.def_path: o.hash_info.value for o in stage.outs if o.use_cache}
                for stage in repo.index.stages if getattr(stage, "name", None)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _process(argv: list[str], log: Path, **kwargs) -> Iterator[subprocess.Popen]:
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, **kwargs)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2)
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RlvrError(f"the Prefect server did not come up at {url} (log: {log})")
            time.sleep(0.5)


@contextmanager
def local_pools(workdir: Path, deploy_from: Path, workers: Mapping[str, Path],
                env: Mapping[str, str] | None = None) -> Iterator[dict[str, str]]:
    """Server, pools, deployments (from `deploy_from`'s prefect.yaml) and a worker per
    deployment name in `workers` (`{"cpu": checkout, "gpu": checkout}`), logs under
    `workdir`; yields the environment a client needs (PREFECT_API_URL, ...)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    client_env = {**(env or os.environ), "PREFECT_HOME": str(workdir / "prefect-home"),
                  "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_UI_ENABLED": "false",
                  "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
                  "PREFECT_WORKER_QUERY_SECONDS": "1", "RLVR_PROGRESS": "0"}
    client_env.pop("RLVR_PIPELINE_RUN", None)
    with ExitStack() as stack:
        log = workdir / "server.log"
        server = stack.enter_context(_process(
            PREFECT + ["server", "start", "--host", "127.0.0.1", "--port", str(port)],
            log, env=client_env))
        _wait_healthy(client_env["PREFECT_API_URL"], server, log)
        for pool in DEPLOYMENTS.values():
            _cli(["work-pool", "create", pool, "--type", "process"], client_env, workdir)
        _cli(["--no-prompt", "deploy", "--all"], client_env, deploy_from)
        for name, checkout in workers.items():
            stack.enter_context(_process(
                PREFECT + ["worker", "start", "--pool", DEPLOYMENTS[name]],
                workdir / f"worker-{name}.log", cwd=checkout,
                env={**client_env, CHECKOUT_ENV: str(checkout)}))
        yield client_env


def _cli(args: list[str], env: Mapping[str, str], cwd: Path) -> None:
    done = subprocess.run(PREFECT + args, env=dict(env), cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        raise RlvrError(f"prefect {' '.join(args)}: exit {done.returncode}: "
                        f"{(done.stdout + done.stderr)[-2000:]}")
