"""Build the docker sandbox image offline, from the host's own interpreter.

No image registry is reachable from our machines, so `docker pull` is not an option. Instead
the image is a root file system assembled from host files and fed to `docker import`:

* the interpreter that runs rlvr (`sys.base_prefix`: binary, libpython, stdlib, extension
  modules) relocated to `/opt/python` — the *same* CPython build as the bwrap backend, so the
  two backends give the same verdicts;
* pytest and its dependency closure (plus pytest-timeout when installed), copied from the
  environment rlvr runs in into `/opt/python/lib/python3.X/site-packages`, dist-info included so
  that entry-point plugins load exactly as on the host — the same files as bwrap's runner
  layer (rlvr.sandbox.envs), with the same `.pth` hook that adds a task's dependency layer
  when one is mounted at /opt/rlvr/taskenv/site-packages (one image for every task: the
  per-task layer is a read-only mount of the content-hashed directory bwrap also mounts);
* `/bin/sh`, a handful of coreutils and `git` (the enclave may `git apply`), with every shared
  library `ldd` reports, at their host paths (merged-/usr symlinks reproduced);
* `/etc/passwd` and `/etc/group` with the unprivileged sandbox user (uid/gid 1000).

The tag is `rlvr-sandbox:<hash>` where the hash covers every path, mode, link target and file
content that goes in, so a rebuild with unchanged inputs is a no-op (an image lookup) and any
change to the interpreter, pytest or the file list gives a new tag. Building takes seconds.

CLI: `python -m rlvr.sandbox.image build [--force]` prints the tag; `... tag` prints the tag that
a build would produce without touching the daemon.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rlvr.errors import SandboxUnavailable
from rlvr.sandbox.envs import DISTRIBUTIONS, PTH_LINE, PTH_NAME, distribution_closure

REPOSITORY = "rlvr-sandbox"
# Bumped whenever the layout below changes in a way the file hash would not notice.
FORMAT_VERSION = "3"  # 2: the task-layer .pth (rlvr.sandbox.envs); 3: LOAD_DIR
# Where the copy transport's loader mounts a fresh volume (rlvr/sandbox/docker_copy.py):
# Docker gives an empty volume the owner and mode of the image directory it is first mounted
# on, so this directory, owned by the sandbox user, makes a writable volume's root its own
LOAD_DIR = "/.rlvr-load"
PREFIX = "/opt/python"
SANDBOX_UID = 1000
SANDBOX_GID = 1000
TOOLS = (
    "sh", "dash", "bash", "env", "cat", "ls", "sleep", "true", "false", "echo", "printf",
    "mkdir", "rm", "rmdir", "cp", "mv", "ln", "touch", "chmod", "head", "tail", "wc", "id",
    "sort", "uniq", "tr", "cut", "grep", "sed", "diff", "cmp", "find", "xargs", "git",
)
# Parts of the stdlib that a verifier never needs: its own test suite, GUI toolkits, the
# build configuration, bundled wheels. Skipping them halves the image.
STDLIB_SKIP_DIRS = {
    "site-packages", "test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip",
    "lib2to3", "__phello__",
}
DYNLOAD_SKIP = re.compile(r"^(_tkinter|_test|_xxtest|xxlimited|_ctypes_test)")
PASSWD = (
    "root:x:0:0:root:/root:/usr/sbin/nologin\n"
    f"sandbox:x:{SANDBOX_UID}:{SANDBOX_GID}:rlvr sandbox:/tmp:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
)
GROUP = f"root:x:0:\nsandbox:x:{SANDBOX_GID}:\nnogroup:x:65534:\n"


@dataclass
class _Entry:
    """One member of the root file system: a regular file (from `source` or `data`), a
    directory or a symlink."""

    kind: str  # "file" | "dir" | "link"
    mode: int = 0o755
    source: str | None = None
    data: bytes | None = None
    target: str | None = None
    owner: int = 0  # uid = gid (root, or the sandbox user for LOAD_DIR)


@dataclass
class RootFS:
    """The planned contents of the image, keyed by absolute path inside it."""

    entries: dict[str, _Entry] = field(default_factory=dict)
    python: str = f"{PREFIX}/bin/python3"

    # -- planning -------------------------------------------------------------------------
    def add_dir(self, path: str, mode: int = 0o755) -> None:
        path = _norm(path)
        if path == "/":
            return
        self.add_dir(os.path.dirname(path))
        current = self.entries.get(path)
        if current is None or current.kind != "dir":
            if current is not None and current.kind == "link":
                return  # a host symlink to a directory (e.g. /lib -> usr/lib): keep it
            self.entries[path] = _Entry("dir", mode)

    def add_data(self, path: str, data: bytes, mode: int = 0o644) -> None:
        path = _norm(path)
        self.add_dir(os.path.dirname(path))
        self.entries[path] = _Entry("file", mode, data=data)

    def add_file(self, path: str, source: str, mode: int | None = None) -> None:
        path = _norm(path)
        self.add_dir(os.path.dirname(path))
        st = os.stat(source)
        self.entries[path] = _Entry("file", stat.S_IMODE(st.st_mode) if mode is None else mode,
                                    source=source)

    def add_link(self, path: str, target: str) -> None:
        path = _norm(path)
        self.add_dir(os.path.dirname(path))
        self.entries[path] = _Entry("link", 0o777, target=target)

    def add_host_path(self, host_path: str) -> None:
        """Copy a host file to the same path, reproducing every symlink met on the way (so
        `/lib64/ld-linux-x86-64.so.2` brings `/lib64 -> usr/lib64` and the link chain)."""
        seen = 0
        path = os.path.abspath(host_path)
        while True:
            seen += 1
            if seen > 40:
                raise SandboxUnavailable(f"sandbox image: symlink loop at {host_path}")
            parts = Path(path).parts
            prefix = "/"
            redirected = False
            for i, part in enumerate(parts[1:], start=1):
                candidate = os.path.join(prefix, part)
                if os.path.islink(candidate):
                    target = os.readlink(candidate)
                    self.add_link(candidate, target)
                    resolved = os.path.normpath(os.path.join(prefix, target))
                    path = os.path.join(resolved, *parts[i + 1:]) if i + 1 < len(parts) else resolved
                    redirected = True
                    break
                prefix = candidate
            if not redirected:
                break
        if os.path.isdir(path):
            self.add_dir(path)
        else:
            self.add_file(path, path)

    # -- hashing and writing -------------------------------------------------------------
    def content_hash(self) -> str:
        """sha256 over every path, kind, mode, link target and file content (sorted)."""
        h = hashlib.sha256(f"rlvr-sandbox-image {FORMAT_VERSION} {self.python}\n".encode())
        for path in sorted(self.entries):
            e = self.entries[path]
            h.update(f"{path}\0{e.kind}\0{e.mode:o}\0{e.target or ''}\0{e.owner}\0".encode())
            if e.kind == "file":
                if e.data is not None:
                    h.update(hashlib.sha256(e.data).digest())
                else:
                    with open(e.source, "rb") as f:
                        h.update(hashlib.file_digest(f, "sha256").digest())
        return h.hexdigest()

    def write_tar(self, fileobj) -> None:
        """Write the rootfs as an uncompressed tar (owned by root; mtimes of host files are
        kept so that copied `.pyc` files stay valid against their sources)."""
        now = int(time.time())
        with tarfile.open(fileobj=fileobj, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(self.entries):
                e = self.entries[path]
                info = tarfile.TarInfo(path.lstrip("/"))
                info.uid = info.gid = e.owner
                info.uname = info.gname = "root" if e.owner == 0 else "sandbox"
                info.mode = e.mode
                if e.kind == "dir":
                    info.type = tarfile.DIRTYPE
                    info.mtime = now
                    tar.addfile(info)
                elif e.kind == "link":
                    info.type = tarfile.SYMTYPE
                    info.linkname = e.target
                    info.mtime = now
                    tar.addfile(info)
                elif e.data is not None:
                    info.size = len(e.data)
                    info.mtime = now
                    tar.addfile(info, io.BytesIO(e.data))
                else:
                    st = os.stat(e.source)
                    info.size = st.st_size
                    info.mtime = int(st.st_mtime)
                    with open(e.source, "rb") as f:
                        tar.addfile(info, f)

    @property
    def size_bytes(self) -> int:
        total = 0
        for e in self.entries.values():
            if e.kind == "file":
                total += len(e.data) if e.data is not None else os.stat(e.source).st_size
        return total


def _norm(path: str) -> str:
    return os.path.normpath("/" + path.lstrip("/"))


def _ldd(paths: list[str]) -> set[str]:
    """Absolute paths of the shared libraries (and the loader) the given ELF files need."""
    libs: set[str] = set()
    for chunk in range(0, len(paths), 64):
        batch = paths[chunk:chunk + 64]
        out = subprocess.run(["ldd", *batch], capture_output=True, text=True).stdout
        for line in out.splitlines():
            line = line.strip()
            m = re.search(r"=>\s+(/\S+)", line) or re.match(r"(/\S+)\s+\(0x", line)
            if m:
                libs.add(m.group(1))
    return libs


def plan_rootfs() -> RootFS:
    """Decide what goes into the image (no file is copied yet)."""
    fs = RootFS()
    base = sys.base_prefix
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    exe = os.path.realpath(os.path.join(base, "bin", ver))
    if not os.path.isfile(exe):
        exe = os.path.realpath(sys._base_executable)  # type: ignore[attr-defined]
    stdlib = sysconfig.get_paths()["stdlib"]
    if not os.path.isdir(stdlib):
        raise SandboxUnavailable(f"sandbox image: no stdlib at {stdlib}")

    # Interpreter, relocated; CPython finds its prefix from the `lib/pythonX.Y/os.py` landmark
    # next to the binary, so no environment variable is needed.
    fs.add_file(f"{PREFIX}/bin/{ver}", exe)
    fs.add_link(f"{PREFIX}/bin/python3", ver)
    fs.add_link(f"{PREFIX}/bin/python", ver)
    elf_files = [exe]

    stdlib_dst = f"{PREFIX}/lib/{ver}"
    for root, dirs, files in os.walk(stdlib):
        rel = os.path.relpath(root, stdlib)
        dirs[:] = sorted(d for d in dirs if not (rel == "." and d in STDLIB_SKIP_DIRS)
                         and d not in {"test", "tests", "idle_test"})
        dst_root = stdlib_dst if rel == "." else f"{stdlib_dst}/{rel}"
        fs.add_dir(dst_root)
        in_pycache = os.path.basename(root) == "__pycache__"
        for name in sorted(files):
            src = os.path.join(root, name)
            if rel.startswith("config-"):
                continue
            if in_pycache and (".opt-" in name or not name.endswith(".pyc")):
                continue
            if rel == "lib-dynload" and DYNLOAD_SKIP.match(name):
                continue
            if os.path.islink(src) or not os.path.isfile(src):
                continue
            fs.add_file(f"{dst_root}/{name}", src)
            if name.endswith(".so"):
                elf_files.append(src)
    fs.add_dir(f"{stdlib_dst}/site-packages")

    # pytest & co. from the running environment, dist-info included.
    site = f"{stdlib_dst}/site-packages"
    for dist in distribution_closure(list(DISTRIBUTIONS)):
        root = Path(dist.locate_file(""))
        for f in dist.files or ():
            src = Path(dist.locate_file(f))
            try:
                rel = src.resolve().relative_to(root.resolve())
            except ValueError:
                continue  # console scripts in bin/ and anything outside site-packages
            if not src.is_file() or rel.parts[0] == "..":
                continue
            if "__pycache__" in rel.parts and ".opt-" in rel.name:
                continue
            fs.add_file(f"{site}/{rel.as_posix()}", str(src))
            if src.suffix == ".so":
                elf_files.append(str(src))
    # The task layer's hook, as in the bwrap runner layer (rlvr.sandbox.envs).
    fs.add_data(f"{site}/{PTH_NAME}", PTH_LINE.encode())

    # The merged-/usr top-level links, so `/bin/sh` and friends resolve as on the host.
    for top in ("/bin", "/sbin", "/lib", "/lib64"):
        if os.path.islink(top):
            fs.add_link(top, os.readlink(top))
    for tool in TOOLS:
        path = shutil.which(tool, path="/usr/bin:/bin")
        if path:
            fs.add_host_path(path)
            elf_files.append(os.path.realpath(path))
    # git's templates: `git init` warns without them; `git apply` needs nothing else.
    if os.path.isdir("/usr/share/git-core/templates"):
        for root, _dirs, files in os.walk("/usr/share/git-core/templates"):
            fs.add_dir(root)
            for name in files:
                fs.add_file(os.path.join(root, name), os.path.join(root, name))

    # Shared libraries at their host paths. libpython sits in the interpreter's prefix on the
    # host (found through an absolute RUNPATH that does not exist in the image), so it goes to
    # the multiarch directory the dynamic loader searches by default.
    multiarch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
    for lib in sorted(_ldd(elf_files)):
        if lib.startswith(base + os.sep):
            fs.add_file(f"/usr/lib/{multiarch}/{os.path.basename(lib)}", os.path.realpath(lib))
        else:
            fs.add_host_path(lib)

    fs.add_data("/etc/passwd", PASSWD.encode())
    fs.add_data("/etc/group", GROUP.encode())
    for d, mode in (("/tmp", 0o1777), ("/work", 0o755), ("/proc", 0o555), ("/sys", 0o555),
                    ("/dev", 0o755)):
        fs.add_dir(d, mode)
    fs.entries["/tmp"].mode = 0o1777
    fs.add_dir(LOAD_DIR, 0o755)
    fs.entries[LOAD_DIR].owner = SANDBOX_UID
    return fs


def image_tag(fs: RootFS | None = None) -> str:
    fs = fs or plan_rootfs()
    return f"{REPOSITORY}:{fs.content_hash()[:16]}"


def build_image(client, *, force: bool = False, log=None) -> str:
    """Ensure `rlvr-sandbox:<hash>` exists in the daemon behind `client`; return its tag.

    A no-op (one image lookup) when the tag is already there. Raises SandboxUnavailable with
    the reason when the image cannot be assembled or imported.
    """
    import docker.errors

    fs = plan_rootfs()
    tag = image_tag(fs)
    if not force:
        try:
            client.images.get(tag)
            return tag
        except docker.errors.ImageNotFound:
            pass
        except docker.errors.DockerException as exc:
            raise SandboxUnavailable(f"docker: cannot look up image {tag}: {exc}") from exc
    t0 = time.monotonic()
    repository, _, version = tag.partition(":")
    with tempfile.TemporaryFile(prefix="rlvr-sandbox-rootfs-") as tmp:
        fs.write_tar(tmp)
        tmp.seek(0)
        try:
            # `docker import` of a rootfs tarball: no registry is contacted.
            client.api.import_image_from_data(
                tmp,
                repository=repository,
                tag=version,
                changes=[
                    f'CMD ["{fs.python}"]',
                    "WORKDIR /",
                    f"USER {SANDBOX_UID}:{SANDBOX_GID}",
                    f"LABEL org.rlvr.sandbox.python={fs.python}",
                    f"LABEL org.rlvr.sandbox.format={FORMAT_VERSION}",
                ],
            )
            client.images.get(tag)
        except docker.errors.DockerException as exc:
            raise SandboxUnavailable(f"docker: importing the sandbox image {tag} failed: {exc}") from exc
    if log:
        log(f"built {tag} ({fs.size_bytes / 2**20:.1f} MiB of files) in {time.monotonic() - t0:.1f}s")
    return tag


def _client():
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # docker raises several unrelated types for "no daemon"
        raise SandboxUnavailable(
            f"docker: no daemon answers at {os.environ.get('DOCKER_HOST', 'the default socket')} "
            f"({exc}); start one with scripts/dockerd.sh start"
        ) from exc
    return client


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlvr.sandbox.image", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build (or find cached) rlvr-sandbox:<hash>; print the tag")
    b.add_argument("--force", action="store_true", help="re-import even if the tag exists")
    sub.add_parser("tag", help="print the tag a build would produce (no daemon needed)")
    args = parser.parse_args(argv)
    try:
        if args.command == "tag":
            print(image_tag())
        else:
            print(build_image(_client(), force=args.force, log=lambda m: print(m, file=sys.stderr)))
    except SandboxUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
