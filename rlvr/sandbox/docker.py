"""The `docker` sandbox backend: each run (or server) is a fresh, locked-down container.

Same guarantees as `bwrap` (see base.py), enforced by the engine and the kernel:

* `network_mode="none"`: only a loopback interface, a connect() to anything else fails;
* read-only root file system (the offline image from `image.py`: interpreter, stdlib, pytest,
  a few tools), tmpfs on /tmp and on `cwd` unless a mount provides it, and only the mounts
  asked for — read-only unless `Mount.writable`;
* an unprivileged user (uid/gid 1000; the caller's own ids when rlvr is not root),
  `cap_drop=ALL`, `no-new-privileges`, docker's default seccomp profile, hostname `sandbox`;
* cgroup limits per container — memory (+swap, when the kernel accounts it), pids, CPU share —
  and rlimits for CPU seconds, file size and core dumps;
* a wall-clock timeout that SIGKILLs the container, i.e. its whole process tree (docker-init is
  pid 1; when it dies the kernel kills everything in the pid namespace);
* stdout/stderr streamed from the attach socket and capped at `Limits.output_bytes` each
  (the container's log driver is `none`, so nothing is buffered on disk either);
* the environment is the same as bwrap's: its fixed DEFAULT_ENV updated with `env`, plus
  PWD=cwd, and nothing of the host's. The engine always injects PATH/HOSTNAME/HOME into a
  container, so the command is started through `env -i` to drop them.

`serve(..., supervisor=True)` (the enclave's fork-server, as in bwrap) runs the server as uid 0
with only CAP_SETUID/CAP_SETGID and passes a private uid range in RLVR_SANDBOX_UIDS, so it can
drop each forked verdict child to its own unprivileged uid.

Mount ownership. The sandbox user must be able to read (and, for writable mounts, write) what it
is given, yet callers hand us directories such as `tempfile.mkdtemp()` results (mode 0700,
owned by root). When rlvr runs as root, each mount whose owner is not the sandbox user is
presented through an *idmapped mount* (Linux >= 5.12: `open_tree` + `mount_setattr` with
`MOUNT_ATTR_IDMAP`): the source's owner appears inside as uid/gid 1000, files the sandbox
creates land on the host owned by that same owner, and nothing on the host is chmod-ed or
chown-ed. This is what bwrap's user namespace gives for free. When rlvr does not run as root
the container simply runs as the caller's own uid/gid, which owns the mounts already.

The daemon must be local (bind sources are paths on this machine); `scripts/dockerd.sh start`
runs a private one.
"""
from __future__ import annotations

import collections
import ctypes
import errno
import io
import os
import secrets
import select
import shutil
import signal as signal_mod
import socket
import stat
import struct
import subprocess
import tempfile
import threading
import time
import uuid
import weakref
from pathlib import Path, PurePosixPath
from typing import Sequence

import requests

from rlvr.errors import SandboxUnavailable
# The shared sandbox environment and supervisor uid range (base.py), so one enclave gives the same
# verdicts on either backend (PYTHONUNBUFFERED, LC_ALL, HOME... all change program behaviour).
from rlvr.sandbox.base import (DEFAULT_ENV, UID_HIGH, UID_LOW, UIDS_PER_SUPERVISOR, Limits, Mount,
                               RunResult)
from rlvr.sandbox.envs import TASKENV_TARGET
from rlvr.sandbox.image import PREFIX, SANDBOX_GID, SANDBOX_UID, build_image

LABEL = "org.rlvr.sandbox"
STAGING_PREFIX = "rlvr-docker-mounts-"
_STREAM_STDOUT, _STREAM_STDERR = 1, 2
_READ_CHUNK = 1 << 16


def _docker():
    try:
        import docker  # noqa: F401
        import docker.errors  # noqa: F401
        import docker.types  # noqa: F401
    except ImportError as exc:  # pragma: no cover - the docker SDK is in requirements/lock.txt
        raise SandboxUnavailable(f"docker backend: the docker SDK is not installed ({exc})") from exc
    return docker


