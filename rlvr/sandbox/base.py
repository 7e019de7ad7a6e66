"""The sandbox protocol: run an untrusted command, or hold an untrusted server, in isolation.

Two callers share it: the policy workspace (the agent's `run_tests` tool) and the
verification enclave (a pre-imported pytest fork-server). Both backends — `bwrap` and
`docker` — give the same guarantees: no network, a read-only view of the interpreter and
libraries, only the mounts asked for, rlimits, a wall-clock timeout that kills the whole
process tree, and capped output. Nothing else of the host file system is visible, so data/
(which holds every task's hidden tests) never is.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol, Sequence, runtime_checkable


# The environment every backend gives a sandboxed process (merged under the caller's `env`):
# identical on bwrap and docker so the same code behaves the same on both.
DEFAULT_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}
# Host uids handed to sandboxed processes when we are root: far above any real account.
UID_LOW, UID_HIGH = 1 << 20, 1 << 30
UIDS_PER_SUPERVISOR = 1 << 12


# A run's budget is CPU time; wall time only stops a run that waits instead of computing, at
# WAIT_FACTOR x the budget (`Limits.cpu_budget`). CPU time does not grow with the load beside
# a run, wall time does. Measured on a 2-core box: the slowest seed-pool suite (an
# `inflection` mutant that compiles a regex per call) used 7.0 s of CPU alone and beside two
# copies of itself, while its wall time went from 7.6 s to 11.2 s. Under a 10 s wall budget
# it passed or timed out with the load, and so did the tasks and rollouts built on it.
WAIT_FACTOR = 3


@dataclass(frozen=True)
class Limits:
    """Resource limits for one sandboxed process tree (params: `sandbox.limits`)."""

    wall_seconds: float = 30.0
    cpu_seconds: int = 30
    memory_bytes: int = 1 << 30
    max_processes: int = 64
    max_file_bytes: int = 16 << 20
    output_bytes: int = 64 << 10

    def replace(self, **changes) -> "Limits":
        return dataclasses.replace(self, **changes)

    def cpu_budget(self, seconds: float) -> "Limits":
        """These limits with `seconds` of CPU as the budget (SIGXCPU: the run timed out)
        and WAIT_FACTOR x `seconds` of wall time for a run that waits."""
        return self.replace(cpu_seconds=math.ceil(seconds),
                            wall_seconds=WAIT_FACTOR * float(seconds))


@dataclass(frozen=True)
class Mount:
    """A host path made visible inside the sandbox at `target` (read-only unless `writable`)."""

    source: Path
    target: str
    writable: bool = False


@dataclass
class RunResult:
    """What came back from one sandboxed command. `stdout`/`stderr` are capped at
    `Limits.output_bytes`; `*_truncated` says whether the cap cut them."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    signal: int | None = None
    wall_seconds: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    resources: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@runtime_checkable
class ServerHandle(Protocol):
    """A long-lived sandboxed process spoken to over its stdin/stdout (line-delimited JSON).

    The enclave keeps one per worker: starting a sandbox and importing pytest is paid once,
    each verdict is a fork inside it.
    """

    stdin: IO[bytes]
    stdout: IO[bytes]

    def alive(self) -> bool: ...

    def close(self) -> None: ...


@runtime_checkable
class Sandbox(Protocol):
    """`python` is the interpreter path *inside* the sandbox (it has pytest importable, and
    nothing else of the pipeline's environment).

    `task_env` (run and serve): a task's dependency layer built by `rlvr.sandbox.envs.task_env`;
    both backends mount it read-only where the interpreter adds it to sys.path. None: the
    runner layer only (pytest and its closure)."""

    name: str
    python: str

    def run(
        self,
        argv: Sequence[str],
        *,
        mounts: Sequence[Mount] = (),
        cwd: str = "/work",
        env: dict[str, str] | None = None,
        limits: Limits = Limits(),
        stdin: bytes | None = None,
        task_env: Path | None = None,
    ) -> RunResult: ...

    def serve(
        self,
        argv: Sequence[str],
        *,
        mounts: Sequence[Mount] = (),
        cwd: str = "/work",
        env: dict[str, str] | None = None,
        limits: Limits = Limits(),
        task_env: Path | None = None,
    ) -> ServerHandle:
        """Optional keyword a backend may accept: ``supervisor: bool = False`` — run the
        server as root inside the sandbox with only CAP_SETUID/CAP_SETGID (and, in
        ``RLVR_SANDBOX_UIDS=base:count``, a range of unprivileged uids it may hand out), so
        that a fork-server can drop every verdict child to its own uid. The enclave passes
        it only to backends whose `serve` accepts it and works (more weakly) without."""
        ...
