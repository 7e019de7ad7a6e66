"""The agent's `run_tests` latency: warm fork-server path vs today's cold path, in one process.

Cold (the reference): `ToolExecutor(warm=False)` — per call a fresh sandbox of the backend and a
fresh `python -m pytest` with the fault-localisation plugin. Warm: `ToolExecutor(warm=True)` —
one sandboxed pytest fork-server per episode workspace, a forked child per call
(rlvr/agent/warm_tests.py). Both executors act on the *same* workspace of each seed family's
authored task (data/tasks/*), calls interleaved cold/warm so machine load hits both; every
call alternates between the whole public suite and the first failing node id. Each pair of
observations must be identical byte for byte (the run fails otherwise).

Reported: the steady-state median per call (warm calls after the first), the first warm call
(it starts the server), and the ratio for a whole episode of `--calls` run_tests calls with the
server start included (what a rollout pays).

    python bench/tools.py [--backend bwrap|docker] [--calls 6]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

from _common import ROOT, emit, summary

from rlvr.agent.executor import ToolExecutor
from rlvr.agent.tools import ToolCall
from rlvr.agent.workspace import Workspace
from rlvr.sandbox import get_sandbox
from rlvr.authoring.authored import discover, load_task_dir


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="bwrap")
    ap.add_argument("--calls", type=int, default=6, help="run_tests calls per task and path")
    ap.add_argument("--tasks", default=str(ROOT / "data" / "tasks"))
    args = ap.parse_args()
    sandbox = get_sandbox(args.backend)
    tasks = [load_task_dir(d) for d in discover(args.tasks)]
    cold_all, warm_steady, warm_first, episode_cold, episode_warm = [], [], [], [], []
    identical = 0
    rows = []
    load_before = os.getloadavg()[0]
    for task in tasks:
        with Workspace.create(task) as ws:
            cold = ToolExecutor(ws, sandbox, timeout_s=20, observation_cap=2000)
            warm = ToolExecutor(ws, sandbox, timeout_s=20, observation_cap=2000, warm=True)
            node = None
            c_times, w_times = [], []
            try:
                for i in range(args.calls):
                    call = ToolCall("run_tests", {} if node is None or i % 2 == 0 else {"path": node})
                    a = cold.execute(call)
                    b = warm.execute(call)
                    if (a.observation, a.status) != (b.observation, b.status):
                        raise SystemExit(f"{task.task_id}: call {i}: warm and cold observations differ")
                    identical += 1
                    c_times.append(a.latency_s)
                    w_times.append(b.latency_s)
                    if node is None:
                        failed = [ln.split()[1] for ln in a.observation.splitlines()
                                  if ln.startswith("FAILED ")]
                        node = failed[0] if failed else None
                if warm.runs["cold"]:
                    raise SystemExit(f"{task.task_id}: the warm executor fell back to cold "
                                     f"({warm.warm_off or 'shadowed module'})")
            finally:
                warm.close()
        cold_all += c_times
        warm_first.append(w_times[0])
        warm_steady += w_times[1:]
        episode_cold.append(sum(c_times))
        episode_warm.append(sum(w_times))
        rows.append((task.task_id, statistics.median(c_times), w_times[0],
                     statistics.median(w_times[1:])))
    print(f"backend {args.backend}, {len(tasks)} tasks x {args.calls} calls, load avg "
          f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}")
    print(f"{'task':40s} {'cold med':>9s} {'warm 1st':>9s} {'warm med':>9s} {'ratio':>6s}")
    for tid, c, f, w in rows:
        print(f"{tid:40s} {c * 1e3:7.1f}ms {f * 1e3:7.1f}ms {w * 1e3:7.1f}ms {c / w:5.1f}x")
    steady = statistics.median(cold_all) / statistics.median(warm_steady)
    episode = sum(episode_cold) / sum(episode_warm)
    print(f"steady state: cold {statistics.median(cold_all) * 1e3:.1f} ms, warm "
          f"{statistics.median(warm_steady) * 1e3:.1f} ms per call -> {steady:.1f}x; "
          f"first warm call (server start) {statistics.median(warm_first) * 1e3:.1f} ms; "
          f"episode of {args.calls} calls incl. server start -> {episode:.1f}x; "
          f"{identical}/{identical} observations identical")
    emit({"bench": "tools", "backend": args.backend, "tasks": len(tasks), "calls": args.calls,
          "cold": summary(cold_all), "warm": summary(warm_steady),
          "warm_first_median_s": round(statistics.median(warm_first), 4),
          "steady_ratio": round(steady, 2), "episode_ratio": round(episode, 2),
          "identical": identical, "pairs": identical, "load_avg": round(load_before, 2),
          "measured_at": time.strftime("%Y-%m-%d")})


if __name__ == "__main__":
    main()
