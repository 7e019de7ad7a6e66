"""The docker backend over several daemons (`sandbox.docker_hosts`, issue 38).

Why spread: verification and tool calls are CPU-bound, and one host's cores run out long
before a trainer's GPUs do (SCALE.md). Each daemon is a `DockerSandbox` of its own (its own
client, transport, image and volumes); a run goes to the host with the fewest runs in
flight, a server (an enclave worker) to the host holding the fewest servers (equals take
turns), so N workers spread evenly.

A host that fails (its daemon unreachable, a run it could not carry out) leaves the rotation
and the run is retried once on another: a sandboxed run starts from its mounts alone, so a
retry is a fresh run, not a second half of one. `retired` says which hosts left and why;
only when none is left does the failure reach the caller (an infrastructure error there).
Every host must answer at start: an unreachable one is a named error before any work.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Sequence

from rlvr.errors import SandboxUnavailable
from rlvr.sandbox.base import Limits, Mount, RunResult
from rlvr.sandbox.docker import DockerSandbox


class DockerHosts:
    """The Sandbox protocol over several docker daemons (see the module docstring)."""

    name = "docker"

    def __init__(self, docker_hosts: Sequence[str], *, tls_dir: str | None = None,
                 **options) -> None:
        if not docker_hosts:
            raise ValueError("DockerHosts needs at least one host")
        self.hosts: list[DockerSandbox] = []
        try:
            for host in docker_hosts:
                self.hosts.append(DockerSandbox(docker_host=host, tls_dir=tls_dir, **options))
        except BaseException:
            self.close()
            raise
        self.python = self.hosts[0].python
        self._runs = [0] * len(self.hosts)
        self._servers = [0] * len(self.hosts)
        self._live = [True] * len(self.hosts)
        self.retired: dict[str, str] = {}
        self._turn = 0
        self._lock = threading.Lock()

    def _pick(self, load: list[int]) -> int:
        with self._lock:
            live = [i for i, ok in enumerate(self._live) if ok]
            if not live:
                raise SandboxUnavailable("docker backend: no Docker host left: " + "; ".join(
                    f"{h}: {why}" for h, why in self.retired.items()))
            # equals in turn, so sequential work spreads too
            i = min(live, key=lambda k: (load[k], (k - self._turn) % len(load)))
            self._turn = (i + 1) % len(load)
            load[i] += 1
            return i

    def _retire(self, i: int, exc: BaseException) -> None:
        with self._lock:
            self._live[i] = False
            self.retired[self.hosts[i].docker_host] = f"{type(exc).__name__}: {exc}"

    def run(self, argv: Sequence[str], *, mounts: Sequence[Mount] = (), cwd: str = "/work",
            env: dict[str, str] | None = None, limits: Limits = Limits(),
            stdin: bytes | None = None, task_env: Path | None = None) -> RunResult:
        """`argv` on the least busy host; once more on another if that host fails."""
        for attempt in (0, 1):
            i = self._pick(self._runs)
            try:
                result = self.hosts[i].run(argv, mounts=mounts, cwd=cwd, env=env, limits=limits,
                                           stdin=stdin, task_env=task_env)
                result.resources["docker_host"] = self.hosts[i].docker_host
                return result
            except SandboxUnavailable as exc:
                self._retire(i, exc)
                if attempt:
                    raise
            finally:
                with self._lock:
                    self._runs[i] -= 1
        raise AssertionError("unreachable")  # pragma: no cover

    def serve(self, argv: Sequence[str], **kwargs):
        """A server on the host holding the fewest; once more on another if that one fails
        to start it."""
        for attempt in (0, 1):
            i = self._pick(self._servers)
            try:
                return self.hosts[i].serve(argv, **kwargs)
            except SandboxUnavailable as exc:
                with self._lock:
                    self._servers[i] -= 1
                self._retire(i, exc)
                if attempt:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def containers(self) -> list[str]:
        return [c for h in self.hosts for c in h.containers()]

    def close(self) -> None:
        for h in self.hosts:
            h.close()
