"""A warm runner for the agent's `run_tests`: one sandboxed pytest fork-server per episode.

Why. A cold `run_tests` is a fresh sandboxed ``python -m pytest`` (~0.45-0.6 s here, most of
it interpreter start-up and importing pytest), and tool time dominated rollouts (154 s of
tools against 19 s of generation over 128 teacher episodes). The server pays start-up once
per episode and forks one child per call.

Design (and why it keeps today's isolation and today's observation):

* One server per episode workspace, started lazily by the first `run_tests`, in the *same*
  sandbox the cold path builds — the same mounts (repo writable at /work, pristine public
  tests read-only on top, an empty dir over `.git`, the agent's tool dir read-only at
  /opt/rlvr-agent), the same environment, cwd and backend (bwrap or docker), no network.
  Nothing is shared between episodes: each server sees only its own workspace, so policy
  code of one episode can never reach another's files or server. A server shared across
  episodes would need a mount per workspace inside one sandbox; per-episode servers get
  that separation from the sandbox itself.
* The server holds only CAP_SETUID/CAP_SETGID (`serve(supervisor=True)`, the enclave's
  mode; on bwrap as the first uid of its range with the two as ambient capabilities,
  `supervisor_as_uid`, so the sandbox's fixed address layout holds and observations print
  what the cold path prints) and forks every run as its own unprivileged uid from the
  private range the sandbox hands it; the host chowns the workspace to that uid before the
  run, exactly as the cold backend chowns it to its per-call uid. The child therefore cannot
  signal, ptrace or read the server, and it starts with none of the protocol fds. Without
  privilege separation (rlvr not running as root) a child could kill its own server, so the
  warm path declines and the cold path runs (`WarmUnavailable`).
* The server imports pytest, its builtin plugins and the stdlib modules a run imports
  lazily, but never repository code: /work is off `sys.path` in the server, and the fault-
  localisation plugin is imported by each child (module state cannot leak across runs; a
  pre-imported `-p` plugin would also make pytest warn that it cannot rewrite it). Because
  pre-imported modules cannot be shadowed by repository files the way they would be in a
  fresh interpreter, a run whose repo holds a top-level name equal to one of them (e.g. a
  planted `difflib.py`) takes the cold path instead (`shadowed_module`). Work that depends
  only on read-only inputs is done once in the server and handed to children on an exact
  match: the public test files' assertion-rewritten code and statement tables (keyed by
  their bytes), pytest's argv-only `get_config` (keyed by argv) and the fixture scan of
  pytest's own `_pytest.*` plugin modules (used while a module's namespace holds exactly
  the objects it was scanned with). The repo's own modules are compiled (not run) by the
  server between runs and a child's import uses that code only for the exact bytes it reads
  and only when that compile warned of nothing.
* Per run: the child gets the cold path's rlimits and argv, interpreter state rebuilt as
  ``python -m pytest`` has it (see `_sandbox/rlvr_warm.py`), stdout and stderr on separate
  pipes capped at `Limits.output_bytes` each; the server enforces the wall clock and then
  kills every process of the run's uid and removes what it left in /tmp and /dev/shm (the
  cold path gets a fresh tmpfs; when no process of the run holds its pipes any more, after
  the reply but before the next request). The reply is turned into the `RunResult` the backend's
  `run` would have returned (a child killed by signal N reads as exit 128+N, as bwrap's and
  docker-init's reapers report it), so the executor formats both paths with one function.
* A server that dies, hangs or breaks the protocol is a `WarmServerError` (the call is an
  `infra_error`) and is dropped; the next call starts a fresh one. A server that cannot start
  (or has no privilege separation) is `WarmUnavailable`: that executor uses the cold path.

Known differences, all in the direction of more isolation or invisible to pytest's output:
a child's parent is the server (pid != 1; `kill(getppid())` is refused instead of being
ignored by the namespace's init), SysV IPC objects a run creates live until the episode's
server exits, on docker a memory hog hits RLIMIT_AS (MemoryError) before the cgroup limit,
and the wall clock starts at the fork rather than before interpreter start-up. One is not: a
child leaves with ``os._exit`` once its non-daemon threads, atexit handlers and flush are done
(interpreter teardown of the pre-imported modules costs ~10-15 ms a run), so an object still
alive then is never finalized, and a `__del__` that writes during teardown writes only on the
cold path.
"""
from __future__ import annotations

import base64
import inspect
import json
import os
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

