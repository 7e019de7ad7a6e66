"""bubblewrap backend: Linux namespaces, no daemon, ~7 ms start.

What a sandboxed process sees and may do:

* a new network namespace with only a down loopback (``connect`` → ENETUNREACH), new pid,
  ipc, uts (and cgroup, when the kernel allows) namespaces, its own session
  (``--new-session``: no TIOCSTI into our terminal) and ``--die-with-parent``;
* ``--clearenv`` plus an explicit environment (no PYTHONPATH / PATH from the caller);
* read-only binds of only what an interpreter needs: ``/usr`` (and the /bin, /lib, ...
  symlinks or directories), a few files of /etc, the Python installation
  (``sys.base_prefix``) and the *runner layer* (rlvr.sandbox.envs: a venv holding only pytest
  and its closure, at ``/opt/rlvr/venv``, never the pipeline's venv: torch & co. are not
  importable), plus a task's dependency layer when the caller passes ``task_env``. Neither
  ``/`` nor the repository root is bound, so ``data/`` (every task's hidden tests) is never
  visible;
* a fresh ``/tmp`` tmpfs, a minimal ``/dev`` and a ``/proc`` of its own pid namespace;
* the caller's `Mount`s, in order (a later mount lies over an earlier one: mount a workspace
  writable, then its public tests read-only on top).

Identity and limits. Running as root (this machine, CI containers) has a trap: the kernel
exempts uid 0 from RLIMIT_NPROC even inside a user namespace (``--unshare-user --uid 1000``
still maps to host uid 0, measured here: 20 forks pass a limit of 5). So when we are root,
bwrap keeps only CAP_SETUID/CAP_SETGID and ``setpriv`` drops the command to a fresh,
random, unprivileged *host* uid per call before exec: NPROC then counts only that sandbox's
processes (measured: the 5th fork fails with EAGAIN), the process has no capabilities,
cannot signal or ptrace anything outside, and ``no_new_privs`` is set by bwrap. Writable
mounts are chowned to that uid so it can write them. Without root, bwrap makes a user
namespace itself and the limits are applied inside it (where the kernel counts NPROC per
namespace). rlimits (CPU, AS, NPROC, FSIZE, CORE=0) are set by ``prlimit`` right before the
command is exec'd, inside the sandbox, so nothing runs in a forked child of this
(multi-threaded) process (no ``preexec_fn``).

A wall-clock timeout kills bwrap's process group; ``--die-with-parent`` (bwrap's PID-1
reaper inside the namespace dies with it) and the pid namespace then take the whole tree
down. That reaper also swallows the tree's resource usage (``wait4`` on bwrap reports 1 ms
for 0.5 s of CPU), so `RunResult.resources` holds output sizes only; the enclave measures
its verdict children itself. (``--as-pid-1`` would fix the accounting but, combined with the
uid switch and ``--new-session``, the parent-death signal no longer reaches the command:
measured, the tree survived bwrap.) stdout / stderr are drained concurrently and kept
up to `Limits.output_bytes` each (the rest is read and dropped, so a chatty process can
neither block on a full pipe nor fill our memory).

Fixed address layout. The command runs under ``setarch <machine> -R`` (personality
ADDR_NO_RANDOMIZE, inherited by every child and by exec) whenever the host allows it. Why:
CPython 3.11 hashes ``None`` by its address, so a set holding ``None`` prints in an order
that changes with ASLR from one process to the next (PYTHONHASHSEED does not cover it). A
synthesis probe's "Observed" line and a pytest assertion message embed such reprs, so with
ASLR the same task, seed and code gave a different instruction on a fresh clone (found by
the fresh-clone `dvc.lock` diff: 1 of 2,269 synthetic instructions, and every artifact
downstream of it). ASLR inside the sandbox buys no isolation: the code in it already runs
arbitrary Python. Where seccomp forbids the personality call (Docker's default profile) the
probe in ``__init__`` finds out once and `fixed_layout` is False; nothing else changes.
With ASLR off, ``hash(None)`` is a constant of the interpreter build (None lives in its data
segment), so the reprs repeat across processes, runs and clones on the same image.
A supervisor server (below) at uid 0 does not get it: the kernel clears ADDR_NO_RANDOMIZE
when a uid-0 process with capabilities execs (measured here: setarch -> prlimit -> python
ends with personality 0; so does setarch -> sh -> setarch -> python). A supervisor started
with `supervisor_as_uid` runs as a non-zero uid holding CAP_SETUID/CAP_SETGID as ambient
capabilities, and then keeps it (measured: personality 0x40000, and its forked children
still drop to other uids). The agent's warm run_tests server runs that way, so its
children print the same `hash(None)` and set orders as the cold path (a fresh clone found
a teacher episode whose run_tests observation ordered a None-set differently); the
enclave's server stays uid 0 (its verdicts carry no reprs).

`serve(..., supervisor=True)` starts a fork-server that drops each forked child to its own
unprivileged uid: the verification enclave's (rlvr/enclave/_inside/server.py; it stays uid 0
inside the sandbox with exactly CAP_SETUID/CAP_SETGID) and the agent's warm run_tests server
(rlvr/agent/_sandbox/rlvr_warm.py; with `supervisor_as_uid`, above). The uid range a
supervisor's children may use is passed in ``RLVR_SANDBOX_UIDS``.
"""
from __future__ import annotations

