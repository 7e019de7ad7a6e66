"""The real-library corpus: third-party libraries pinned in data/real/corpus.toml (SPEC §1).

Why a lock file and a fetch: the corpus is third-party code (licences kept, not ours to
commit), so the repository holds only pins — sdist URL + sha256 per library, and the wheels its
suites need — and `fetch` reproduces the exact bytes anywhere there is network, once, into a
gitignored cache:

    <cache>/sdists/<file>, <cache>/wheelhouse/<file>   as downloaded, sha256-verified
    <cache>/src/<name>-<version>/                      the unpacked sdist (licences checked)

Every file is verified against its sha256 before use; a mismatch deletes the file and is a
named error (`HashMismatch`), as is a bad lock entry (`CorpusLockError`). The wheelhouse is what
`rlvr.sandbox.envs.task_env` installs a library's declared dependencies from. The CLI is
`scripts/fetch_corpus.py`; `rlvr.authoring.synth.corpus_families` turns an unpacked library into a
seed family for bug injection.
"""
from __future__ import annotations

import os
import re
import shutil
import tarfile
import tempfile
import tomllib
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rlvr.artifacts.digest import file_sha256
from rlvr.artifacts.io import replace_dir, temp_dir_beside
from rlvr.errors import RlvrError
from rlvr.sandbox.envs import canonical_name

ROOT = Path(__file__).resolve().parents[2]

DEFAULT_LOCK = ROOT / "data" / "real" / "corpus.toml"
DEFAULT_CACHE = ROOT / "data" / "real" / ".cache"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*$")


class CorpusLockError(RlvrError):
    """corpus.toml is malformed (the message names the entry and field)."""


class HashMismatch(RlvrError):
    """A downloaded (or cached) file's sha256 is not the pinned one."""


@dataclass(frozen=True)
class Artifact:
    url: str
    sha256: str

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Library:
    name: str
    version: str
    licence: str
    licence_files: tuple[str, ...]
    tests: tuple[str, ...]
    layout: str
    dependencies: tuple[str, ...]
    sdist: Artifact


@dataclass(frozen=True)
class Wheel:
    name: str
    version: str
    licence: str
    artifact: Artifact


@dataclass(frozen=True)
class Lock:
    libraries: tuple[Library, ...]
    wheels: tuple[Wheel, ...]


def _field(entry: dict, key: str, kind, where: str):
    value = entry.get(key)
    if kind is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise CorpusLockError(f"{where}: field '{key}' must be a list of strings")
        return tuple(value)
    if not isinstance(value, str) or not value:
        raise CorpusLockError(f"{where}: field '{key}' is required (non-empty text)")
    return value


def _artifact(entry: dict, where: str) -> Artifact:
    url, sha = _field(entry, "url", str, where), _field(entry, "sha256", str, where)
    if not url.startswith("https://"):
        raise CorpusLockError(f"{where}: field 'url' must be an https URL")
    if not _SHA256.match(sha):
        raise CorpusLockError(f"{where}: field 'sha256' must be 64 lowercase hex digits")
    return Artifact(url, sha)


