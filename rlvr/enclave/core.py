"""The verification enclave, host side (SPEC §4): from diff text to a verdict.

Only the diff crosses from the policy workspace. `Enclave.verify` checks it statically
(`rlvr.tasks.patches.check_patch` — no code runs for a rejected patch), then hands it, with the task's pristine
snapshot and hidden tests, to a warm fork-server running inside a fresh sandbox (bwrap or
docker): `_inside/server.py` forks one child per run, which gets a fresh copy of the
snapshot, `git apply`s the patch (atomically: nothing is written unless every hunk applies
exactly, as with `--check` first), and runs the hidden suite under the
sealed runner (`_inside/runner.py`, whose docstring states the threat model and the
residual risks). What comes back is per-test outcomes (kept on this trusted side, for
curation) and coarse flags; `Verdict.public()` is the only thing that leaves the verifier.

Speed: the sandbox, the interpreter, pytest's import and plugin registration are paid once
per worker, and compiling the snapshot's modules once per task (hash-checked .pyc files the
import system ignores for any file the patch changed); a run costs a fork, writing the
snapshot, one `git apply` (skipped on consensus re-runs of the same patch: the server
caches the tree git produced) and the tests, whose per-test cost is pytest's own plus
~0.1 ms of checks. Pytest's capture and logging plugins are dropped for suites that use
none of their fixtures, test reports skip computing source locations, and the server
reads the child's records in batches instead of waking per test. bench/enclave.py
measures it.

Flaky-test consensus: a patch that passes once is re-run `consensus_runs - 1` more times,
each in a fresh child with its own seed and test order (derived from the verdict seed), and
counts only if every run passes. A failing first run costs one run.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import queue
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from rlvr import seeds
from rlvr.errors import SandboxUnavailable, UnsupportedRuntime
from rlvr.sandbox import Limits, Mount, envs, get_sandbox
from rlvr.sandbox.channel import ReplyLines, ServerClosed, server_limits
from rlvr.seeds import derive_seed
from rlvr.tasks import patches
from rlvr.tasks.model import Task, files_hash
from rlvr.tasks.patches import check_patch
from rlvr.tasks import project_config
from rlvr.versioning import source_digest

if TYPE_CHECKING:
    from rlvr.sandbox.params import SandboxParams

INSIDE_DIR = Path(__file__).resolve().parent / "_inside"
INSIDE_TARGET = "/opt/rlvr-enclave"
SEMANTICS = "1"  # bump by hand when grading semantics change


def _source_hash() -> str:
    """Hash of what decides a verdict: the code inside the sandbox, this host side, the
    patch module whose `check_patch` runs first (it also builds the diffs curation grades)
    and the seed derivation of the consensus runs."""
    return source_digest([*INSIDE_DIR.glob("*.py"), Path(patches.__file__), Path(seeds.__file__),
                          Path(__file__)])


VERIFIER_VERSION = f"enclave-{SEMANTICS}+{_source_hash()}"
RUN_STATUSES = ("ok", "apply_failed", "timeout", "resource_limit", "infra_error")
# Flags that void a run whatever the tests said.
TAMPER_PREFIXES = ("tamper_", "eq_override", "runner_killed")
SERVER_START_TIMEOUT = 120.0
REPLY_GRACE = 30.0


@dataclass
class SuiteRun:
    """One run of the hidden suite (trusted side only: outcomes name hidden tests).

    `outcomes` maps each collected (or selected) test id to passed|failed|error|skipped; a
    test that is not in it was not run to completion and counts as failed.
    """

    status: str
    outcomes: dict[str, str]
    wall_seconds: float
    resources: dict
    safety_flags: list[str] = field(default_factory=list)
    order: list[str] = field(default_factory=list)
    detail: str = ""

    @property
    def tampered(self) -> bool:
        return any(f.startswith(TAMPER_PREFIXES) for f in self.safety_flags)


@dataclass
class Verdict:
    """The verifier's decision on one patch. `detail` stays on the trusted side."""

    task_id: str
    success: bool
    reason: str
    runs: int
    verifier_version: str
    wall_seconds: float
    resources: dict
    safety_flags: list[str]
    detail: str = ""

    def public(self) -> dict:
        """What may leave the verifier: no test names, assertions, output or tracebacks."""
        return {
            "task_id": self.task_id,
            "success": bool(self.success),
            "reason": self.reason,
            "runs": int(self.runs),
            "verifier_version": self.verifier_version,
            "wall_seconds": round(float(self.wall_seconds), 4),
            "resources": {k: v for k, v in self.resources.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
            "safety_flags": [f for f in self.safety_flags if f.replace("_", "").isalnum()],
        }


def run_seed(seed: int, index: int) -> int:
    """Seed of consensus run `index` of a verdict seeded `seed`: run 0 uses the verdict seed
    itself (so `run_suite(seed=verdict seed)` replays it), later runs a derived one."""
    return int(seed) if index == 0 else derive_seed(seed, "consensus", index)


def task_key(task: Task) -> str:
    return hashlib.sha256(
        (files_hash(task.repo_files) + ":" + files_hash(task.hidden_tests) + ":"
         + ",".join(task.dependencies)).encode()
    ).hexdigest()[:32]


def project_fields(task: Task) -> dict:
    """The project's pytest configuration as the runner needs it (rlvr.tasks.project_config:
    the same reading the agent's run_tests uses): `pythonpath` (repo-relative dirs to put on
    sys.path ahead of the repo root, e.g. ["src"]), `markers`, kept `addopts`, `testpaths`.
    A config pytest cannot parse is the task's fault: ConfigError names the file."""
    return project_config.for_task(task).job_fields()


class _Worker:
    """One warm fork-server and the thread that reads its replies."""

    def __init__(self, enclave: "Enclave", index: int) -> None:
        self.enclave = enclave
        self.index = index
        self.handle = None
        self.lines: ReplyLines | None = None
        self.known: set[str] = set()
        self.info: dict = {}
        self.next_id = 0
        self.task_env: Path | None = None  # the dependency layer the live server sees

    def start(self, task_env: Path | None = None) -> None:
        self.stop()
        self.known = set()
        self.task_env = task_env
        handle = self.enclave._spawn_server(task_env)
        self.handle = handle
        self.lines = ReplyLines(handle, name=f"rlvr-enclave-reader-{self.index}")
        try:
            ready = self._read(SERVER_START_TIMEOUT)
        except (ServerClosed, TimeoutError) as exc:
            tail = getattr(handle, "stderr_tail", lambda: "")()
            self.stop()
            raise SandboxUnavailable(f"enclave server did not start ({exc}): {tail[-800:]}") from None
        if ready.get("refused") == "unsupported_runtime":
            self.stop()
            raise UnsupportedRuntime(f"the enclave refuses this runtime: {ready.get('detail')} "
                                     f"(sandbox python {self.enclave.sandbox.python})")
        if not ready.get("ready"):
            self.stop()
            raise SandboxUnavailable(f"enclave server sent {ready!r} instead of ready")
        self.info = ready

    def stop(self) -> None:
        if self.handle is not None:
            try:
                self.handle.close()
            except Exception:
                pass
        self.handle = None

    def alive(self) -> bool:
        return self.handle is not None and self.handle.alive()

    def _read(self, timeout: float) -> dict:
        return json.loads(self.lines.get(timeout))

    def request(self, req: dict, timeout: float) -> dict:
        self.next_id += 1
        req["id"] = self.next_id
        data = json.dumps(req).encode() + b"\n"
        self.handle.stdin.write(data)
        self.handle.stdin.flush()
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(max(0.01, deadline - time.monotonic()))
            if reply.get("id") == req["id"]:
                return reply


class Enclave:
    """Verifies patches in warm sandboxed fork-servers (one per worker).

    A context manager; `close()` stops the servers. Thread-safe: concurrent calls are spread
    over the `workers` servers (each serves one verdict at a time).
    """

    @classmethod
    def for_sandbox(cls, sandbox: "SandboxParams", **opts) -> "Enclave":
        """An enclave on a `sandbox` params section's backend, limits and workers; `opts`
        are other constructor arguments (consensus_runs) or override those (workers)."""
        return cls(**{"backend": sandbox.backend, "limits": sandbox.limits.to_limits(),
                      "workers": sandbox.workers, "sandbox_options": sandbox.options(), **opts})

    def __init__(self, backend: str = "bwrap", limits: Limits | None = None, workers: int = 1,
                 consensus_runs: int = 3, lean_runner: bool = True,
                 sandbox_options: dict | None = None):
        if workers < 1:
            raise ValueError("workers must be >= 1")
        if consensus_runs < 1:
            raise ValueError("consensus_runs must be >= 1")
        self.backend = backend
        # where its servers run (docker: `sandbox.docker_hosts`, one server per worker spread
        # over the hosts; the servers' code travels into each host's volumes)
        self.sandbox = get_sandbox(backend, **(sandbox_options or {}))
        self.limits = limits or Limits()
        self.workers = workers
        self.consensus_runs = consensus_runs
        # Plain suites run under the in-enclave lean runner (same verdict channel, pytest's
        # ids and outcomes; anything it does not plan falls back to pytest). False: always pytest.
        self.lean_runner = bool(lean_runner)
        # The runner tree the servers start from (a benchmark points one enclave at another
        # commit's tree to compare runners side by side; bench/enclave.py --against).
        self.inside_dir = INSIDE_DIR
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlvr-enclave-spawn")
        self._all = [_Worker(self, i) for i in range(workers)]
        self._idle: queue.Queue = queue.Queue()
        for w in self._all:
            self._idle.put(w)
        self._closed = False
        self._envs: dict[tuple[str, ...], Path | None] = {}
        self._env_lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _shutdown, self._all, self._spawner)
        params = inspect.signature(self.sandbox.serve).parameters
        self._serve_kwargs = {"supervisor": True} if "supervisor" in params else {}

    # ---- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> "Enclave":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._finalizer()

    def _spawn_server(self, task_env: Path | None = None):
        """Start a server from the dedicated spawner thread: --die-with-parent follows the
        thread that spawned the sandbox, so that thread must outlive every server.
        `task_env`: the task's dependency layer (its sys.path is fixed at start-up, so a
        server serves the tasks of one environment)."""
        argv = [self.sandbox.python, "-s", "-P", f"{INSIDE_TARGET}/server.py"]
        env = {
            # Not `python -I`: it would ignore PYTHONHASHSEED. The environment is explicit
            # (the sandbox clears it), so -s -P plus this env give the same isolation.
            "PYTHONHASHSEED": "0",
            "PYTHONNOUSERSITE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        }
        future = self._spawner.submit(
            self.sandbox.serve, argv, mounts=[Mount(self.inside_dir, INSIDE_TARGET)], cwd="/tmp",
            env=env, limits=server_limits(self.limits), **self._serve_kwargs,
            task_env=task_env,
        )
        return future.result()

    def task_env(self, task: Task) -> Path | None:
        """The task's dependency layer (built offline on first use, then cached by content
        hash on disk and by pins here); None for a task without dependencies. A wheelhouse
        that cannot satisfy the pins raises SandboxUnavailable."""
        if not task.dependencies:
            return None
        pins = tuple(task.dependencies)
        with self._env_lock:
            if pins not in self._envs:
                self._envs[pins] = envs.task_env(pins)
            return self._envs[pins]

    def _acquire(self, task: Task | None = None) -> _Worker:
        """An idle worker with a live server for `task`'s environment (a server of another
        environment is restarted; a start is retried once, a second failure raises
        SandboxUnavailable)."""
        if self._closed:
            raise RuntimeError("enclave is closed")
        task_env = self.task_env(task) if task is not None else None
        worker = self._get_idle(task_env)
        try:
            if not worker.alive() or (task is not None and worker.task_env != task_env):
                try:
                    worker.start(task_env)
                except SandboxUnavailable:
                    worker.start(task_env)
        except BaseException:
            self._idle.put(worker)
            raise
        return worker

    def _get_idle(self, task_env: Path | None) -> _Worker:
        """An idle worker, preferring one whose live server already has `task_env` (so tasks
        of several environments interleaved over the workers restart as few as possible)."""
        first = self._idle.get()
        if first.task_env == task_env and first.alive():
            return first
        others = [first]
        try:
            while True:
                w = self._idle.get_nowait()
                if w.task_env == task_env and w.alive():
                    for o in others:
                        self._idle.put(o)
                    return w
                others.append(w)
        except queue.Empty:
            pass
        for o in others[1:]:
            self._idle.put(o)
        return first

    def warm_up(self) -> dict:
        """Start every server now (instead of on first use); returns one server's info."""
        workers = [self._acquire() for _ in self._all]
        for w in workers:
            self._idle.put(w)
        return dict(workers[0].info)

    # ---- one run of the hidden suite ---------------------------------------------------------
    def run_suite(self, task: Task, patch: str, *, seed: int, shuffle: bool = True,
                  tests: Sequence[str] | None = None) -> SuiteRun:
        """Apply `patch` to a fresh pristine copy and run the hidden tests (all that are
        collected when `tests` is None). No static policy check here: curation also runs
        states that the policy would refuse (e.g. to prove a test edit is rejected elsewhere)."""
        try:
            worker = self._acquire(task)
        except SandboxUnavailable as exc:
            return SuiteRun("infra_error", {}, 0.0, {}, [], detail=str(exc))
        try:
            return self._run_on(worker, task, patch, seed, shuffle, tests)
        finally:
            self._idle.put(worker)

    def _run_on(self, worker: _Worker, task: Task, patch: str, seed: int, shuffle: bool,
                tests: Sequence[str] | None) -> SuiteRun:
        limits = self.limits
        key = task_key(task)
        req = {
            "op": "run", "key": key, "patch": patch, "seed": int(seed), "shuffle": bool(shuffle),
            "select": list(tests) if tests is not None else None, "lean": self.lean_runner,
            "limits": {"wall": limits.wall_seconds, "cpu": limits.cpu_seconds,
                       "mem": limits.memory_bytes, "nproc": limits.max_processes,
                       "fsize": limits.max_file_bytes},
            "task": None,
        }
        start = time.monotonic()
        timeout = limits.wall_seconds + REPLY_GRACE
        try:
            for attempt in range(2):
                if key not in worker.known or attempt:
                    req["task"] = {"files": task.repo_files, "hidden": task.hidden_tests,
                                   "project": project_fields(task)}
                reply = worker.request(req, timeout)
                worker.known.add(key)
                if reply.get("status") != "need_task":
                    break
        except ServerClosed:
            # The server died while it supervised this patch's run. Its children cannot
            # signal it, so this is attributed to the patch: a failure, never retried.
            tail = getattr(worker.handle, "stderr_tail", lambda: "")()
            worker.stop()
            return SuiteRun("ok", {}, time.monotonic() - start, {}, ["runner_killed"],
                            detail=f"enclave server died: {tail[-300:]}")
        except TimeoutError:
            worker.stop()
            return SuiteRun("timeout", {}, time.monotonic() - start, {}, ["server_unresponsive"],
                            detail="no reply from the enclave server")
        except (OSError, ValueError) as exc:
            worker.stop()
            return SuiteRun("infra_error", {}, time.monotonic() - start, {}, [], detail=f"{type(exc).__name__}: {exc}")
        status = reply.get("status")
        if status not in RUN_STATUSES:
            status = "infra_error"
        return SuiteRun(
            status=status,
            outcomes=dict(reply.get("outcomes") or {}),
            wall_seconds=float(reply.get("wall", time.monotonic() - start)),
            resources=dict(reply.get("resources") or {}),
            safety_flags=list(reply.get("flags") or []),
            order=list(reply.get("order") or []),
            detail=str(reply.get("detail") or ""),
        )

    # ---- verdicts ---------------------------------------------------------------------------
    def verify(self, task: Task, patch: str, *, seed: int) -> Verdict:
        start = time.monotonic()
        check = check_patch(task, patch)
        if not check.ok:
            return Verdict(task.task_id, False, "patch_rejected", 0, VERIFIER_VERSION,
                           time.monotonic() - start, {}, [], detail=check.reason)
        try:
            worker = self._acquire(task)
        except SandboxUnavailable as exc:
            return Verdict(task.task_id, False, "infra_error", 0, VERIFIER_VERSION,
                           time.monotonic() - start, {}, [], detail=str(exc))
        try:
            return self._verify_on(worker, task, patch, seed, start)
        finally:
            self._idle.put(worker)

    def _verify_on(self, worker: _Worker, task: Task, patch: str, seed: int, start: float) -> Verdict:
        graded = task.graded_tests
        flags: list[str] = []
        cpu = 0.0
        rss = 0
        runs = 0
        reason, detail = "none", ""
        for index in range(self.consensus_runs):
            run = self._run_on(worker, task, patch, run_seed(seed, index), True, None)
            runs += 1
            cpu += float(run.resources.get("cpu_seconds", 0.0) or 0.0)
            rss = max(rss, int(run.resources.get("max_rss_kb", 0) or 0))
            for f in run.safety_flags:
                if f not in flags:
                    flags.append(f)
            reason, detail = self.judge(run, graded)
            if reason != "none":
                break
        resources = {"cpu_seconds": round(cpu, 4), "max_rss_kb": rss}
        return Verdict(task.task_id, reason == "none", reason, runs, VERIFIER_VERSION,
                       time.monotonic() - start, resources, flags, detail=detail)

    @staticmethod
    def judge(run: SuiteRun, graded: Sequence[str]) -> tuple[str, str]:
        """Failure reason of one run ('none' = this run passes every graded test).

        A run the budget ended is a `timeout` only while no graded test has failed yet: a
        graded failure recorded before the budget ran out decides the verdict as it would
        in a run that finished, so a wrong patch whose suite ends near the budget reads the
        same on a loaded machine and an idle one (the budget edge that remains: the failing
        test is the one the budget cut, or runs after it; README "Reproducibility")."""
        if run.status in ("apply_failed", "infra_error"):
            return run.status, run.detail
        if run.status == "timeout" and not any(run.outcomes.get(t, "passed") != "passed" for t in graded):
            return run.status, run.detail
        all_passed = bool(graded) and all(run.outcomes.get(t) == "passed" for t in graded)
        if all_passed and not run.tampered:
            return "none", ""
        if run.status == "resource_limit" or "resource_limit_hit" in run.safety_flags:
            return "resource_limit", run.detail
        missing = [t for t in graded if t not in run.outcomes]
        return "tests_failed", f"{len(missing)} graded test(s) missing" if missing else run.detail

    def verify_many(self, items: Iterable[tuple], seed: int = 0,
                    progress: Callable[[int], object] | None = None) -> list[Verdict]:
        """Verify many (task, patch) or (task, patch, seed) items on all workers in parallel;
        results come back in input order. Item i without a seed gets derive_seed(seed, "item", i).
        `progress(1)` is called as each verdict lands (a stage's progress bar)."""
        jobs = []
        for i, item in enumerate(items):
            if len(item) == 3:
                task, patch, s = item
            else:
                task, patch = item
                s = derive_seed(seed, "item", i)
            jobs.append((task, patch, int(s)))
        if not jobs:
            return []
        def one(job: tuple) -> Verdict:
            verdict = self.verify(job[0], job[1], seed=job[2])
            if progress is not None:
                progress(1)
            return verdict

        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="rlvr-verify") as pool:
            return list(pool.map(one, jobs))


def _shutdown(workers: list[_Worker], spawner: ThreadPoolExecutor) -> None:
    for w in workers:
        w.stop()
    spawner.shutdown(wait=False)


__all__ = ["Enclave", "SuiteRun", "VERIFIER_VERSION", "Verdict", "run_seed", "task_key"]
