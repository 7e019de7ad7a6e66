"""The host end of a sandboxed fork-server: its own limits and the thread that reads its replies.

Two fork-servers speak line-delimited JSON over a `ServerHandle`: the enclave's verdict server
(`rlvr.enclave.core`) and the agent's warm `run_tests` server (`rlvr.agent.warm_tests`). Their
protocols, replies and error handling differ; what they share is here, written once: the
limits the server's own sandbox runs under, and reading its stdout on a daemon thread so that
a reply can be awaited with a timeout (a blocking `readline` has none).
"""
from __future__ import annotations

import queue
import threading

from rlvr.sandbox.base import Limits, ServerHandle


class ServerClosed(Exception):
    """The server closed its stdout (it exited or died)."""


def server_limits(limits: Limits) -> Limits:
    """The limits of a fork-server whose children each run under `limits`: no CPU limit (it
    lives for many runs), twice a run's memory (at least 2 GiB: pytest pre-imported plus the
    child being set up) and four times its processes (at least 64); wall clock, file size and
    output caps as a run's."""
    return Limits(wall_seconds=limits.wall_seconds, cpu_seconds=0,
                  memory_bytes=max(2 * limits.memory_bytes, 2 << 30),
                  max_processes=max(4 * limits.max_processes, 64),
                  max_file_bytes=limits.max_file_bytes, output_bytes=limits.output_bytes)


class ReplyLines:
    """`handle`'s stdout lines, read by a daemon thread named `name` into a queue from the
    moment it is built; the thread ends when the server closes its stdout."""

    def __init__(self, handle: ServerHandle, *, name: str) -> None:
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=_pump, args=(handle, self._lines), daemon=True, name=name).start()

    def get(self, timeout: float) -> bytes:
        """The next line (with its newline). Waits at least 10 ms; raises TimeoutError when no
        line came within `timeout` seconds, ServerClosed once the server closed its stdout."""
        try:
            line = self._lines.get(timeout=max(timeout, 0.01))
        except queue.Empty:
            raise TimeoutError(f"no reply within {timeout:.0f}s") from None
        if line is None:
            raise ServerClosed()
        return line


def _pump(handle: ServerHandle, lines: queue.Queue) -> None:
    try:
        while True:
            line = handle.stdout.readline()
            if not line:
                break
            lines.put(line)
    except (OSError, ValueError):
        pass
    lines.put(None)


__all__ = ["ReplyLines", "ServerClosed", "server_limits"]
