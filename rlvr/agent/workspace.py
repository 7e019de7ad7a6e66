"""The policy workspace: a host temp dir holding the buggy repo, and safe access to it.

Layout of one episode's root dir (created fresh per episode, removed on close):

    root/repo/     the agent's view: `rlvr.tasks.materialize` (buggy repo + public tests, a
                   git repo whose single commit is the pristine state)
    root/public/   pristine copies of the public test trees, mounted read-only over
                   repo/<dir> inside the sandbox, so tests stay intact whatever runs there
    root/empty/    an empty dir mounted over repo/.git inside the sandbox: policy code can
                   neither read nor rewrite the history `extract_patch` diffs against

Hidden tests and the reference are never written here (materialize only writes
`task.repo_files`).

Host-side file access (`view`, `search`, `edit`) goes through `resolve`, which refuses
absolute paths, `..`, `.git`, symlinks anywhere on the path (policy code run by `run_tests`
can plant them), non-regular files and hard-linked files; reads refuse binary content.
Between tool calls no policy code runs (each sandboxed run's process tree is dead when
`run` returns), so a check followed by an `O_NOFOLLOW` open cannot be raced.
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rlvr.tasks.materialize import materialize, write_files
from rlvr.tasks.model import Task, files_hash

MAX_FILE_BYTES = 1 << 20
# Files whose edit would change how tests are collected or run rather than the code under
# test; extraction rejects them anyway, refusing early tells the agent at once.
CONFIG_NAMES = frozenset({"conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml",
                          "setup.py", "sitecustomize.py", "usercustomize.py", ".pytest.ini"})


class WorkspaceError(ValueError):
    """A refused file operation; the message is the agent's observation."""


@dataclass(frozen=True)
class ProtectedTree:
    """A top-level entry of the repo that holds public tests (a dir, or a root-level file)."""

    name: str
    is_dir: bool