def load_lock(path: Path | str = DEFAULT_LOCK) -> Lock:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise CorpusLockError(f"{path}: not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise CorpusLockError(f"{path}: not valid TOML: {exc}") from None
    if data.get("format") != 1:
        raise CorpusLockError(f"{path}: field 'format' must be 1")
    libraries, wheels = [], []
    for i, entry in enumerate(data.get("library") or []):
        where = f"{path}: library[{i}]"
        name = _field(entry, "name", str, where)
        where = f"{path}: library '{name}'"
        sdist = entry.get("sdist")
        if not isinstance(sdist, dict):
            raise CorpusLockError(f"{where}: field 'sdist' must be a table {{url, sha256}}")
        layout = _field(entry, "layout", str, where)
        if layout not in ("flat", "src"):
            raise CorpusLockError(f"{where}: field 'layout' must be 'flat' or 'src'")
        deps = _field(entry, "dependencies", list, where)
        bad = [d for d in deps if not _PIN.match(d)]
        if bad:
            raise CorpusLockError(f"{where}: field 'dependencies': {bad[0]!r} is not a 'name==version' pin")
        libraries.append(Library(name, _field(entry, "version", str, where), _field(entry, "licence", str, where),
                                 _field(entry, "licence_files", list, where), _field(entry, "tests", list, where),
                                 layout, deps, _artifact(sdist, f"{where}: sdist")))
    for i, entry in enumerate(data.get("wheel") or []):
        where = f"{path}: wheel[{i}]"
        name = _field(entry, "name", str, where)
        wheels.append(Wheel(name, _field(entry, "version", str, where), _field(entry, "licence", str, where),
                            _artifact(entry, f"{path}: wheel '{name}'")))
    if not libraries:
        raise CorpusLockError(f"{path}: no [[library]] entries")
    pinned = {f"{canonical_name(w.name)}=={w.version}" for w in wheels}
    for lib in libraries:
        for dep in lib.dependencies:
            name, _, version = dep.partition("==")
            if f"{canonical_name(name)}=={version}" not in pinned:
                raise CorpusLockError(f"{path}: library '{lib.name}': dependency {dep} has no [[wheel]] entry")
    return Lock(tuple(libraries), tuple(wheels))


def _download(url: str, dest: Path) -> None:
    with urllib.request.urlopen(url, timeout=60) as resp, open(dest, "wb") as out:
        shutil.copyfileobj(resp, out)


def ensure_file(artifact: Artifact, directory: Path, *, offline: bool = False,
                download: Callable[[str, Path], None] = _download) -> Path:
    """The verified local copy of `artifact` (downloaded unless cached and intact)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / artifact.filename
    if target.is_file() and file_sha256(target) == artifact.sha256:
        return target
    if offline:
        raise RlvrError(f"{target}: not in the cache (run without --offline to download it)")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{artifact.filename}-", dir=directory)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        download(artifact.url, tmp)
        got = file_sha256(tmp)
        if got != artifact.sha256:
            raise HashMismatch(f"{artifact.filename}: sha256 {got} does not match the pinned "
                               f"{artifact.sha256} (from {artifact.url}); the file was discarded")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def unpack_sdist(lib: Library, archive: Path, src_root: Path) -> Path:
    """Unpack `archive` to src_root/<name>-<version> (fresh) and check its licence files and
    test paths exist (`fetch` gives it the tree it builds before swapping it in). tarfile's "data" filter refuses absolute paths, `..`, links out of the
    tree and device files."""
    if file_sha256(archive) != lib.sdist.sha256:
        raise HashMismatch(f"{archive}: sha256 does not match the pinned {lib.sdist.sha256}")
    dest = src_root / f"{lib.name}-{lib.version}"
    src_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=src_root))
    try:
        try:
            if archive.name.endswith(".zip"):
                with zipfile.ZipFile(archive) as zf:
                    zf.extractall(tmp)
            else:
                with tarfile.open(archive) as tf:
                    tf.extractall(tmp, filter="data")
        except (tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
            raise RlvrError(f"{archive}: cannot unpack ({type(exc).__name__}: {exc})") from None
        tops = [p for p in tmp.iterdir()]
        if len(tops) != 1 or not tops[0].is_dir():
            raise RlvrError(f"{archive}: an sdist must hold exactly one top-level directory")
        top = tops[0]
        for rel in lib.licence_files:
            if not (top / rel).is_file():
                raise CorpusLockError(f"library '{lib.name}': licence file {rel} is not in {archive.name}")
        for rel in lib.tests:
            if not (top / rel).exists():
                raise CorpusLockError(f"library '{lib.name}': test path {rel} is not in {archive.name}")
        if dest.exists():
            shutil.rmtree(dest)
        os.rename(top, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def fetch(lock: Lock, cache: Path | str = DEFAULT_CACHE, *, only: str | None = None,
          offline: bool = False, download: Callable[[str, Path], None] = _download) -> dict[str, Path]:
    """Download (or find), verify and unpack; returns {library name: unpacked source dir}."""
    cache = Path(cache)
    libraries = [lib for lib in lock.libraries if only is None or lib.name == only]
    if only is not None and not libraries:
        raise CorpusLockError(f"--only {only}: no such library (known: "
                              f"{', '.join(lib.name for lib in lock.libraries)})")
    needed = {canonical_name(d.partition("==")[0]) + "==" + d.partition("==")[2]
              for lib in libraries for d in lib.dependencies}
    for wheel in lock.wheels:
        if only is None or f"{canonical_name(wheel.name)}=={wheel.version}" in needed:
            ensure_file(wheel.artifact, cache / "wheelhouse", offline=offline, download=download)
    archives = [ensure_file(lib.sdist, cache / "sdists", offline=offline, download=download)
                for lib in libraries]
    # `src` is built whole beside itself and swapped in: a fetch killed at any point leaves
    # the previous tree (or none), never a half-unpacked one; the next fetch sweeps the rest.
    src = cache / "src"
    tmp = temp_dir_beside(src)
    try:
        if only is not None and src.is_dir():
            shutil.copytree(src, tmp, symlinks=True, dirs_exist_ok=True)
        for lib, archive in zip(libraries, archives):
            unpack_sdist(lib, archive, tmp)
        replace_dir(tmp, src)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return {lib.name: source_dir(lib, cache) for lib in libraries}


def source_dir(lib: Library, cache: Path | str = DEFAULT_CACHE) -> Path:
    """Where `fetch` unpacks `lib` (it may not be there yet)."""
    return Path(cache) / "src" / f"{lib.name}-{lib.version}"