import functools
import os
import platform
import stat
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Sequence

from rlvr.errors import SandboxUnavailable
from rlvr.sandbox import envs
from rlvr.sandbox.base import (DEFAULT_ENV, UID_HIGH, UID_LOW, UIDS_PER_SUPERVISOR, Limits, Mount,
                               RunResult)

VENV_TARGET = envs.RUNNER_TARGET
# /etc entries an interpreter (and git) may want; everything else of /etc stays invisible.
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives", "nsswitch.conf")

_PROBED: dict[str, str | None] = {}
_PROBE_LOCK = threading.Lock()


def _unlimited(value: int | float | None) -> bool:
    return value is None or value <= 0


@functools.cache
def _fixed_layout_prefix() -> tuple[str, ...]:
    """``(setarch, <machine>, -R)`` if this host lets a process turn ASLR off, else ``()``.

    Probed once per process on the host: the same personality call inside the sandbox is
    made by the same kernel under the same seccomp state (bwrap adds no filter)."""
    setarch = shutil.which("setarch")
    if not setarch:
        return ()
    args = (setarch, platform.machine(), "-R")
    try:
        ok = subprocess.run([*args, "true"], capture_output=True, timeout=10,
                            stdin=subprocess.DEVNULL).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return args if ok else ()


def _make_readable(path: Path) -> None:
    """A read-only mount must be readable by the unprivileged sandbox uid, whatever uid that
    is: private trees (mkdtemp's 0700 dirs, 0600 files) get the world read bit (and search
    bit on directories). Nothing gains a write bit, and the bind is read-only anyway."""
    def widen(p: str, bits: int) -> None:
        mode = os.lstat(p).st_mode
        if stat.S_ISLNK(mode) or mode & bits == bits:
            return
        os.chmod(p, stat.S_IMODE(mode) | bits)

    if path.is_dir():
        widen(str(path), 0o005)
        for root, dirs, files in os.walk(path):
            for name in dirs:
                widen(os.path.join(root, name), 0o005)
            for name in files:
                widen(os.path.join(root, name), 0o004)
    else:
        widen(str(path), 0o004)


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    """Give a writable mount to the sandbox uid (we are root; ownership is all it needs)."""
    os.lchown(path, uid, gid)
    if path.is_dir() and not path.is_symlink():
        for root, dirs, files in os.walk(path):
            for name in dirs + files:
                os.lchown(os.path.join(root, name), uid, gid)


