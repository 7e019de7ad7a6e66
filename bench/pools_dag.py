"""The whole DAG through the Prefect work pools on one box, checked against `dvc repro`'s lock.

Three fresh clones of this checkout's HEAD (the driver, a `rlvr-cpu` worker's, a `rlvr-gpu`
worker's) share a local DVC remote; `rlvr.orchestrate.local_pools` starts the server, the
pools, the deployments of `prefect.yaml` and the two workers; `python -m flows.pools` runs the
stages. Every cached out the driver's lock ends with is compared with this checkout's
`dvc.lock` (a fresh clone's `make pipeline` on the same machine type: README), stage by stage.

    .venv/bin/python bench/pools_dag.py                      # the whole DAG (~50 min, 2 cores)
    .venv/bin/python bench/pools_dag.py --stages curate selfcheck
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlvr.orchestrate.dag import load_dag  # noqa: E402
from rlvr.orchestrate.local_pools import cached_outs, clone, local_pools  # noqa: E402
from rlvr.orchestrate.pools import deployment_of  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="/tmp/rlvr-pools-dag", type=Path)
    ap.add_argument("--stages", nargs="*", default=None, help="default: the whole DAG")
    a = ap.parse_args()
    if a.workdir.exists():
        shutil.rmtree(a.workdir)
    remote = a.workdir / "dvc-remote"
    remote.mkdir(parents=True)
    driver = clone(ROOT, a.workdir / "driver", remote)
    workers = {name: clone(ROOT, a.workdir / name, remote) for name in ("cpu", "gpu")}
    for checkout in (driver, *workers.values()):   # start from nothing, as a fresh clone would
        (checkout / "dvc.lock").unlink()
    env = {**os.environ, "RLVR_PYTHON": sys.executable}
    t0 = time.time()
    with local_pools(a.workdir / "prefect", driver, workers, env) as env:
        done = subprocess.run([sys.executable, "-m", "flows.pools", *(a.stages or [])],
                              cwd=driver, env=env, capture_output=True, text=True)
    wall = time.time() - t0
    (a.workdir / "driver.log").write_text(done.stdout + done.stderr)
    if done.returncode:
        sys.exit(f"flows.pools failed (exit {done.returncode}); logs in {a.workdir}")
    expected, got = cached_outs(ROOT), cached_outs(driver)
    rows = []
    for name in a.stages or list(load_dag(ROOT)):
        same = [p for p, h in expected[name].items() if got.get(name, {}).get(p) == h]
        differ = sorted(set(expected[name]) - set(same))
        where = deployment_of(name)
        rows.append({"stage": name, "pool": where, "outs": len(expected[name]),
                     "equal": len(same), "differ": differ})
        print(f"{name:<12} [{where}] {len(same)}/{len(expected[name])} cached outs equal "
              f"to dvc.lock" + (f"; differ: {', '.join(differ)}" if differ else ""), flush=True)
    print(f"wall {wall:.0f} s")
    print(json.dumps({"rows": rows, "wall_s": round(wall, 1)}))


if __name__ == "__main__":
    main()