class Workspace:
    def __init__(self, task: Task, root: Path):
        self.task = task
        self.root = root
        self.repo = root / "repo"
        self.public = root / "public"
        self.empty = root / "empty"
        self.protected = _protected_trees(task)

    # ---- lifecycle -----------------------------------------------------------------------
    @classmethod
    def create(cls, task: Task, parent: Path | str | None = None) -> "Workspace":
        root = Path(tempfile.mkdtemp(prefix="rlvr-ws-", dir=parent))
        ws = cls(task, root)
        try:
            materialize(task, ws.repo, git=True)
            pristine = {p: c for p, c in task.repo_files.items()
                        if PurePosixPath(p).parts[0] in {t.name for t in ws.protected}}
            ws.public.mkdir()
            write_files(ws.public, pristine)
            ws.empty.mkdir()
        except BaseException:
            ws.close()
            raise
        return ws

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def checksum(self) -> str:
        """Hash of the repo's files (`.git` excluded), same algorithm as `Task.hashes`."""
        return files_hash(self.snapshot())

    def snapshot(self) -> dict[str, str]:
        out = {}
        for rel in self.iter_files(""):
            try:
                out[rel] = self.read_text(rel)
            except WorkspaceError:
                continue
        return out

    # ---- path safety ---------------------------------------------------------------------
    def resolve(self, rel: str, *, kind: str = "any") -> Path:
        """The host path of workspace-relative `rel`; WorkspaceError if it is not allowed.
        `kind`: "file" (regular file), "dir", or "any"."""
        if "\0" in rel:
            raise WorkspaceError("path contains a NUL byte")
        posix = PurePosixPath(rel)
        if posix.is_absolute():
            raise WorkspaceError(f"{rel}: absolute paths are not allowed (paths are relative "
                                 "to the repository root)")
        parts = [p for p in posix.parts if p != "."]
        if any(p == ".." for p in parts):
            raise WorkspaceError(f"{rel}: '..' is not allowed")
        if parts and parts[0] == ".git":
            raise WorkspaceError(f"{rel}: .git is not part of the workspace")
        current = self.repo
        st = os.lstat(current)
        for i, part in enumerate(parts):
            current = current / part
            try:
                st = os.lstat(current)
            except FileNotFoundError:
                raise WorkspaceError(f"{rel}: no such file or directory") from None
            except OSError as exc:
                raise WorkspaceError(f"{rel}: {exc.strerror}") from None
            if stat.S_ISLNK(st.st_mode):
                raise WorkspaceError(f"{rel}: symbolic links are not followed")
            if i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode):
                raise WorkspaceError(f"{rel}: {'/'.join(parts[:i + 1])} is not a directory")
        if stat.S_ISDIR(st.st_mode):
            if kind == "file":
                raise WorkspaceError(f"{rel}: is a directory")
        elif stat.S_ISREG(st.st_mode):
            if kind == "dir":
                raise WorkspaceError(f"{rel}: not a directory")
            if st.st_nlink > 1:
                raise WorkspaceError(f"{rel}: hard-linked files are not allowed")
        else:
            raise WorkspaceError(f"{rel}: not a regular file or directory")
        return current

    def relative(self, path: Path) -> str:
        return path.relative_to(self.repo).as_posix()

    def is_protected(self, rel: str) -> str:
        """Why `rel` must not be edited ('' when it may be)."""
        parts = [p for p in PurePosixPath(rel).parts if p != "."]
        if not parts:
            return "the repository root is not a file"
        for tree in self.protected:
            if parts[0] == tree.name and (tree.is_dir or len(parts) == 1):
                return f"{rel}: public tests are read-only"
        if parts[-1] in CONFIG_NAMES or parts[-1].endswith(".pth"):
            return f"{rel}: test and build configuration files are read-only"
        return ""

    # ---- file operations -----------------------------------------------------------------
    def read_text(self, rel: str) -> str:
        path = self.resolve(rel, kind="file")
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise WorkspaceError(f"{rel}: not a regular file")
            if st.st_size > MAX_FILE_BYTES:
                raise WorkspaceError(f"{rel}: file too large ({st.st_size} bytes)")
            with os.fdopen(fd, "rb", closefd=False) as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
        finally:
            os.close(fd)
        if b"\0" in data:
            raise WorkspaceError(f"{rel}: binary file")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise WorkspaceError(f"{rel}: binary file (not UTF-8 text)") from None

    def write_text(self, rel: str, text: str) -> None:
        """Overwrite an existing, editable text file in place."""
        reason = self.is_protected(rel)
        if reason:
            raise WorkspaceError(reason)
        path = self.resolve(rel, kind="file")
        data = text.encode("utf-8")
        if len(data) > MAX_FILE_BYTES:
            raise WorkspaceError(f"{rel}: the edited file would be too large")
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def iter_files(self, rel: str, *, limit: int = 10_000) -> list[str]:
        """Regular files under `rel` (a dir or a file), sorted; symlinks and .git skipped."""
        start = self.resolve(rel, kind="any")
        if start.is_file():
            return [self.relative(start)]
        out: list[str] = []
        stack = [start]
        while stack and len(out) < limit:
            current = stack.pop()
            with os.scandir(current) as it:
                entries = sorted(it, key=lambda e: e.name, reverse=True)
            for entry in entries:
                if entry.is_symlink():
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if entry.name == ".git" and Path(current) == self.repo:
                        continue
                    if entry.name == "__pycache__":
                        continue
                    stack.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    out.append(self.relative(Path(entry.path)))
        return sorted(out)[:limit]


def _protected_trees(task: Task) -> tuple[ProtectedTree, ...]:
    trees: dict[str, ProtectedTree] = {}
    for path in task.public_tests:
        parts = PurePosixPath(path).parts
        trees[parts[0]] = ProtectedTree(parts[0], is_dir=len(parts) > 1)
    return tuple(trees[k] for k in sorted(trees))