from rlvr.sandbox.base import Limits, Mount, RunResult, Sandbox
from rlvr.sandbox.bwrap import _chown_tree, _make_readable
from rlvr.sandbox.channel import ReplyLines, ServerClosed, server_limits

SERVER_SCRIPT = "rlvr_warm.py"
START_TIMEOUT_S = 60.0
REPLY_GRACE_S = 10.0
PROTOCOL = 1

_spawner: ThreadPoolExecutor | None = None
_spawner_lock = threading.Lock()


class WarmUnavailable(RuntimeError):
    """The warm path cannot run here (the caller uses the cold path)."""


class WarmServerError(RuntimeError):
    """The server died, hung or broke the protocol during a run (an infra error)."""


def _spawn(fn, *args, **kwargs):
    """Run `fn` on one long-lived thread: bwrap's --die-with-parent follows the *thread*
    that spawned the sandbox, and tool calls run on pool threads that come and go."""
    global _spawner
    with _spawner_lock:
        if _spawner is None:
            _spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlvr-warm-spawn")
    return _spawner.submit(fn, *args, **kwargs).result()


def shadowed_module(repo: Path, modules: Sequence[str]) -> str:
    """A name in the repo that a fresh interpreter could import instead of a module the
    server has pre-imported ('' when none): top-level `X.py`, `X/` (a package), `X.*.so`
    of the repo root and of every directory without `__init__.py` (pytest's `prepend` import
    mode puts such test/conftest dirs on sys.path)."""
    wanted = set(modules)
    stack = [repo]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        names = {e.name for e in entries}
        check = current == repo or "__init__.py" not in names
        for e in entries:
            if e.name in (".git", "__pycache__"):
                continue
            stem = e.name.split(".", 1)[0]
            if check and stem in wanted and (e.is_dir(follow_symlinks=False)
                                             or e.name.endswith((".py", ".pyc", ".so", ".pyd"))):
                return os.path.relpath(e.path, repo)
            if e.is_dir(follow_symlinks=False):
                stack.append(Path(e.path))
    return ""


