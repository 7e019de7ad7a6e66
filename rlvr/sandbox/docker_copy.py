"""Mounts for a Docker daemon on another host: copied in as volumes, written back after a run.

A remote daemon cannot bind this machine's paths, so each mount's tree travels as a tar
archive into a Docker volume, and the container mounts the volume where the bind would
have been, read-only unless the mount is writable:

* A volume is filled through a loader container that is created, never started, with the
  volume mounted writable (`put_archive`; Docker refuses archives into a read-only mount or
  a read-only root file system, which the sandbox's own container has). The archive's
  entries are owned by the sandbox user (as the bind backend's idmapped mounts present
  them), or keep the host's owners for the enclave's supervisor (uid 0, as with bind).
* Read-only trees (the enclave's code, a task's dependency layer, tools) are copied once
  per sandbox instance and content signature and reused by later containers; writable ones
  get a fresh volume per run.
* After a run, a writable mount's tree comes back (`get_archive`) and replaces the host
  directory's contents, except where a nested mount sat (the host keeps its own files
  there). The archive is the sandbox's output, i.e. untrusted: it is extracted with
  tarfile's `data` filter (no absolute paths, no `..`, no links leaving the tree, no device
  files, no set-uid bits) into a temporary directory, and capped in size.

What this cannot give: writes that reach the host while a process still runs. A server
(`serve`) with a writable mount needs a shared file system and is refused here; the
executor's warm test server then declines and the cold path runs.
"""
from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
import tempfile
import threading
from pathlib import Path, PurePosixPath
from typing import Iterable, Iterator

from rlvr.errors import SandboxUnavailable
from rlvr.sandbox.image import LOAD_DIR

VOLUME_LABEL = "org.rlvr.sandbox.volume"


class CopyBackError(SandboxUnavailable):
    """A writable mount's tree could not come back from the container (too large, or an
    entry the data filter refuses)."""


def tree_signature(source: Path, owner: tuple[int, int] | None) -> str:
    """A digest of a tree's layout (paths, modes, sizes, mtimes, link targets) and of the
    ownership its copy will carry: equal signatures, interchangeable copies."""
    h = hashlib.sha256(repr(owner).encode())
    for root, dirs, files in os.walk(source):
        dirs.sort()
        for name in sorted(files) + dirs:
            path = Path(root) / name
            st = path.lstat()
            rel = path.relative_to(source).as_posix()
            link = os.readlink(path) if path.is_symlink() else ""
            h.update(f"{rel}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\0{link}\n".encode())
    return h.hexdigest()


def tar_tree(source: Path, owner: tuple[int, int] | None) -> tempfile.SpooledTemporaryFile:
    """`source`'s tree as a tar archive rooted at "." (entries owned by `owner`, or by
    their host owners when None), spooled to disk past 64 MiB."""
    out = tempfile.SpooledTemporaryFile(max_size=64 << 20)

    def own(info: tarfile.TarInfo) -> tarfile.TarInfo:
        if owner is not None:
            info.uid, info.gid = owner
            info.uname = info.gname = ""
        return info

    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(str(source), arcname=".", recursive=True, filter=own)
    out.seek(0)
    return out


class _Chunks(io.RawIOBase):
    """A file over the byte chunks `get_archive` yields (tarfile's stream mode reads it)."""

    def __init__(self, chunks: Iterable[bytes]):
        self._it: Iterator[bytes] = iter(chunks)
        self._buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not self._buf:
            try:
                self._buf = next(self._it)
            except StopIteration:
                return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def extract_untrusted(chunks: Iterable[bytes], dest: Path, cap_bytes: int) -> Path:
    """Extract a container's archive of one directory into `dest` under the `data` filter,
    refusing it past `cap_bytes` of file data; returns the extracted top directory."""
    total = 0
    top = None
    with tarfile.open(fileobj=io.BufferedReader(_Chunks(chunks)), mode="r|") as tar:
        for member in tar:
            total += max(member.size, 0)
            if total > cap_bytes:
                raise CopyBackError(f"the writable mount's tree exceeds {cap_bytes} bytes")
            first = PurePosixPath(member.name).parts[:1]
            if top is None and first:
                top = first[0]
            try:
                tar.extract(member, dest, filter="data")
            except tarfile.FilterError as exc:
                raise CopyBackError(f"refused entry in the writable mount: {exc}") from exc
    if top is None:
        raise CopyBackError("the container returned an empty archive for a writable mount")
    return dest / top


