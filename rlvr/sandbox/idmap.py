"""Idmapped bind mounts for the docker backend (root only): show a mount source to the
sandbox user as its own without touching the host's files.

Why. Callers hand the sandbox directories such as `tempfile.mkdtemp()` results (mode 0700,
owned by root), yet the sandbox user must read (and, for writable mounts, write) them. bwrap's
user namespace gives this for free; a container does not. So when rlvr runs as root, each
mount whose owner is not the sandbox user is presented through an *idmapped mount*
(Linux >= 5.12: `open_tree` + `mount_setattr` with `MOUNT_ATTR_IDMAP`): the source's owner
appears inside as the sandbox user, files the sandbox creates land on the host owned by that
same owner, and nothing on the host is chmod-ed or chown-ed. `Stager` makes and releases
them; a process that died without releasing its mounts is cleaned up by the next one.
"""
from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat
import subprocess
import tempfile
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import Sequence

from rlvr.errors import SandboxUnavailable

# Staged mounts live under a directory named STAGING_PREFIX<pid>-...: the pid tells a dead
# process's leftovers from a live one's.
STAGING_PREFIX = "rlvr-docker-mounts-"

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
                    raise OSError(errno.EPERM, "unshare --user failed: "
                                  f"{helper.stderr.read().decode()[:200]}")
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


class Stager:
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
        self._finalizer = weakref.finalize(self, Stager._release_all, self._state, self._lock)

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
        wanted = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else 0)
        other_ok = st.st_mode & wanted
        if readonly and other_ok == wanted:
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