# ---------------------------------------------------------------------------------------------
# Idmapped bind mounts (root only)
# ---------------------------------------------------------------------------------------------

_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442  # same on x86_64 and arm64
_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000
_OPEN_TREE_CLONE = 1
_OPEN_TREE_CLOEXEC = os.O_CLOEXEC
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MOUNT_ATTR_RDONLY = 0x1
_MOUNT_ATTR_NOSUID = 0x2
_MOUNT_ATTR_NODEV = 0x4
_MOUNT_ATTR_IDMAP = 0x00100000
_MNT_DETACH = 2


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


_libc = None
_userns_fds: dict[tuple[int, int, int, int], int] = {}
_userns_lock = threading.Lock()


def _syscall(number: int, *args) -> int:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    _libc.syscall.restype = ctypes.c_long
    # Variadic call: widen every int to a C long, or the upper half of the register is garbage.
    args = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    result = _libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def _userns_fd(host_uid: int, host_gid: int, uid: int, gid: int) -> int:
    """An fd of a user namespace whose mapping, used as a mount idmap, shows files owned by
    host_uid:host_gid as uid:gid. Made once per mapping and kept for the process lifetime
    (the fd keeps the namespace alive after its helper process is gone)."""
    key = (host_uid, host_gid, uid, gid)
    with _userns_lock:
        if key in _userns_fds:
            return _userns_fds[key]
        unshare = shutil.which("unshare") or "/usr/bin/unshare"
        helper = subprocess.Popen([unshare, "--user", "--", "sleep", "30"],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE)
        try:
            mine = os.readlink("/proc/self/ns/user")
            deadline = time.monotonic() + 5
            while os.readlink(f"/proc/{helper.pid}/ns/user") == mine:
                if helper.poll() is not None or time.monotonic() > deadline:
                    raise OSError(errno.EPERM, f"unshare --user failed: {helper.stderr.read().decode()[:200]}")
                time.sleep(0.001)
            # uid_map reads "<id inside> <id outside> <count>"; as a mount idmap the on-disk id is
            # looked up on the "inside" side and shown as the "outside" one.
            with open(f"/proc/{helper.pid}/uid_map", "w") as f:
                f.write(f"{host_uid} {uid} 1\n")
            with open(f"/proc/{helper.pid}/gid_map", "w") as f:
                f.write(f"{host_gid} {gid} 1\n")
            fd = os.open(f"/proc/{helper.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        finally:
            helper.kill()
            helper.wait()
            if helper.stderr:
                helper.stderr.close()
        _userns_fds[key] = fd
        return fd


class _Stager:
    """Presents mount sources to the sandbox user, through idmapped mounts when needed.

    Staged mounts live under a private directory (mode 0700) and are detached as soon as their
    container is gone; `release_all` runs at interpreter exit for anything left behind.
    """

    def __init__(self, uid: int, gid: int):
        self.uid, self.gid = uid, gid
        # Shared with the finalizer, which must not reference `self`.
        self._state: dict = {"root": None, "active": set()}
        self._active: set[str] = self._state["active"]
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _Stager._release_all, self._state, self._lock)

    @property
    def needs_idmap(self) -> bool:
        return os.geteuid() == 0 and (self.uid, self.gid) != (0, 0)

    def stage(self, source: Path, readonly: bool) -> str:
        """A host path that, bind-mounted, shows `source` as owned by the sandbox user."""
        st = os.stat(source)
        if not self.needs_idmap or (st.st_uid, st.st_gid) == (self.uid, self.gid):
            return str(source)
        try:
            ns_fd = _userns_fd(st.st_uid, st.st_gid, self.uid, self.gid)
            tree = _syscall(_SYS_OPEN_TREE, _AT_FDCWD, os.fsencode(source),
                            _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC)
        except OSError as exc:
            return self._fallback(source, st, readonly, exc)
        try:
            attr = _MountAttr(_MOUNT_ATTR_IDMAP | _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV
                              | (_MOUNT_ATTR_RDONLY if readonly else 0), 0, 0, ns_fd)
            try:
                _syscall(_SYS_MOUNT_SETATTR, tree, b"", _AT_EMPTY_PATH, ctypes.byref(attr),
                         ctypes.sizeof(attr))
            except OSError as exc:
                return self._fallback(source, st, readonly, exc)
            target = self._new_target(is_dir=stat.S_ISDIR(st.st_mode))
            _syscall(_SYS_MOVE_MOUNT, tree, b"", _AT_FDCWD, os.fsencode(target),
                     _MOVE_MOUNT_F_EMPTY_PATH)
        finally:
            os.close(tree)
        with self._lock:
            self._active.add(target)
        return target

    def _fallback(self, source: Path, st: os.stat_result, readonly: bool, exc: OSError) -> str:
        # No idmapped mounts here (old kernel, or a file system without support): a plain bind
        # still works when permissions already let the sandbox user in.
        other_ok = st.st_mode & (stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else 0))
        if readonly and other_ok == (stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else 0)):
            return str(source)
        raise SandboxUnavailable(
            f"docker backend: cannot show {source} (owner {st.st_uid}:{st.st_gid}, mode "
            f"{stat.S_IMODE(st.st_mode):o}) to the sandbox user {self.uid}:{self.gid}: idmapped "
            f"mounts failed ({exc}); make it {'readable' if readonly else 'writable'} by uid "
            f"{self.uid} or use the bwrap backend"
        )

    def _new_target(self, is_dir: bool) -> str:
        with self._lock:
            if self._state["root"] is None:
                _reap_stale_staging()
                self._state["root"] = tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-")
            root = self._state["root"]
        path = os.path.join(root, uuid.uuid4().hex[:16])
        if is_dir:
            os.mkdir(path, 0o700)
        else:
            open(path, "x").close()
        return path

    def release(self, paths: Sequence[str]) -> None:
        with self._lock:
            mine = [p for p in paths if p in self._active]
            self._active.difference_update(mine)
        for p in mine:
            _detach(p)

    @staticmethod
    def _release_all(state: dict, lock: threading.Lock) -> None:
        with lock:
            paths = list(state["active"])
            state["active"].clear()
            root, state["root"] = state["root"], None
        for p in paths:
            _detach(p)
        if root:
            try:
                os.rmdir(root)
            except OSError:
                pass