class WarmTestServer:
    """One episode's fork-server (see the module docstring). Not shared between threads:
    an episode runs one tool call at a time (a lock guards it anyway)."""

    def __init__(self, sandbox: Sandbox, *, mounts: Sequence[Mount], env: dict[str, str],
                 limits: Limits, writable: Path, tools_target: str, task_env: Path | None = None):
        self.sandbox = sandbox
        self.task_env = task_env  # the task's dependency layer (rlvr.sandbox.envs), or None
        self.mounts = list(mounts)
        self.env = dict(env)
        self.limits = limits
        self.writable = Path(writable)
        self.tools_target = tools_target
        self.handle = None
        self.info: dict = {}
        self.modules: tuple[str, ...] = ()
        self._lines: ReplyLines | None = None
        self._lock = threading.Lock()
        self._next_id = 0
        self._uid_next = 0
        self._finalizer = weakref.finalize(self, _close_handle, [None])

    # ---- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        serve = getattr(self.sandbox, "serve", None)
        modes = inspect.signature(serve).parameters if serve is not None else {}
        if "supervisor" not in modes:
            raise WarmUnavailable(f"{self.sandbox.name}: serve() has no supervisor mode")
        for m in self.mounts:  # the cold backend's own preparation
            if not m.writable:
                _make_readable(Path(m.source))
        argv = [self.sandbox.python, f"{self.tools_target}/{SERVER_SCRIPT}",
                *(m.target for m in self.mounts if not m.writable and m.target != "/work/.git")]
        try:
            # as a non-zero uid where the backend can: the fixed address layout then holds
            # in the server and its children (rlvr/sandbox/bwrap.py, "Fixed address layout")
            as_uid = {"supervisor_as_uid": True} if "supervisor_as_uid" in modes else {}
            handle = _spawn(self.sandbox.serve, argv, mounts=self.mounts, cwd="/work",
                            env=self.env, limits=server_limits(self.limits), supervisor=True,
                            task_env=self.task_env, **as_uid)
        except Exception as exc:  # noqa: BLE001 - no server: the cold path still works
            raise WarmUnavailable(f"server did not start: {type(exc).__name__}: {exc}") from exc
        self.handle = handle
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _close_handle, [handle])
        self._lines = ReplyLines(handle, name="rlvr-warm-reader")
        try:
            ready = self._read(START_TIMEOUT_S)
        except (WarmServerError, TimeoutError) as exc:
            tail = getattr(handle, "stderr_tail", lambda: "")()
            self.close()
            raise WarmUnavailable(f"server did not start ({exc}): {tail[-500:]}") from None
        if not ready.get("ready") or ready.get("protocol") != PROTOCOL:
            self.close()
            raise WarmUnavailable(f"server sent {str(ready)[:200]} instead of ready")
        if not ready.get("privsep"):
            self.close()
            raise WarmUnavailable("no privilege separation (rlvr is not root): a run could "
                                  "signal its own server")
        self.info = ready
        self.modules = tuple(ready.get("modules") or ())

    def alive(self) -> bool:
        return self.handle is not None and self.handle.alive()

    def close(self) -> None:
        handle, self.handle = self.handle, None
        self._finalizer.detach()
        if handle is not None:
            _close_handle([handle])

    # ---- one run --------------------------------------------------------------------------
    def _read(self, timeout: float) -> dict:
        try:
            line = self._lines.get(timeout)
        except ServerClosed:
            raise WarmServerError("the warm test server exited") from None
        try:
            return json.loads(line)
        except ValueError as exc:
            raise WarmServerError(f"unreadable reply: {line[:120]!r}") from exc

    def next_uid(self) -> int:
        base, count = self.info["uids"]
        self._uid_next += 1
        return int(base) + self._uid_next % int(count)

    def run(self, args: Sequence[str], limits: Limits) -> RunResult:
        """Run ``python -m pytest *args`` in a fresh child; a `RunResult` as the backend's
        `run` would give it. Raises WarmServerError when the server fails (it is closed)."""
        with self._lock:
            if not self.alive():
                raise WarmServerError("the warm test server is not running")
            uid = self.next_uid()
            _chown_tree(self.writable, uid, uid)  # as the cold backend does per call
            os.chmod(self.writable, os.stat(self.writable).st_mode | 0o111)
            self._next_id += 1
            req = {"op": "run", "id": self._next_id, "argv": list(args), "uid": uid,
                   "limits": {"wall": float(limits.wall_seconds), "cpu": int(limits.cpu_seconds),
                              "mem": int(limits.memory_bytes), "nproc": int(limits.max_processes),
                              "fsize": int(limits.max_file_bytes), "out": int(limits.output_bytes)}}
            deadline = time.monotonic() + float(limits.wall_seconds) + REPLY_GRACE_S
            try:
                self.handle.stdin.write(json.dumps(req).encode() + b"\n")
                self.handle.stdin.flush()
                while True:
                    reply = self._read(deadline - time.monotonic())
                    if reply.get("id") == req["id"]:
                        break
            except (WarmServerError, TimeoutError, OSError, ValueError) as exc:
                tail = getattr(self.handle, "stderr_tail", lambda: "")()
                self.close()
                raise WarmServerError(
                    f"{type(exc).__name__}: {exc} {tail[-300:]}".strip()) from None
            if reply.get("status") != "done":
                self.close()
                raise WarmServerError(f"server: {reply.get('detail', reply.get('status'))}")
            return to_run_result(reply, limits)


def to_run_result(reply: dict, limits: Limits) -> RunResult:
    """The server's reply as the cold backend's `RunResult`: a child killed by signal N is
    exit status 128+N (what bwrap's reaper and docker-init report), a timed-out run has no
    exit code and SIGKILL."""
    timed_out = bool(reply["timed_out"])
    if reply.get("exited"):
        code = int(reply["code"])
    else:
        code = 128 + int(reply["signal"])
    sig = code - 128 if 128 < code < 128 + 65 else None
    if timed_out:
        sig = 9
    cap = int(limits.output_bytes)
    out = base64.b64decode(reply["stdout"])
    err = base64.b64decode(reply["stderr"])
    return RunResult(
        exit_code=None if timed_out else code,
        stdout=out[:cap].decode("utf-8", "replace"),
        stderr=err[:cap].decode("utf-8", "replace"),
        timed_out=timed_out, signal=sig, wall_seconds=float(reply.get("wall", 0.0)),
        stdout_truncated=int(reply["stdout_total"]) > cap,
        stderr_truncated=int(reply["stderr_total"]) > cap,
        resources={"stdout_bytes": int(reply["stdout_total"]),
                   "stderr_bytes": int(reply["stderr_total"]), "runner": "warm"})


def _close_handle(box: list) -> None:
    handle = box[0] if box else None
    if handle is not None:
        try:
            handle.close()
        except Exception:  # noqa: BLE001 - closing is best effort; the sandbox dies with us
            pass


__all__ = ["WarmServerError", "WarmTestServer", "WarmUnavailable", "shadowed_module",
           "to_run_result"]
