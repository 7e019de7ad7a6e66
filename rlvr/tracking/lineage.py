"""Where a stage run stands: the content hash of each artifact, the code and the DAG state.

* `dvc_md5(path)` — the md5 DVC records for `path` in `dvc.lock`: a file's md5, or for a
  directory the `<md5>.dir` of its tree, computed by DVC's own hashing (`dvc_data`), with
  the repository's `.dvcignore` applied, so a run's dataset digest can be looked up in
  `dvc.lock` / the DVC cache as is. Hashing a directory reads every file (no DVC state db:
  that sqlite belongs to the `dvc` process which may be running this very stage).
* `repo_root()` — the DVC root the stage runs in (`DVC_ROOT`, which `dvc repro` sets, or
  the nearest folder above the working directory holding `.dvc/`), else the working dir.
* `git_commit(root)`, `git_dirty(root)` — HEAD and whether tracked sources differ from it:
  untracked files do not count (a scratch file changes no result, rlvr/versioning.py), and
  neither do `dvc.lock` nor the DAG's outputs (`dvc_outs`, asked of DVC): `dvc repro`
  deletes a stage's outs before running it, git-tracked metrics among them, and rewrites
  the lock, so counting them would mark every stage run dirty.
* `file_md5(path)` — of `dvc.lock`: which recorded DAG state the run started from.
* `dvc_experiment()` — the experiment name and baseline commit `dvc exp run` passes to
  every stage command (`DVC_EXP_NAME`, `DVC_EXP_BASELINE_REV`, dvc/repo/experiments/
  queue/base.py); None outside an experiment.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

DVC_ROOT_ENV = "DVC_ROOT"
DVC_STAGE_ENV = "DVC_STAGE"              # dvc/stage/run.py: the stage's addressing name
DVC_EXP_NAME_ENV = "DVC_EXP_NAME"
DVC_EXP_BASELINE_ENV = "DVC_EXP_BASELINE_REV"


def repo_root(start: Path | None = None) -> Path:
    env = os.environ.get(DVC_ROOT_ENV)
    if env:
        return Path(env).resolve()
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / ".dvc").is_dir():
            return d
    return here


def dvc_md5(path: Path | str, root: Path | None = None) -> str:
    """DVC's md5 of a file or directory (`<md5>.dir`), as `dvc.lock` records it."""
    from dvc_data.hashfile.build import build
    from dvc_data.hashfile.db import HashFileDB
    from dvc_objects.fs import MemoryFileSystem
    from dvc_objects.fs.local import LocalFileSystem

    fs = LocalFileSystem()
    path = Path(path).resolve()
    root = (root or repo_root()).resolve()
    ignore = None
    if path.is_dir() and (root / ".dvc").is_dir() and path.is_relative_to(root):
        from dvc.ignore import DvcIgnoreFilter

        ignore = DvcIgnoreFilter(fs, str(root))
    odb = HashFileDB(MemoryFileSystem(), "/rlvr-tracking-hash")
    _, _, obj = build(odb, str(path), fs, "md5", dry_run=True, ignore=ignore)
    return obj.hash_info.value


def file_md5(path: Path | str) -> str | None:
    try:
        return hashlib.md5(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _git(root: Path, *args: str) -> str | None:
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def git_commit(root: Path | None = None) -> str:
    out = _git(root or Path.cwd(), "rev-parse", "HEAD")
    return out.strip() if out else "unknown"


def dvc_outs(root: Path) -> list[Path]:
    """Absolute paths of every out `root`'s DVC pipeline declares (outs, metrics, plots),
    by DVC's own reading of its dvc.yaml files; [] where `root` is no DVC repository."""
    if not (root / ".dvc").is_dir():
        return []
    from dvc.repo import Repo

    try:
        repo = Repo(str(root))
    except Exception:  # noqa: BLE001  (not readable as DVC: nothing excluded, dirty shows)
        return []
    try:
        return [Path(out.fs_path) for out in repo.index.outs if out.is_in_repo]
    except Exception:  # noqa: BLE001  (a broken dvc.yaml: as above)
        return []
    finally:
        repo.close()


def changed_paths(root: Path) -> list[Path] | None:
    """Absolute paths of tracked files that differ from HEAD (index or work tree; both
    sides of a rename); None without git."""
    top = _git(root, "rev-parse", "--show-toplevel")
    out = _git(root, "status", "--porcelain", "-z", "--untracked-files=no")
    if top is None or out is None:
        return None
    base = Path(top.strip())
    fields = out.split("\0")
    paths, i = [], 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if len(entry) < 4:
            continue
        paths.append(base / entry[3:])
        if entry[0] in "RC":          # -z: a rename's source follows as its own field
            if i < len(fields) and fields[i]:
                paths.append(base / fields[i])
            i += 1
    return paths


def dirty_paths(changed: list[Path], outs: list[Path], root: Path) -> list[Path]:
    """`changed` less `root`'s dvc.lock and anything at or under one of `outs`."""
    ignored = [Path(p).resolve() for p in (*outs, root / "dvc.lock")]
    return [p for p in changed
            if not any(p.resolve() == o or p.resolve().is_relative_to(o) for o in ignored)]


def git_dirty(root: Path | None = None) -> bool | None:
    """True when a tracked source differs from HEAD (index or work tree), DVC outs and
    `dvc.lock` excepted; None without git."""
    root = (root or Path.cwd()).resolve()
    changed = changed_paths(root)
    if changed is None:
        return None
    return bool(changed and dirty_paths(changed, dvc_outs(root) if changed else [], root))


def dvc_experiment() -> tuple[str, str] | None:
    """(experiment name, baseline commit) under `dvc exp run`, else None."""
    name = os.environ.get(DVC_EXP_NAME_ENV)
    return (name, os.environ.get(DVC_EXP_BASELINE_ENV, "")) if name else None
