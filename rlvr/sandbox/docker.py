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
chown-ed (`rlvr.sandbox.idmap`). This is what bwrap's user namespace gives for free. When
rlvr does not run as root the container simply runs as the caller's own uid/gid, which owns
the mounts already. A container's streams travel over the raw attach socket
(`rlvr.sandbox.docker_attach`).

Where the daemon runs (rlvr/sandbox/docker_client.py). A local daemon (unix socket) binds
this machine's paths as above (`transport = "bind"`); `scripts/dockerd.sh start` runs a
private one. A daemon on another host (tcp:// with mutual TLS, or ssh://) cannot see them:
mounts travel as tar archives into Docker volumes and writable ones come back after each
run (`transport = "copy"`, rlvr/sandbox/docker_copy.py), and stdin reaches a run as a file
in a volume, since a TLS stream cannot be half-closed to say end-of-input. Everything else
(limits, user, network, streams) is the same.
"""
from __future__ import annotations

import functools
import os
import tempfile
import weakref
import secrets
import select
import shutil
import signal as signal_mod
import socket
import threading
import time
import uuid
from pathlib import Path, PurePosixPath
from typing import Sequence

import requests

from rlvr.errors import SandboxUnavailable
# The shared sandbox environment and supervisor uid range (base.py), so one enclave gives the same
# verdicts on either backend (PYTHONUNBUFFERED, LC_ALL, HOME... all change program behaviour).
from rlvr.sandbox.base import (DEFAULT_ENV, UID_HIGH, UID_LOW, UIDS_PER_SUPERVISOR, Limits, Mount,
                               RunResult)
from rlvr.sandbox.docker_attach import (READ_CHUNK, STREAM_STDOUT, CappedBuffer, Demux,
                                        DockerServer, attach_socket, feed_stdin)
from rlvr.sandbox.docker_client import (Transport, check_address, docker_client, effective_host,
                                        transport_of)
from rlvr.sandbox.docker_copy import VolumeCopies
from rlvr.sandbox.envs import TASKENV_TARGET
from rlvr.sandbox.idmap import Stager
from rlvr.sandbox.image import PREFIX, SANDBOX_GID, SANDBOX_UID, build_image

LABEL = "org.rlvr.sandbox"
STDIN_TARGET = "/.rlvr-stdin"  # copy transport: a run's stdin, as a file in a volume
# copy transport: the most file data a writable mount may bring back from one run (the bind
# backend bounds it by the host's disk; here it also travels through memory and the network)
COPY_BACK_CAP = 1 << 30


def _docker():
    try:
        import docker  # noqa: F401
        import docker.errors  # noqa: F401
        import docker.types  # noqa: F401
    except ImportError as exc:  # pragma: no cover - the docker SDK is in requirements/lock.txt
        raise SandboxUnavailable(f"docker backend: the docker SDK is not installed ({exc})") from exc
    return docker


_image_cache: dict[str, str] = {}
_image_lock = threading.Lock()


class DockerSandbox:
    """Sandbox backend on a docker daemon; see the module docstring for the guarantees.

    `docker_host` defaults to $DOCKER_HOST (then docker's default socket); a tcp:// host needs
    `tls_dir` (docker_client.py); `transport` defaults to bind for a unix socket, copy
    otherwise (copy also works on a local daemon); `image` to the offline-built
    `rlvr-sandbox:<hash>` (built on first use, cached by tag); `cpus` is the CPU share per
    container. Construction only pings the daemon, so it is cheap and fails fast with
    SandboxUnavailable when there is none.
    """

    name = "docker"
    python = f"{PREFIX}/bin/python3"

    def __init__(self, *, docker_host: str | None = None, image: str | None = None,
                 cpus: float = 1.0, client=None, tls_dir: str | None = None,
                 transport: Transport | None = None):
        _docker()
        where = effective_host(docker_host) or "the default docker socket"
        self.transport: Transport = transport or transport_of(docker_host)
        check_address(docker_host, tls_dir)  # a refused address is a ConfigError, not "no daemon"
        try:
            if client is None:
                client = docker_client(docker_host, tls_dir)
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
        if os.geteuid() == 0 or self.transport == "copy":  # copies carry their own owners
            self.uid, self.gid = SANDBOX_UID, SANDBOX_GID
        else:  # the caller's own ids already own its mounts (and are not root)
            self.uid, self.gid = os.geteuid(), os.getegid()
        self._stager = Stager(self.uid, self.gid)
        self.instance_id = uuid.uuid4().hex[:12]
        self.docker_host = where
        self._copies: VolumeCopies | None = None
        self._copies_lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _close_copies, [])

    @property
    def copies(self) -> VolumeCopies:
        """The volumes of the copy transport (created on first use: it needs the image)."""
        with self._copies_lock:
            if self._copies is None:
                self._copies = VolumeCopies(self._api, self.image, self.instance_id, LABEL)
                self._finalizer.detach()
                self._finalizer = weakref.finalize(self, _close_copies, [self._copies])
            return self._copies

    def close(self) -> None:
        """Remove the volumes this instance filled (copy transport; nothing to do for bind)."""
        self._finalizer()

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
        volumes: list[str] = []
        backs: list[tuple[str, Path, set]] = []
        cid = None
        stdin_dir = None
        try:
            if stdin is not None and self.transport == "copy":
                stdin_dir = Path(tempfile.mkdtemp(prefix="rlvr-stdin-"))
                (stdin_dir / "data").write_bytes(stdin)
                mounts = [*mounts, Mount(stdin_dir, STDIN_TARGET)]
            config = self._container_config(argv, mounts, cwd, env, limits, staged,
                                            stdin_open=stdin is not None and stdin_dir is None,
                                            volumes=volumes, copy_backs=backs,
                                            stdin_file=stdin_dir is not None)
            cid = self._create(config)
            piped = stdin if stdin_dir is None else None
            sock, keepalive = attach_socket(self._api, cid, stdin=piped is not None)
            try:
                result = self._run_attached(cid, sock, limits, piped)
            finally:
                sock.close()
                del keepalive
            for target, source, skip in backs:
                self.copies.copy_back(cid, target, source, skip, COPY_BACK_CAP)
            return result
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            raise SandboxUnavailable(f"docker backend: {type(exc).__name__}: {exc}") from exc
        finally:
            if cid is not None:
                self._destroy(cid)
            self._stager.release(staged)
            if volumes:
                self.copies.remove(volumes)
            if stdin_dir is not None:
                shutil.rmtree(stdin_dir, ignore_errors=True)

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
        if self.transport == "copy" and any(m.writable for m in mounts):
            raise SandboxUnavailable(
                f"docker backend ({self.docker_host}, copy transport): a server's writable mount "
                "needs a file system shared with this machine; its writes could only come back "
                "when it stops")
        staged: list[str] = []
        cid = None
        try:
            config = self._container_config(argv, mounts, cwd, env, limits, staged, stdin_open=True,
                                            supervisor=supervisor and os.geteuid() == 0)
            cid = self._create(config)
            sock, keepalive = attach_socket(self._api, cid, stdin=True)
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
        return DockerServer(cid, sock, keepalive, destroy=functools.partial(self._destroy, cid),
                            release=functools.partial(self._stager.release, staged),
                            stderr_cap=limits.output_bytes)

    def containers(self) -> list[str]:
        """Ids of containers this instance created that still exist (for leak checks)."""
        found = self._api.containers(all=True, quiet=True,
                                     filters={"label": f"{LABEL}.instance={self.instance_id}"})
        return [c["Id"] for c in found]

    # -- internals ------------------------------------------------------------------------
    def _container_config(self, argv, mounts, cwd, env, limits: Limits, staged: list[str], *,
                          stdin_open: bool, supervisor: bool = False,
                          volumes: list[str] | None = None,
                          copy_backs: list[tuple[str, Path, set]] | None = None,
                          stdin_file: bool = False) -> dict:
        """The container's create arguments. Copy transport: the volumes filled for this
        container go to `volumes` (to remove after it), the writable mounts to bring back to
        `copy_backs`; `stdin_file`: the command reads STDIN_TARGET/data as its stdin."""
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
        stager = Stager(0, 0) if supervisor else self._stager

        docker_mounts = []
        targets = set()
        ordered = sorted(mounts, key=lambda m: len(PurePosixPath(m.target).parts))
        for m in ordered:  # every mount point first: a copy takes its tree as it is then
            target = str(PurePosixPath(m.target))
            if not target.startswith("/"):
                raise ValueError(f"sandbox: mount target must be absolute, got {m.target!r}")
            source = Path(m.source).resolve()
            if not source.exists():
                raise FileNotFoundError(f"sandbox: mount source {m.source} does not exist")
            if self.transport == "copy" and not source.is_dir():
                raise ValueError(f"sandbox: the copy transport ({self.docker_host}) mounts "
                                 f"directories only; {m.source} is not one (mount its directory)")
            self._ensure_mountpoint(mounts, target, source)
        for m in ordered:
            target = str(PurePosixPath(m.target))
            source = Path(m.source).resolve()
            if self.transport == "copy":
                docker_mounts.append(self._copy_mount(m, target, source, mounts, supervisor,
                                                      uid, gid, volumes, copy_backs))
            else:
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
        if stdin_file:  # the shell only redirects; `env -i` still starts from nothing
            command = ["/bin/sh", "-c", f'exec "$@" < {STDIN_TARGET}/data', "sh", *command]
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

    def _copy_mount(self, m: Mount, target: str, source: Path, mounts, supervisor: bool,
                    uid: int, gid: int, volumes: list[str] | None,
                    copy_backs: list[tuple[str, Path, set]] | None):
        """A volume holding `source`'s tree, mounted at `target` (copy transport): shared
        and read-only, or this run's own and brought back after it when writable. Entries
        are owned by the sandbox user, or keep their host owners for the supervisor (as
        with bind, where uid 0 sees the host's own)."""
        docker = _docker()
        owner = None if supervisor else (uid, gid)
        if not m.writable:
            name = self.copies.readonly(source, owner)
            return docker.types.Mount(target, name, type="volume", read_only=True)
        if volumes is None or copy_backs is None:
            raise ValueError(f"sandbox: writable mount {target} without a run to bring it back")
        name = self.copies.writable(source, owner)
        volumes.append(name)
        others = [PurePosixPath(o.target) for o in mounts]
        nested = {other.relative_to(target) for other in others
                  if _is_under(str(other), target) and str(other) != target}
        copy_backs.append((target, source, nested))
        return docker.types.Mount(target, name, type="volume", read_only=False)

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

    def _run_attached(self, cid: str, sock: socket.socket, limits: Limits,
                      stdin: bytes | None) -> RunResult:
        out, err = CappedBuffer(limits.output_bytes), CappedBuffer(limits.output_bytes)
        demux = Demux()
        t0 = time.monotonic()
        self._api.start(cid)
        deadline = t0 + limits.wall_seconds
        if stdin is not None:
            threading.Thread(target=feed_stdin, args=(sock, stdin), daemon=True).start()
        timed_out = False
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            # a TLS socket may hold decrypted bytes select() cannot see
            pending = getattr(sock, "pending", None)
            if not (pending and pending()):
                ready, _, _ = select.select([sock], [], [], remaining)
                if not ready:
                    continue
            try:
                data = sock.recv(READ_CHUNK)
            except OSError:
                data = b""
            if not data:
                break
            for kind, payload in demux.feed(data):
                (out if kind == STREAM_STDOUT else err).add(payload)
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


def _close_copies(copies: list[VolumeCopies]) -> None:
    for c in copies:
        c.close()


def _with_task_env(mounts: Sequence[Mount], task_env: Path | None) -> list[Mount]:
    """The task's dependency layer (rlvr.sandbox.envs), read-only, where the image's
    `rlvr_taskenv.pth` looks for it: the very directory bwrap mounts, so both backends give
    tested code the same files."""
    if task_env is None:
        return list(mounts)
    if not Path(task_env).is_dir():
        raise FileNotFoundError(f"task environment does not exist: {task_env}")
    return [Mount(Path(task_env), TASKENV_TARGET), *mounts]


def _unlimited(value) -> bool:
    return value is None or value <= 0


def _is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
