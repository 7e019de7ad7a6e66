"""Python environments for sandboxed code: the runner layer and a per-task dependency layer.

Why. Tested code used to see the whole pipeline venv on bwrap (torch, numpy, a newer copy of
the very library a task is about) and only pytest on docker, so the same task could pass on
one backend and fail on the other, and a suite could import the wrong copy of its own
library. Now tested code sees exactly two layers on both backends:

* the **runner layer**: pytest and its dependency closure (`DISTRIBUTIONS`; the docker
  image, rlvr.sandbox.image, carries the same), copied file by file from the environment
  rlvr runs in — the enclave runner depends on that exact pytest. On bwrap it is a
  venv-shaped directory (pyvenv.cfg, `bin/python3` -> the host's base interpreter,
  `lib/pythonX.Y/site-packages`) mounted at `/opt/rlvr/venv`; on docker it is the image's
  own site-packages (the same files).
* the **task layer**: the task's (or family's) declared dependencies, pinned `name==version`,
  installed *offline* from a wheelhouse (`pip install --no-index --find-links WHEELHOUSE
  --target ...`) into a directory keyed by the content hash of the pins and the wheels used;
  both backends mount that same directory read-only at `/opt/rlvr/taskenv/site-packages`. A
  `.pth` line in the runner layer adds it with `site.addsitedir` (so its own `.pth` files
  work) when it is mounted, and does nothing otherwise.

Tasks without declared dependencies get the runner layer only. A task may not pin a
distribution of the runner layer to another version (its pytest would not be the one the
runner was written against): that is a ConfigError naming the pin.

Caches live under `RLVR_ENV_CACHE` (default ~/.cache/rlvr/envs); the wheelhouse is
`RLVR_WHEELHOUSE` (default: the checkout's data/real/.cache/wheelhouse, which
scripts/fetch_corpus.py fills, when present; else ~/.cache/rlvr/wheelhouse).
Builds are atomic (a temp dir renamed into place), so concurrent builders agree.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Iterable

from rlvr.errors import ConfigError, SandboxUnavailable

RUNNER_TARGET = "/opt/rlvr/venv"
TASKENV_TARGET = "/opt/rlvr/taskenv/site-packages"
PTH_NAME = "rlvr_taskenv.pth"
# One line, run by site.py at start-up (a .pth line starting with "import" is executed).
PTH_LINE = (f"import os, site; os.path.isdir({TASKENV_TARGET!r}) and "
            f"site.addsitedir({TASKENV_TARGET!r})\n")
FORMAT_VERSION = "1"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")
# The runner layer's distributions (in the docker image and bwrap's runner venv alike):
# pytest's dependency closure is added automatically.
DISTRIBUTIONS = ("pytest", "pytest-timeout")
_LOCK = threading.Lock()
_RUNNER_MEMO: dict[str, Path] = {}


def cache_root() -> Path:
    return Path(os.environ.get("RLVR_ENV_CACHE") or Path.home() / ".cache" / "rlvr" / "envs")


# The wheels scripts/fetch_corpus.py fetched for the real-library corpus (data/real/corpus.toml):
# the pipeline's default wheelhouse when this is a checkout that has them.
CORPUS_WHEELHOUSE = Path(__file__).resolve().parents[2] / "data" / "real" / ".cache" / "wheelhouse"


def wheelhouse_dir() -> Path:
    """$RLVR_WHEELHOUSE, else the checkout's corpus wheelhouse when fetched, else
    ~/.cache/rlvr/wheelhouse."""
    if os.environ.get("RLVR_WHEELHOUSE"):
        return Path(os.environ["RLVR_WHEELHOUSE"])
    if CORPUS_WHEELHOUSE.is_dir():
        return CORPUS_WHEELHOUSE
    return Path.home() / ".cache" / "rlvr" / "wheelhouse"


def canonical_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_dependencies(value, where: str) -> tuple[str, ...]:
    """A `dependencies` field: a list of exact pins `name==version`, returned canonical and
    sorted (so equal sets hash equally). Anything else is a ConfigError naming `where`."""
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: field 'dependencies' must be a list of 'name==version' pins")
    pins: dict[str, str] = {}
    for raw in value:
        m = _PIN.match(raw.strip())
        if not m:
            raise ConfigError(f"{where}: field 'dependencies': {raw!r} is not an exact pin "
                              "'name==version' (environments are built offline from pinned wheels)")
        name = canonical_name(m.group(1))
        if name in pins and pins[name] != m.group(2):
            raise ConfigError(f"{where}: field 'dependencies': {name} is pinned twice")
        pins[name] = m.group(2)
    runner = runner_versions()
    for name, version in pins.items():
        if name in runner and runner[name] != version:
            raise ConfigError(f"{where}: field 'dependencies': {name}=={version} clashes with the "
                              f"enclave runner's own {name}=={runner[name]} (drop the pin)")
    return tuple(f"{n}=={v}" for n, v in sorted(pins.items()) if n not in runner)


# ---- the runner layer -------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def runner_distributions():
    return distribution_closure(list(DISTRIBUTIONS))


def distribution_closure(names) -> list[md.Distribution]:
    """`names` and everything they require (markers evaluated for this interpreter, no
    extras), as installed in the environment rlvr runs in."""
    from packaging.requirements import Requirement

    seen: dict[str, md.Distribution] = {}
    todo = list(names)
    required = set(names[:1])
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            if name in required:
                raise SandboxUnavailable(
                    f"sandbox image: {name} is not installed in {sys.prefix}; it must be, "
                    "since the image copies it from there"
                ) from None
            continue
        seen[key] = dist
        for req in dist.requires or ():
            r = Requirement(req)
            if r.marker is None or r.marker.evaluate({"extra": ""}):
                todo.append(r.name)
                required.add(r.name)
    return list(seen.values())


def runner_versions() -> dict[str, str]:
    return {canonical_name(d.metadata["Name"]): d.version for d in runner_distributions()}


def _runner_files() -> list[tuple[str, Path]]:
    """(site-packages-relative path, host file) of every runner-layer file: exactly what
    image.plan_rootfs copies into the docker image."""
    out = []
    for dist in runner_distributions():
        root = Path(dist.locate_file("")).resolve()
        for f in dist.files or ():
            src = Path(dist.locate_file(f))
            try:
                rel = src.resolve().relative_to(root)
            except ValueError:
                continue
            if not src.is_file() or rel.parts[0] == ".." or (
                    "__pycache__" in rel.parts and ".opt-" in rel.name):
                continue
            out.append((rel.as_posix(), src))
    return sorted(out)


def base_interpreter() -> Path:
    """The real CPython binary under sys.base_prefix (what a venv's bin/python points to)."""
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    exe = Path(os.path.realpath(os.path.join(sys.base_prefix, "bin", ver)))
    if not exe.is_file():
        exe = Path(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
    return exe


def runner_env(root: Path | None = None) -> Path:
    """The runner layer as a venv-shaped directory (built once, keyed by content hash)."""
    root = Path(root or cache_root())
    with _LOCK:
        memo = _RUNNER_MEMO.get(str(root))
    if memo is not None and memo.is_dir():
        return memo
    files = _runner_files()
    exe = base_interpreter()
    h = hashlib.sha256(f"rlvr-runner-env {FORMAT_VERSION} {exe} {sys.version}\n{PTH_LINE}".encode())
    for rel, src in files:
        with open(src, "rb") as fh:
            h.update(rel.encode() + b"\0" + hashlib.file_digest(fh, "sha256").digest())
    key = h.hexdigest()[:16]
    target = root / f"runner-{key}"
    if not target.is_dir():
        ver = f"python{sys.version_info.major}.{sys.version_info.minor}"

        def build(tmp: Path) -> None:
            site = tmp / "lib" / ver / "site-packages"
            site.mkdir(parents=True)
            for rel, src in files:
                dst = site / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
            (site / PTH_NAME).write_text(PTH_LINE)
            (tmp / "bin").mkdir()
            for name in (ver, "python3", "python"):
                os.symlink(str(exe), tmp / "bin" / name)
            (tmp / "pyvenv.cfg").write_text(
                f"home = {exe.parent}\ninclude-system-site-packages = false\n"
                f"version = {sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}\n")

        _build_atomically(target, build)
    with _LOCK:
        _RUNNER_MEMO[str(root)] = target
    return target


# ---- the task layer ---------------------------------------------------------------------------
def wheels_for(pins: Iterable[str], wheelhouse: Path) -> list[Path]:
    """The wheelhouse files pip may pick for these pins: every wheel / sdist whose name
    matches a pinned distribution (the hash covers them all: adding a wheel for a pin
    changes the key, adding an unrelated one does not)."""
    names = {canonical_name(p.split("==")[0]) for p in pins}
    out = []
    if wheelhouse.is_dir():
        for path in sorted(wheelhouse.iterdir()):
            stem = path.name.split("-")[0]
            if path.is_file() and canonical_name(stem) in names:
                out.append(path)
    return out


def task_env(pins: Iterable[str], *, wheelhouse: Path | None = None,
             root: Path | None = None) -> Path | None:
    """The task layer for `pins` (None when there are none), built offline on first use.

    Raises SandboxUnavailable (with pip's complaint) when the wheelhouse cannot satisfy the
    pins: an environment is never built from the network."""
    pins = tuple(sorted(pins))
    if not pins:
        return None
    wheelhouse = Path(wheelhouse or wheelhouse_dir())
    root = Path(root or cache_root())
    h = hashlib.sha256(f"rlvr-task-env {FORMAT_VERSION} {sys.version}\n".encode())
    h.update(json.dumps(pins).encode())
    for path in wheels_for(pins, wheelhouse):
        with open(path, "rb") as fh:
            h.update(path.name.encode() + b"\0" + hashlib.file_digest(fh, "sha256").digest())
    target = root / f"task-{h.hexdigest()[:16]}"
    if target.is_dir():
        return target

    def build(tmp: Path) -> None:
        cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(wheelhouse),
               "--target", str(tmp), "--no-compile", "--disable-pip-version-check", "--no-input",
               "--no-warn-script-location", *pins]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise SandboxUnavailable(
                f"task environment {', '.join(pins)}: pip could not install it offline from "
                f"{wheelhouse}: {(proc.stderr or proc.stdout).strip()[-600:]}")
        shutil.rmtree(tmp / "bin", ignore_errors=True)  # console scripts: host paths inside
        (tmp / "rlvr-env.json").write_text(json.dumps({"pins": list(pins)}) + "\n")

    _build_atomically(target, build)
    return target


def _build_atomically(target: Path, build) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(tmp)
        _world_readable(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _world_readable(path: Path) -> None:
    """The sandbox runs as an unprivileged uid: it must read (never write) the layer."""
    os.chmod(path, 0o755)
    for base, dirs, files in os.walk(path):
        for d in dirs:
            p = os.path.join(base, d)
            if not os.path.islink(p):
                os.chmod(p, 0o755)
        for f in files:
            p = os.path.join(base, f)
            if not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode & 0o755 | 0o444)


__all__ = ["PTH_LINE", "RUNNER_TARGET", "TASKENV_TARGET", "parse_dependencies", "runner_env",
           "task_env", "wheelhouse_dir"]