class BwrapServer:
    """A long-lived sandboxed process (Popen-backed `ServerHandle`).

    stdin/stdout are buffered binary pipes (write a line, then flush). stderr is drained by
    a thread into a bounded tail, for diagnostics only.
    """

    def __init__(self, proc: subprocess.Popen, tail_bytes: int = 64 << 10):
        self.proc = proc
        self.stdin: IO[bytes] = proc.stdin  # type: ignore[assignment]
        self.stdout: IO[bytes] = proc.stdout  # type: ignore[assignment]
        self.pid = proc.pid
        self._tail = bytearray()
        self._tail_bytes = tail_bytes
        self._drain = threading.Thread(target=self._drain_stderr, daemon=True)
        self._drain.start()

    def _drain_stderr(self) -> None:
        stream = self.proc.stderr
        assert stream is not None
        while True:
            chunk = stream.read1(1 << 16) if hasattr(stream, "read1") else stream.read(1 << 16)
            if not chunk:
                return
            self._tail += chunk
            if len(self._tail) > self._tail_bytes:
                del self._tail[: len(self._tail) - self._tail_bytes]

    def stderr_tail(self) -> str:
        return bytes(self._tail).decode("utf-8", "replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        """EOF on stdin asks the server to exit; after a grace period the group is killed."""
        for stream in (self.stdin,):
            try:
                stream.close()
            except (OSError, ValueError):
                pass
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait()
        for stream in (self.stdout, self.proc.stderr):
            try:
                stream.close()  # type: ignore[union-attr]
            except (OSError, ValueError):
                pass


class BwrapSandbox:
    """`Sandbox` on bubblewrap. See the module docstring for exactly what is isolated."""

    name = "bwrap"

    def __init__(self, bwrap: str | None = None):
        self._bwrap = bwrap or shutil.which("bwrap") or ""
        if not self._bwrap:
            raise SandboxUnavailable("bwrap: executable not found on PATH (apt-get install bubblewrap)")
        self._root = os.geteuid() == 0
        self._setpriv = shutil.which("setpriv") or ""
        self._prlimit = shutil.which("prlimit") or ""
        if self._root and not self._setpriv:
            raise SandboxUnavailable("bwrap: running as root needs util-linux `setpriv` to drop privileges")
        if not self._prlimit:
            # Fail closed: without it nothing would enforce Limits inside the sandbox.
            raise SandboxUnavailable("bwrap: util-linux `prlimit` is needed to apply resource limits")
        self._base_prefix = os.path.realpath(sys.base_prefix)
        try:
            self._runner = str(envs.runner_env())
        except OSError as exc:
            raise SandboxUnavailable(f"bwrap: cannot build the runner environment: {exc}") from exc
        self.python = f"{VENV_TARGET}/bin/python3"
        self._fixed_layout_args = _fixed_layout_prefix()
        self._probe()

    @property
    def fixed_layout(self) -> bool:
        """True when sandboxed commands run without ASLR (see "Fixed address layout")."""
        return bool(self._fixed_layout_args)

    # ---- construction of the bwrap command line ------------------------------------------
    def _system_args(self) -> list[str]:
        args: list[str] = []
        for top in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = Path("/") / top
            if host.is_symlink():
                args += ["--symlink", os.readlink(host), f"/{top}"]
            elif host.is_dir():
                args += ["--ro-bind", str(host), f"/{top}"]
        args += ["--perms", "0755", "--dir", "/etc"]
        for name in ETC_FILES:
            if os.path.lexists(f"/etc/{name}"):
                args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        args += ["--dev", "/dev", "--proc", "/proc", "--perms", "1777", "--tmpfs", "/tmp"]
        return args

    def _python_mounts(self, task_env: Path | None = None) -> list[tuple[str, str]]:
        pairs = [(self._base_prefix, self._base_prefix), (self._runner, VENV_TARGET)]
        if task_env is not None:
            if not Path(task_env).is_dir():
                raise FileNotFoundError(f"task environment does not exist: {task_env}")
            pairs.append((str(task_env), envs.TASKENV_TARGET))
        return pairs

    @staticmethod
    def _covered(target: str, mounted: list[str]) -> bool:
        return any(target == m or target.startswith(m.rstrip("/") + "/") for m in mounted)

    def _command(
        self,
        argv: Sequence[str],
        mounts: Sequence[Mount],
        cwd: str,
        env: dict[str, str] | None,
        limits: Limits,
        *,
        uid: int | None,
        supervisor_uids: tuple[int, int] | None = None,
        supervisor_uid: int | None = None,
        task_env: Path | None = None,
    ) -> list[str]:
        cmd = [
            self._bwrap,
            "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session",
            "--hostname", "sandbox", "--clearenv",
        ]
        full_env = dict(DEFAULT_ENV)
        full_env.update(env or {})
        if supervisor_uids is not None:
            full_env["RLVR_SANDBOX_UIDS"] = f"{supervisor_uids[0]}:{supervisor_uids[1]}"
        for key, value in full_env.items():
            cmd += ["--setenv", key, value]
        cmd += self._system_args()
        mounted = ["/dev", "/proc", "/tmp"] + [f"/{t}" for t in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
                                               if Path(f"/{t}").is_dir() and not Path(f"/{t}").is_symlink()]
        created = {"/etc"}
        binds = [(src, dst, False) for src, dst in self._python_mounts(task_env)]
        binds += [(str(m.source), m.target, m.writable) for m in mounts]
        for src, dst, writable in binds:
            if not dst.startswith("/"):
                raise ValueError(f"sandbox mount target must be absolute: {dst!r}")
            # Parent directories bwrap creates itself copy odd host modes (0700 under /root):
            # create them world-traversable, unless they lie inside an existing mount.
            parents = []
            parent = os.path.dirname(dst.rstrip("/"))
            while parent not in ("", "/"):
                parents.append(parent)
                parent = os.path.dirname(parent)
            for p in reversed(parents):
                if p not in created and not self._covered(p, mounted):
                    cmd += ["--perms", "0755", "--dir", p]
                    created.add(p)
            cmd += ["--bind" if writable else "--ro-bind", src, dst]
            mounted.append(dst)
        if not self._covered(cwd, mounted) and cwd not in created:
            cmd += ["--perms", "0755", "--dir", cwd]
        cmd += ["--chdir", cwd]
        if self._root:
            cmd += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        cmd.append("--")
        if self._root and uid is not None:
            cmd += self._setpriv_args(uid)
        if supervisor_uid is not None:  # not uid 0: the kernel keeps the fixed layout then
            cmd += self._setpriv_args(supervisor_uid, keep=("setuid", "setgid"))
        uid0_supervisor = supervisor_uids is not None and supervisor_uid is None
        if not uid0_supervisor:  # a uid-0 supervisor's own exec would drop the layout
            cmd += self._fixed_layout_args
        cmd += self._prlimit_args(limits, nproc=not (self._root and uid is None))
        cmd += list(argv)
        return cmd

    def _setpriv_args(self, uid: int, *, keep: Sequence[str] = ()) -> list[str]:
        """setpriv dropping to `uid` with no groups and no capability but `keep` (as
        inheritable and ambient ones, so they survive the exec of what follows)."""
        args = [self._setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                "--inh-caps=" + ",".join(["-all", *(f"+{c}" for c in keep)])]
        if keep:
            args.append("--ambient-caps=" + ",".join(f"+{c}" for c in keep))
        return [*args, "--"]

    def _prlimit_args(self, limits: Limits, *, nproc: bool) -> list[str]:
        args = [self._prlimit, "--core=0"]
        if not _unlimited(limits.cpu_seconds):
            soft = int(limits.cpu_seconds)
            args.append(f"--cpu={soft}:{soft + 1}")  # SIGXCPU at soft, SIGKILL one second later
        if not _unlimited(limits.memory_bytes):
            args.append(f"--as={int(limits.memory_bytes)}")
        if nproc and not _unlimited(limits.max_processes):
            args.append(f"--nproc={int(limits.max_processes)}")
        if not _unlimited(limits.max_file_bytes):
            args.append(f"--fsize={int(limits.max_file_bytes)}")
        return args + ["--"]

    def _fresh_uid(self) -> int | None:
        return UID_LOW + secrets.randbelow(UID_HIGH - UID_LOW) if self._root else None

    def _prepare_mounts(self, mounts: Sequence[Mount], uid: int | None) -> None:
        for m in mounts:
            if not Path(m.source).exists():
                raise FileNotFoundError(f"sandbox mount source does not exist: {m.source}")
            if m.writable and uid is not None:
                _chown_tree(Path(m.source), uid, uid)
                if Path(m.source).is_dir():
                    # bwrap enters --chdir before setpriv drops to `uid`, as a root without
                    # CAP_DAC_OVERRIDE: it needs the search bit.
                    os.chmod(m.source, os.stat(m.source).st_mode | 0o111)
            elif uid is not None:
                _make_readable(Path(m.source))

    def _probe(self) -> None:
        """Start one trivial sandbox (once per bwrap binary and process) or say why not."""
        with _PROBE_LOCK:
            if self._bwrap not in _PROBED:
                cmd = self._command(
                    [self.python, "-I", "-S", "-c", "pass"], [], "/tmp", None, Limits(), uid=self._fresh_uid()
                )
                try:
                    proc = subprocess.run(cmd, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
                    _PROBED[self._bwrap] = (
                        None if proc.returncode == 0
                        else f"bwrap cannot create namespaces here (exit {proc.returncode}): "
                        f"{proc.stderr.decode(errors='replace').strip()[:300]}"
                    )
                except (OSError, subprocess.TimeoutExpired) as exc:
                    _PROBED[self._bwrap] = f"bwrap failed to start: {exc}"
            problem = _PROBED[self._bwrap]
        if problem:
            raise SandboxUnavailable(problem)

    # ---- the protocol ---------------------------------------------------------------------
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
    ) -> RunResult:
        uid = self._fresh_uid()
        self._prepare_mounts(mounts, uid)
        cmd = self._command(argv, mounts, cwd, env, limits, uid=uid, task_env=task_env)
        start = time.monotonic()
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        deadline = start + limits.wall_seconds
        out, err, timed_out = _pump(proc, stdin, deadline, limits.output_bytes)
        status, _rusage = _wait4(proc, deadline if not timed_out else None)
        if uid is not None:
            _sweep_uid(uid)
        wall = time.monotonic() - start
        exit_code, sig = None, None
        if os.WIFEXITED(status):
            exit_code = os.WEXITSTATUS(status)
            # bwrap reports a child killed by signal N as exit status 128 + N.
            if exit_code > 128 and exit_code - 128 < signal.NSIG:
                sig = exit_code - 128
        elif os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
        cap = limits.output_bytes
        return RunResult(
            exit_code=None if timed_out else exit_code,
            stdout=bytes(out[0][:cap]).decode("utf-8", "replace"),
            stderr=bytes(err[0][:cap]).decode("utf-8", "replace"),
            timed_out=timed_out,
            signal=sig,
            wall_seconds=wall,
            stdout_truncated=out[1] > cap,
            stderr_truncated=err[1] > cap,
            resources={"stdout_bytes": out[1], "stderr_bytes": err[1]},
        )

    def serve(
        self,
        argv: Sequence[str],
        *,
        mounts: Sequence[Mount] = (),
        cwd: str = "/work",
        env: dict[str, str] | None = None,
        limits: Limits = Limits(),
        supervisor: bool = False,
        supervisor_as_uid: bool = False,
        task_env: Path | None = None,
    ) -> BwrapServer:
        """Start a long-lived sandboxed process; `Limits.wall_seconds` does not apply to it.

        `supervisor_as_uid` (with `supervisor`, as root): the supervisor runs as the first uid
        of its range with ambient CAP_SETUID/CAP_SETGID instead of uid 0, and its children
        get the rest of the range. Only so does it keep the fixed address layout ("Fixed
        address layout"); the agent's warm run_tests server uses it.

        ``--die-with-parent`` ties the server to the *thread* that spawns it (that is how
        PR_SET_PDEATHSIG works): spawn servers from a thread that outlives them.
        """
        supervisor_uids = supervisor_uid = None
        if supervisor and self._root:
            base = UID_LOW + secrets.randbelow((UID_HIGH - UID_LOW) // UIDS_PER_SUPERVISOR) * UIDS_PER_SUPERVISOR
            supervisor_uids = (base, UIDS_PER_SUPERVISOR)
            if supervisor_as_uid:
                supervisor_uid, supervisor_uids = base, (base + 1, UIDS_PER_SUPERVISOR - 1)
            uid = None
        else:
            uid = self._fresh_uid()
        self._prepare_mounts(mounts, uid)
        cmd = self._command(argv, mounts, cwd, env, limits, uid=uid, supervisor_uids=supervisor_uids,
                            supervisor_uid=supervisor_uid,
                            task_env=task_env)
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        return BwrapServer(proc)


def _pump(
    proc: subprocess.Popen, stdin: bytes | None, deadline: float, cap: int
) -> tuple[list, list, bool]:
    """Feed stdin and drain stdout/stderr until EOF or the deadline (then kill the group).

    Returns ([kept_bytes, total_len], [kept_bytes, total_len], timed_out).
    """
    out: list = [bytearray(), 0]
    err: list = [bytearray(), 0]
    sel = selectors.DefaultSelector()
    assert proc.stdout is not None and proc.stderr is not None
    for stream, acc in ((proc.stdout, out), (proc.stderr, err)):
        os.set_blocking(stream.fileno(), False)
        sel.register(stream.fileno(), selectors.EVENT_READ, acc)
    pending = memoryview(stdin) if stdin is not None else None
    if proc.stdin is not None:
        os.set_blocking(proc.stdin.fileno(), False)
        if pending is not None and len(pending):
            sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE, None)
        else:
            proc.stdin.close()
    timed_out = False
    open_reads = 2
    try:
        while open_reads:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in sel.select(timeout=min(remaining, 1.0)):
                if key.data is None:  # stdin writable
                    try:
                        n = os.write(key.fd, pending[:1 << 16])
                    except BrokenPipeError:
                        n = len(pending)
                    pending = pending[n:]
                    if not len(pending):
                        sel.unregister(key.fd)
                        proc.stdin.close()  # type: ignore[union-attr]
                    continue
                try:
                    chunk = os.read(key.fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(key.fd)
                    open_reads -= 1
                    continue
                acc = key.data
                if len(acc[0]) < cap:
                    acc[0] += chunk[: cap - len(acc[0])]
                acc[1] += len(chunk)
    finally:
        if timed_out:
            _kill_group(proc)
        sel.close()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
    return out, err, timed_out


def _uid_pids(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as fh:
                for line in fh:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            pids.append(int(entry))
                        break
        except (OSError, ValueError):
            continue
    return pids


def _sweep_uid(uid: int, grace: float = 5.0) -> None:
    """Kill, and wait out, every process still running as this call's private uid.

    Tearing down bwrap's pid namespace kills its members asynchronously; without this a
    detached grandchild could still write to a mount for a moment after `run` returned. The
    uid is unique to the call, so nothing else is touched."""
    end = time.monotonic() + grace
    while True:
        pids = _uid_pids(uid)
        if not pids or time.monotonic() > end:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _wait4(proc: subprocess.Popen, deadline: float | None):
    """Reap bwrap with its rusage (which covers the reaped sandbox tree). A process that
    closed its pipes but lingers past the deadline is killed."""
    while True:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return status, rusage
        if deadline is not None and time.monotonic() > deadline:
            _kill_group(proc)
            pid, status, rusage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            return status, rusage
        time.sleep(0.002)