def mirror(src: Path, dst: Path, skip: set[PurePosixPath], rel: PurePosixPath = PurePosixPath("."),
           owner: tuple[int, int] | None = None) -> None:
    """Make directory `dst` hold what `src` holds, moving entries out of `src`; paths in
    `skip` (relative to the top) are left as `dst` has them. `owner`: the host ownership
    every moved entry gets (the bind backend's idmap gives the source owner's)."""
    names = {p.name for p in src.iterdir()}
    for old in list(dst.iterdir()):
        if old.name not in names and (rel / old.name) not in skip:
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old)
            else:
                old.unlink()
    for entry in sorted(src.iterdir()):
        sub = rel / entry.name
        if sub in skip:
            continue
        target = dst / entry.name
        if any(s.is_relative_to(sub) for s in skip) and entry.is_dir() and not entry.is_symlink():
            if not target.is_dir() or target.is_symlink():
                if target.exists() or target.is_symlink():
                    target.unlink()
                target.mkdir()
            mirror(entry, target, skip, sub, owner)
            continue
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
        os.replace(entry, target)
        if owner is not None:
            _chown_tree(target, owner)


def _chown_tree(path: Path, owner: tuple[int, int]) -> None:
    os.lchown(path, *owner)
    if path.is_dir() and not path.is_symlink():
        for root, dirs, files in os.walk(path):
            for name in dirs + files:
                os.lchown(Path(root) / name, *owner)


class VolumeCopies:
    """The volumes one DockerSandbox instance fills (see the module docstring)."""

    def __init__(self, api, image: str, instance_id: str, label: str):
        self._api = api
        self._image = image
        self._labels = {label: "1", f"{label}.instance": instance_id, VOLUME_LABEL: "1"}
        self._instance = instance_id
        self._readonly: dict[str, str] = {}  # signature -> volume
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}

    def _fill(self, source: Path, owner: tuple[int, int] | None) -> str:
        name = self._api.create_volume(labels=dict(self._labels))["Name"]
        loader = self._api.create_container(
            image=self._image, command=["loader"], labels=dict(self._labels),
            network_disabled=True,
            host_config=self._api.create_host_config(
                network_mode="none", read_only=True,
                mounts=[{"Type": "volume", "Source": name, "Target": LOAD_DIR,
                         "ReadOnly": False}]))["Id"]
        try:
            with tar_tree(source, owner) as archive:
                if not self._api.put_archive(loader, LOAD_DIR, archive):
                    raise SandboxUnavailable(f"docker refused the archive of {source}")
        except BaseException:
            self._api.remove_container(loader, force=True)
            self.remove([name])
            raise
        self._api.remove_container(loader, force=True)
        return name

    def readonly(self, source: Path, owner: tuple[int, int] | None) -> str:
        """A volume holding `source`'s tree, shared by this instance's containers."""
        key = tree_signature(source, owner)
        with self._lock:
            if key in self._readonly:
                return self._readonly[key]
            lock = self._key_locks.setdefault(key, threading.Lock())
        with lock:
            with self._lock:
                if key in self._readonly:
                    return self._readonly[key]
            name = self._fill(source, owner)
            with self._lock:
                self._readonly[key] = name
            return name

    def writable(self, source: Path, owner: tuple[int, int] | None) -> str:
        """A fresh volume holding `source`'s tree, for one run (remove it after)."""
        return self._fill(source, owner)

    def copy_back(self, cid: str, target: str, source: Path, skip: set[PurePosixPath],
                  cap_bytes: int) -> None:
        """Replace `source`'s contents with what the finished container `cid` holds at
        `target`, but for `skip` (nested mounts, relative to `target`)."""
        st = source.stat()
        owner = (st.st_uid, st.st_gid) if os.geteuid() == 0 else None
        chunks, _ = self._api.get_archive(cid, target)
        with tempfile.TemporaryDirectory(prefix=".rlvr-copyback-", dir=source.parent) as tmp:
            top = extract_untrusted(chunks, Path(tmp), cap_bytes)
            mirror(top, source, skip, owner=owner)

    def remove(self, names: Iterable[str]) -> None:
        for name in names:
            try:
                self._api.remove_volume(name, force=True)
            except Exception:  # noqa: BLE001 - gone already, or the daemon with it
                pass

    def close(self) -> None:
        with self._lock:
            names, self._readonly = list(self._readonly.values()), {}
        self.remove(names)
