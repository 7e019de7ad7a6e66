"""Rollout workers as Ray actors (`grpo.rollout_workers`, issue 38): the draw's groups rolled
out by processes that may sit on other CPU hosts, each with its own collector, workspaces,
tool sandboxes and an engine client of the sampler's vLLM servers.

Why Ray: it is what verl, OpenRLHF and SkyRL place their rollout workers with (actors,
object refs, a head that knows every host), so a cluster the field already runs takes
these workers as they are; nothing here speaks its own socket protocol.

How a draw goes:

* The trainer (rank 0) hands out one group (a task) per call, each to the worker with the
  fewest groups in flight, with the policy its sampler serves right now (version, step,
  served model name) and the live servers' URLs: a worker's engine client samples exactly
  that policy or the call is refused by version (`VllmEngine.check_servers`), so no group
  mixes policies and staleness is counted from the rows as in process.
* A group is seeded by its task, round and sample index alone (rlvr/agent/rollout.py), and a
  vLLM sample by its prompt and seed, so which worker rolls it out changes nothing.
* Finished groups come back as their passport rows the moment they finish and stay with
  the trainer (written under `parts_root/workers`). A worker that dies loses only the
  groups it was rolling out: they are re-queued on the others (`stats["requeued"]`), and
  Ray restarts the actor (`max_restarts`), which rejoins with a fresh engine client.
  Nothing is lost and nothing is counted twice: a group enters the draw once, when its
  rows arrive.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from rlvr.agent.collector import group_id_for
from rlvr.agent.rollout import part_path, roll_out, write_shard
from rlvr.engines.vllm_engine import VllmEngine, VllmEngineParams
from rlvr.errors import ConfigError
from rlvr.sandbox import get_sandbox
from rlvr.tasks.model import Task

ACTOR_RESTARTS = 4  # per worker, over the run


def _ray():
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - ray is in requirements/lock.txt
        raise ConfigError(f"grpo.rollout_workers: Ray is not installed ({exc})") from exc
    return ray


class _Worker:
    """One rollout worker (a Ray actor: `ray.remote(_Worker)`)."""

    def __init__(self, tasks: Mapping[str, Task], rp, sandbox_params, engine_params: dict,
                 wrap: Callable[[Any], Any] | None):
        self.tasks = dict(tasks)
        self.rp, self.sandbox_params = rp, sandbox_params
        self.engine_params = VllmEngineParams(**engine_params)
        self.wrap = wrap
        self.sandbox = get_sandbox(sandbox_params.backend, **sandbox_params.options())
        self.engine = None
        self.policy = None

    def pid(self) -> int:
        return os.getpid()

    def _engine(self, urls: Sequence[str], model: str, version: str, step: int,
                root: str | None):
        """An engine client of `urls` serving (`model`, `version`); a new one when the
        servers or the policy changed, checked against what the servers really serve
        (`root`: the policy directory, when the trainer owns the servers)."""
        policy = (tuple(urls), model, version, step, root)
        if policy != self.policy:
            if self.engine is not None:
                self.engine.close()
            engine = VllmEngine(list(urls), model, policy_version=version, policy_step=step,
                                params=self.engine_params)
            engine.check_servers(root, down_ok=True)
            self.engine = engine
            self.acting = self.wrap(engine) if self.wrap is not None else engine
            self.policy = policy
        return self.acting

    def roll(self, task_id: str, sampling_round: int, urls: Sequence[str], model: str,
             version: str, step: int, root: str | None) -> tuple[list[dict], dict]:
        """The passport rows of one group (and what rolling it out spent)."""
        engine = self._engine(urls, model, version, step, root)
        stats: dict = {}
        with tempfile.TemporaryDirectory(prefix="rlvr-worker-parts-") as parts:
            rows = roll_out([self.tasks[task_id]], self.rp, self.sandbox_params, Path(parts),
                            engine=engine, sandbox=self.sandbox, sampling_round=sampling_round,
                            stats=stats)
        return rows, stats


class RolloutWorkers:
    """`n` rollout workers and `roll_out` over them (see the module docstring)."""

    def __init__(self, n: int, *, tasks: Mapping[str, Task], rp, sandbox_params,
                 engine, wrap: Callable[[Any], Any] | None = None, address: str = ""):
        if n < 1:
            raise ConfigError(f"grpo.rollout_workers: {n} workers (at least 1)")
        if not isinstance(engine, VllmEngine):
            raise ConfigError("grpo.rollout_workers: the workers sample through the sampler's "
                              "vLLM servers; set grpo.engine: vllm")
        ray = _ray()
        self._started = not ray.is_initialized()
        if self._started:
            # the workers import rlvr (and a caller's wrap) as this process does
            path = os.pathsep.join(p for p in sys.path if p)
            ray.init(address=address or None, include_dashboard=False, log_to_driver=False,
                     configure_logging=False,
                     runtime_env={"env_vars": {"PYTHONPATH": path, "RLVR_PROGRESS": "0"}},
                     **({} if address else {"num_cpus": max(2, os.cpu_count() or 2)}))
        self.sampler = engine
        params = {k: v for k, v in vars(engine.params).items()
                  if k not in ("base_url", "base_urls", "servers")}
        actor = ray.remote(num_cpus=0, max_restarts=ACTOR_RESTARTS)(_Worker)
        self.workers = [actor.remote(dict(tasks), rp, sandbox_params, params, wrap)
                        for _ in range(n)]
        # every worker up (an unreachable Docker host or a broken wrap is named here, before
        # any draw); their pids, since a busy actor answers calls only in turn
        self.pids = ray.get([w.pid.remote() for w in self.workers])
        self.in_flight = [0] * n
        self.requeued = 0

    def _policy(self) -> tuple[list[str], str, str, int, str | None]:
        """The live servers and the policy they serve now (its directory when owned)."""
        live = self.sampler.live_endpoints()  # none left: raises, naming every server's failure
        owned = live[0].server
        root = (str(owned.model_dir) if owned is not None and owned.params.update == "restart"
                else None)
        return ([ep.base_url for ep in live], self.sampler.model, self.sampler.policy_version,
                self.sampler.policy_step, root)

    def roll_out(self, tasks: list[Task], rp, sandbox_params, parts_root: Path | None, *,
                 engine=None, sandbox=None, sampling_round: int = 0,
                 stats: dict | None = None) -> list[dict]:
        """`rlvr.agent.rollout.roll_out`'s rows for `tasks`, rolled out by the workers."""
        ray = _ray()
        urls, model, version, step, root = self._policy()
        results: dict[str, list[dict]] = {}
        spent: dict[str, float] = {}
        pending: dict = {}  # object ref -> (task id, worker index)

        def submit(task_id: str) -> None:
            i = min(range(len(self.workers)), key=lambda k: (self.in_flight[k], k))
            self.in_flight[i] += 1
            ref = self.workers[i].roll.remote(task_id, sampling_round, urls, model, version,
                                              step, root)
            pending[ref] = (task_id, i)

        for t in tasks:
            submit(t.task_id)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            task_id, i = pending.pop(done[0])
            self.in_flight[i] -= 1
            try:
                rows, used = ray.get(done[0])
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                self.requeued += 1  # the worker died with this group: another rolls it out
                submit(task_id)
                continue
            results[task_id] = rows
            for k, v in used.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    spent[k] = spent.get(k, 0) + v
            if parts_root is not None:  # the trainer keeps every finished group's passports
                gid = group_id_for(task_id, rp.seed, sampling_round)
                (Path(parts_root) / "workers").mkdir(parents=True, exist_ok=True)
                write_shard(part_path(Path(parts_root) / "workers", gid), rows)
        if stats is not None:
            stats.update(spent)
            stats["requeued"] = self.requeued
        return [row for t in tasks for row in results[t.task_id]]

    def kill(self, index: int) -> int:
        """SIGKILL worker `index`'s process (what a lost host does); returns its pid. Ray
        restarts the actor; its next pid is asked for when it is idle again."""
        ray = _ray()
        pid = self.pids[index] or ray.get(self.workers[index].pid.remote())
        os.kill(pid, 9)
        self.pids[index] = 0
        return pid

    def close(self) -> None:
        ray = _ray()
        for w in self.workers:
            ray.kill(w, no_restart=True)
        self.workers = []
        if self._started:
            ray.shutdown()