def _reap_stale_staging() -> None:
    """Detach staged mounts left by rlvr processes that died without cleaning up (SIGKILL):
    their staging directory names carry the pid."""
    try:
        with open("/proc/self/mounts") as f:
            points = [line.split()[1] for line in f]
    except OSError:
        return
    roots = set()
    for point in points:
        name = os.path.basename(os.path.dirname(point))
        if not name.startswith(STAGING_PREFIX):
            continue
        pid = name[len(STAGING_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            _detach(point)
            roots.add(os.path.dirname(point))
    for root in roots:
        try:
            os.rmdir(root)
        except OSError:
            pass


def _detach(path: str) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    _libc.umount2(os.fsencode(path), _MNT_DETACH)
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            os.rmdir(path)
        else:
            os.unlink(path)
    except OSError:
        pass


# ---------------------------------------------------------------------------------------------
# Attach-stream plumbing
# ---------------------------------------------------------------------------------------------

class _Demux:
    """Parses docker's multiplexed attach stream: frames of [stream, 0, 0, 0, size(be32)]
    followed by `size` payload bytes (stream 1 = stdout, 2 = stderr)."""

    def __init__(self):
        self._buf = bytearray()

    def feed(self, data: bytes):
        self._buf += data
        while len(self._buf) >= 8:
            kind, size = struct.unpack(">BxxxL", self._buf[:8])
            if len(self._buf) < 8 + size:
                break
            payload = bytes(self._buf[8:8 + size])
            del self._buf[:8 + size]
            yield kind, payload


class _CappedBuffer:
    def __init__(self, cap: int):
        self.cap = cap
        self.data = bytearray()
        self.truncated = False
        self.total = 0  # bytes the process wrote, kept or not

    def add(self, payload: bytes) -> None:
        self.total += len(payload)
        room = self.cap - len(self.data)
        if len(payload) > room:
            self.truncated = True
            payload = payload[:max(room, 0)]
        self.data += payload

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


class _AttachStdin(io.RawIOBase):
    """The write half of an attach socket as a binary file: `write` + `flush`; `close` half-
    closes the connection, which (with StdinOnce) closes the process's stdin."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if self.closed:
            raise ValueError("write to closed sandbox stdin")
        data = bytes(data)
        with self._lock:
            try:
                self._sock.sendall(data)
            except OSError as exc:
                raise BrokenPipeError(errno.EPIPE, f"sandbox server stdin: {exc}") from exc
        return len(data)

    def fileno(self) -> int:
        return self._sock.fileno()

    def close(self) -> None:
        if not self.closed:
            try:
                self._sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        super().close()


class DockerServer:
    """A running sandboxed server: `stdin`/`stdout` are binary files (stdout is a real pipe, so
    `select()` on `stdout.fileno()` works as with a subprocess); stderr is kept as a bounded
    tail in `stderr_tail()` for diagnostics. `close()` kills and removes the container."""

    def __init__(self, sandbox: "DockerSandbox", container_id: str, sock: socket.socket,
                 keepalive, staged: list[str], stderr_cap: int):
        self._sandbox = sandbox
        self.container_id = container_id
        self._sock = sock
        self._keepalive = keepalive
        self._staged = staged
        self._stderr = collections.deque()
        self._stderr_len = 0
        self._stderr_cap = stderr_cap
        self._eof = threading.Event()
        self._closed = False
        self._close_lock = threading.Lock()
        read_fd, self._write_fd = os.pipe()
        os.set_inheritable(read_fd, False)
        self.stdout = os.fdopen(read_fd, "rb")
        self.stdin = _AttachStdin(sock)
        self._reader = threading.Thread(target=self._pump, name=f"rlvr-docker-{container_id[:12]}",
                                        daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        demux = _Demux()
        try:
            while True:
                try:
                    data = self._sock.recv(_READ_CHUNK)
                except OSError:
                    break
                if not data:
                    break
                for kind, payload in demux.feed(data):
                    if kind == _STREAM_STDOUT:
                        view = memoryview(payload)
                        while view:
                            try:
                                n = os.write(self._write_fd, view)
                            except OSError:
                                return  # reader side closed: nobody listens any more
                            view = view[n:]
                    elif kind == _STREAM_STDERR:
                        payload = payload[-self._stderr_cap:]
                        self._stderr.append(payload)
                        self._stderr_len += len(payload)
                        while self._stderr_len > self._stderr_cap and len(self._stderr) > 1:
                            self._stderr_len -= len(self._stderr.popleft())
        finally:
            self._eof.set()
            try:
                os.close(self._write_fd)
            except OSError:
                pass

    def stderr_tail(self) -> str:
        """The last ~`Limits.output_bytes` the server wrote to stderr."""
        return b"".join(self._stderr).decode("utf-8", errors="replace")[-self._stderr_cap:]

    def alive(self) -> bool:
        """True until the server process exits (its attach stream ends) or `close()`."""
        return not self._closed and not self._eof.is_set()

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._sandbox._destroy(self.container_id)
        finally:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            # Close our end of the stdout pipe first: a pump blocked writing into a full pipe
            # then fails with EPIPE instead of holding up the join.
            for f in (self.stdout, self.stdin):
                try:
                    f.close()
                except OSError:
                    pass
            self._reader.join(timeout=10)
        try:
            self._sock.close()
        except OSError:
            pass
        self._keepalive = None
        self._sandbox._stager.release(self._staged)

    def __enter__(self) -> "DockerServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):  # a forgotten handle must not leave a container behind
        try:
            self.close()
        except Exception:
            pass


# ---------------------------------------------------------------------------------------------
# The backend
# ---------------------------------------------------------------------------------------------

_image_cache: dict[str, str] = {}
_image_lock = threading.Lock()


class DockerSandbox:
    """Sandbox backend on a (local) docker daemon; see the module docstring for the guarantees.

    `docker_host` defaults to $DOCKER_HOST (then docker's default socket); `image` to the
    offline-built `rlvr-sandbox:<hash>` (built on first use, cached by tag); `cpus` is the CPU
    share per container. Construction only pings the daemon, so it is cheap and fails fast with
    SandboxUnavailable when there is none.
    """

    name = "docker"
    python = f"{PREFIX}/bin/python3"

    def __init__(self, *, docker_host: str | None = None, image: str | None = None,
                 cpus: float = 1.0, client=None):
        docker = _docker()
        where = docker_host or os.environ.get("DOCKER_HOST") or "the default docker socket"
        try:
            if client is None:
                client = (docker.DockerClient(base_url=docker_host, timeout=120) if docker_host
                          else docker.from_env(timeout=120))
            client.ping()
            info = client.info()
        except Exception as exc:  # the SDK raises several unrelated types for "no daemon"
            raise SandboxUnavailable(
                f"docker backend: no daemon answers at {where} ({type(exc).__name__}: {exc}); "
                "start a private one with `eval \"$(scripts/dockerd.sh start)\"`"
            ) from exc
        missing = [k for k in ("MemoryLimit", "PidsLimit") if info.get(k) is False]
        if missing:
            raise SandboxUnavailable(
                f"docker backend: the daemon at {where} cannot enforce {', '.join(missing)} "
                "(cgroup controller missing); refusing to run untrusted code without them"
            )
        self._client = client
        self._api = client.api
        self._swap_limit = info.get("SwapLimit", False) is not False
        self._image = image
        self.cpus = float(cpus)
        if os.geteuid() == 0:
            self.uid, self.gid = SANDBOX_UID, SANDBOX_GID
        else:  # the caller's own ids already own its mounts (and are not root)
            self.uid, self.gid = os.geteuid(), os.getegid()
        self._stager = _Stager(self.uid, self.gid)
        self.instance_id = uuid.uuid4().hex[:12]

    # -- public protocol ------------------------------------------------------------------
    @property
    def image(self) -> str:
        """The image tag, built offline on first use (cached per daemon by content hash)."""
        if self._image is None:
            key = self._api.base_url
            with _image_lock:
                if key not in _image_cache:
                    _image_cache[key] = build_image(self._client)
                self._image = _image_cache[key]
        return self._image

    def run(self, argv: Sequence[str], *, mounts: Sequence[Mount] = (), cwd: str = "/work",
            env: dict[str, str] | None = None, limits: Limits = Limits(),
            stdin: bytes | None = None, task_env: Path | None = None) -> RunResult:
        """Run `argv` to completion in a fresh container (removed afterwards)."""
        docker = _docker()
        mounts = _with_task_env(mounts, task_env)
        staged: list[str] = []
        cid = None
        try:
            config = self._container_config(argv, mounts, cwd, env, limits, staged,
                                            stdin_open=stdin is not None)
            cid = self._create(config)
            sock, keepalive = self._attach(cid, stdin=stdin is not None)
            try:
                return self._run_attached(cid, sock, limits, stdin)
            finally:
                sock.close()
                del keepalive
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise SandboxUnavailable(f"docker backend: {type(exc).__name__}: {exc}") from exc
        finally:
            if cid is not None:
                self._destroy(cid)
            self._stager.release(staged)

    def serve(self, argv: Sequence[str], *, mounts: Sequence[Mount] = (), cwd: str = "/work",
              env: dict[str, str] | None = None, limits: Limits = Limits(),
              supervisor: bool = False, task_env: Path | None = None) -> DockerServer:
        """Start `argv` as a long-lived server spoken to over stdin/stdout.

        `limits.wall_seconds` does not apply (the server lives until `close()`; per-request
        deadlines are the caller's), every other limit does. `supervisor=True` is for the
        enclave's fork-server only (see the module docstring); it needs rlvr to run as root,
        as with bwrap, and is otherwise an ordinary server.
        """
        docker = _docker()
        mounts = _with_task_env(mounts, task_env)
        staged: list[str] = []
        cid = None
        try:
            config = self._container_config(argv, mounts, cwd, env, limits, staged, stdin_open=True,
                                            supervisor=supervisor and os.geteuid() == 0)
            cid = self._create(config)
            sock, keepalive = self._attach(cid, stdin=True)
            self._api.start(cid)
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            if cid is not None:
                self._destroy(cid)
            self._stager.release(staged)
            raise SandboxUnavailable(f"docker backend: {type(exc).__name__}: {exc}") from exc
        except BaseException:
            if cid is not None:
                self._destroy(cid)
            self._stager.release(staged)
            raise
        return DockerServer(self, cid, sock, keepalive, staged, stderr_cap=limits.output_bytes)

    def containers(self) -> list[str]:
        """Ids of containers this instance created that still exist (for leak checks)."""
        found = self._api.containers(all=True, quiet=True,
                                     filters={"label": f"{LABEL}.instance={self.instance_id}"})
        return [c["Id"] for c in found]

    # -- internals ------------------------------------------------------------------------
    def _container_config(self, argv, mounts, cwd, env, limits: Limits, staged: list[str], *,
                          stdin_open: bool, supervisor: bool = False) -> dict:
        docker = _docker()
        argv = [str(a) for a in argv]
        if not argv:
            raise ValueError("sandbox: empty argv")
        if "=" in argv[0]:
            raise ValueError(f"sandbox: a program name cannot contain '=' ({argv[0]!r})")
        if not cwd.startswith("/"):
            raise ValueError(f"sandbox: cwd must be absolute, got {cwd!r}")
        cwd = str(PurePosixPath(cwd))
        env = {**DEFAULT_ENV, **(env or {})}
        if supervisor:
            base = UID_LOW + secrets.randbelow((UID_HIGH - UID_LOW) // UIDS_PER_SUPERVISOR) * UIDS_PER_SUPERVISOR
            env["RLVR_SANDBOX_UIDS"] = f"{base}:{UIDS_PER_SUPERVISOR}"
        env["PWD"] = cwd  # as bwrap's --chdir sets it
        for key in env:
            if not key or "=" in key or "\0" in key or "\0" in str(env[key]):
                raise ValueError(f"sandbox: invalid environment variable name {key!r}")
        # The supervisor is uid 0 (the host's root, which owns the mounts): no idmap is needed.
        uid, gid = (0, 0) if supervisor else (self.uid, self.gid)
        stager = _Stager(0, 0) if supervisor else self._stager

        docker_mounts = []
        targets = set()
        for m in sorted(mounts, key=lambda m: len(PurePosixPath(m.target).parts)):
            target = str(PurePosixPath(m.target))
            if not target.startswith("/"):
                raise ValueError(f"sandbox: mount target must be absolute, got {m.target!r}")
            source = Path(m.source).resolve()
            if not source.exists():
                raise FileNotFoundError(f"sandbox: mount source {m.source} does not exist")
            self._ensure_mountpoint(mounts, target, source)
            host_path = stager.stage(source, readonly=not m.writable)
            if host_path != str(source):
                staged.append(host_path)
            docker_mounts.append(docker.types.Mount(target, host_path, type="bind",
                                                    read_only=not m.writable))
            targets.add(target)

        # A limit <= 0 (or None) means "unlimited", as in bwrap. tmpfs pages are charged to the
        # container's memory cgroup, so the memory limit bounds them too.
        memory = None if _unlimited(limits.memory_bytes) else int(limits.memory_bytes)
        size = f"size={memory}," if memory else ""
        tmpfs = {}
        if "/tmp" not in targets:
            tmpfs["/tmp"] = f"rw,nosuid,nodev,{size}mode=1777"
        if not any(_is_under(cwd, t) for t in targets) and cwd != "/":
            if not any(_is_under(cwd, t) for t in tmpfs):
                tmpfs[cwd] = f"rw,nosuid,nodev,{size}mode=0755,uid={uid},gid={gid}"
        else:
            self._check_cwd(mounts, cwd)

        ulimits = [docker.types.Ulimit(name="core", soft=0, hard=0)]
        if not _unlimited(limits.cpu_seconds):  # SIGXCPU at the soft limit, SIGKILL 1 s later
            cpu = int(limits.cpu_seconds)
            ulimits.append(docker.types.Ulimit(name="cpu", soft=cpu, hard=cpu + 1))
        if not _unlimited(limits.max_file_bytes):
            fsize = int(limits.max_file_bytes)
            ulimits.append(docker.types.Ulimit(name="fsize", soft=fsize, hard=fsize))
        # No RLIMIT_NPROC: it counts every process of the uid across *all* containers, so a
        # fork bomb in one sandbox would make fork() fail in its siblings. The pids cgroup
        # below is the per-container process limit.
        host_config = self._api.create_host_config(
            network_mode="none",
            read_only=True,
            mounts=docker_mounts,
            tmpfs=tmpfs,
            mem_limit=memory,
            memswap_limit=memory if (memory and self._swap_limit) else None,
            pids_limit=None if _unlimited(limits.max_processes) else int(limits.max_processes),
            nano_cpus=int(self.cpus * 1e9),
            ulimits=ulimits,
            cap_drop=["ALL"],
            cap_add=["SETUID", "SETGID"] if supervisor else None,
            security_opt=["no-new-privileges"],
            init=True,
            ipc_mode="private",
            shm_size=min(memory or (64 << 20), 64 << 20),
            log_config=docker.types.LogConfig(type="none"),
        )
        command = ["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv]
        return dict(
            image=self.image,
            command=command,
            user=f"{uid}:{gid}",
            hostname="sandbox",
            working_dir=cwd,
            environment=[],
            # detach=False + stdin_open sets StdinOnce: half-closing the attach socket closes
            # the process's stdin (EOF), as closing a subprocess pipe would.
            stdin_open=stdin_open,
            detach=False,
            tty=False,
            use_config_proxy=False,
            network_disabled=True,
            labels={LABEL: "1", f"{LABEL}.instance": self.instance_id},
            host_config=host_config,
        )

    @staticmethod
    def _ensure_mountpoint(mounts, target: str, source: Path) -> None:
        """A mount nested in another one (e.g. /work/tests inside /work) needs its mount point
        to exist in the outer source: the engine cannot create it through an idmapped mount, so
        it is made here, as bwrap would make it through its bind."""
        parents = [m for m in mounts if _is_under(target, str(PurePosixPath(m.target)))
                   and str(PurePosixPath(m.target)) != target]
        if not parents:
            return
        parent = max(parents, key=lambda m: len(PurePosixPath(m.target).parts))
        rel = PurePosixPath(target).relative_to(str(PurePosixPath(parent.target)))
        point = Path(parent.source).resolve() / rel
        if point.exists() or point.is_symlink():
            return
        if source.is_dir():
            point.mkdir(parents=True)
        else:
            point.parent.mkdir(parents=True, exist_ok=True)
            point.touch()

    @staticmethod
    def _check_cwd(mounts, cwd: str) -> None:
        inner = [m for m in mounts if _is_under(cwd, str(PurePosixPath(m.target)))]
        m = max(inner, key=lambda m: len(PurePosixPath(m.target).parts))
        rel = PurePosixPath(cwd).relative_to(str(PurePosixPath(m.target)))
        if not (Path(m.source) / rel).is_dir():
            raise FileNotFoundError(f"sandbox: cwd {cwd} does not exist in mount {m.source}")

    def _create(self, config: dict) -> str:
        return self._api.create_container(**config)["Id"]

    def _attach(self, cid: str, *, stdin: bool):
        """Attach to the (not yet started) container's streams: the raw socket, plus the HTTP
        response object that must stay referenced while the socket is in use."""
        params = {"stdout": 1, "stderr": 1, "stream": 1, "stdin": 1 if stdin else 0}
        response = self._api.post(
            self._api._url("/containers/{0}/attach", cid), None, params=params, stream=True,
            headers={"Connection": "Upgrade", "Upgrade": "tcp"},
        )
        self._api._raise_for_status(response)
        raw = response.raw._fp.fp.raw  # the connection's SocketIO (unix socket or plain TCP)
        sock = getattr(raw, "_sock", raw)
        if not isinstance(sock, socket.socket):
            raise SandboxUnavailable(
                f"docker backend: attach over {self._api.base_url} did not give a plain socket; "
                "use a local unix-socket daemon (scripts/dockerd.sh start)"
            )
        sock.settimeout(None)
        return sock, (response, raw)

    def _run_attached(self, cid: str, sock: socket.socket, limits: Limits,
                      stdin: bytes | None) -> RunResult:
        out, err = _CappedBuffer(limits.output_bytes), _CappedBuffer(limits.output_bytes)
        demux = _Demux()
        t0 = time.monotonic()
        self._api.start(cid)
        deadline = t0 + limits.wall_seconds
        if stdin is not None:
            threading.Thread(target=_feed_stdin, args=(sock, stdin), daemon=True).start()
        timed_out = False
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([sock], [], [], remaining)
            if not ready:
                continue
            try:
                data = sock.recv(_READ_CHUNK)
            except OSError:
                data = b""
            if not data:
                break
            for kind, payload in demux.feed(data):
                (out if kind == _STREAM_STDOUT else err).add(payload)
        status = None
        if not timed_out:
            # The streams can end before the process does (it may close stdout and stderr and
            # keep running): the wall clock still applies to the wait.
            try:
                status = self._api.wait(cid, timeout=max(deadline - time.monotonic(), 0.01))
            except requests.exceptions.RequestException:
                timed_out = True
        if timed_out:
            self._kill(cid)
            status = self._api.wait(cid, timeout=60)
        wall = time.monotonic() - t0
        code = int(status.get("StatusCode", -1))
        oom = False
        if code != 0:
            state = self._api.inspect_container(cid).get("State", {})
            oom = bool(state.get("OOMKilled"))
        signum = code - 128 if 128 < code < 128 + 65 else None
        return RunResult(
            exit_code=None if timed_out else code,
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
            signal=int(signal_mod.SIGKILL) if timed_out else signum,
            wall_seconds=wall,
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
            resources={"backend": "docker", "oom_killed": oom, "image": self.image,
                       "stdout_bytes": out.total, "stderr_bytes": err.total},
        )

    def _kill(self, cid: str) -> None:
        docker = _docker()
        try:
            self._api.kill(cid, signal="SIGKILL")
        except docker.errors.APIError:
            pass  # already exited

    def _destroy(self, cid: str) -> None:
        docker = _docker()
        try:
            self._api.remove_container(cid, force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if "already in progress" not in str(exc):
                raise


def _with_task_env(mounts: Sequence[Mount], task_env: Path | None) -> list[Mount]:
    """The task's dependency layer (rlvr.sandbox.envs), read-only, where the image's
    `rlvr_taskenv.pth` looks for it: the very directory bwrap mounts, so both backends give
    tested code the same files."""
    if task_env is None:
        return list(mounts)
    if not Path(task_env).is_dir():
        raise FileNotFoundError(f"task environment does not exist: {task_env}")
    return [Mount(Path(task_env), TASKENV_TARGET), *mounts]


def _feed_stdin(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the process exited (or was killed) before reading all of it


def _unlimited(value) -> bool:
    return value is None or value <= 0


def _is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
