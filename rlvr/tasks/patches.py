"""Patches, in one module that curation, the agent and the enclave all use (SPEC §4).

Three jobs, all host side, none of which runs code:

* producing diffs: `make_patch(before, after)` is the one diff builder (git-style unified
  diff between two file-dict states). Curation thinks in *states* (the buggy snapshot, the
  fixed one, a stub, a sibling mutant) because a state hash lets one suite run serve every
  task that reaches it; the agent diffs its workspace (`extract_patch`). Only the diff text
  ever crosses into the enclave.
* reading diffs: `changed_paths`, `require_diff` (is this text a diff at all?), `parse_patch`,
  and `apply_patch` for trusted data (reference patches, never policy output).
* the static patch policy, `check_patch(task, patch) -> PatchCheck`: what a diff may touch,
  decided before any code runs. The diff is the whole attack surface of threat (1) "tamper
  with tests / expected outputs / build config" and most of (2) "tool hijacking", so the
  rules are an allow-list in spirit:

  - the text must be a unified diff (`parse_patch` raises `PatchFormatError` otherwise; the
    empty string is the empty patch, a valid no-op);
  - no binary hunks, no symlinks (mode 120000), no mode other than 100644, no renames or
    copies;
  - every path is a plain relative path inside the repository: no absolute path, no ``..``,
    no empty or dot component, no backslash / control character / quoting;
  - nothing under a test directory (``tests/``, ``test/``, ``testing/``) and no test file
    (``test_*.py``, ``*_test.py``, ``conftest.py``) anywhere;
  - no build / config / environment file (``setup.py``, ``*.cfg``, ``*.ini``, ``*.toml``,
    ``*.pth``, ``sitecustomize.py``, ``usercustomize.py``, ``Makefile``, ``*.sh``, ...), no
    hidden file or directory, no ``__pycache__``, no compiled artefact;
  - a path that is not already in the task's source tree may only be *added* as a plain
    ``.py`` module (identifier name) inside an existing package directory (one that has an
    ``__init__.py`` in the snapshot). Modifying or deleting requires the path to exist.

  Rejections name the offending path and rule, run no code, and give reward 0.
  `extract_patch` produces the diff of an agent workspace against the pristine snapshot and
  refuses a rollout whose public tests changed.

`PATCH_POLICY_VERSION` hashes this module's source: a rollout whose diff the policy refused
records it as the version that decided its outcome (no verifier ran). The enclave's
`VERIFIER_VERSION` hashes this file too, since its verdicts start with `check_patch`.
This module never imports the enclave package: the policy side (agent, engines, teachers) uses it
without loading the verifier.
"""
from __future__ import annotations

import difflib
import hashlib
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from rlvr.errors import PatchFormatError
from rlvr.tasks.model import Task
from rlvr.versioning import source_digest

PATCH_POLICY_VERSION = "patch-policy+" + source_digest([Path(__file__)])

TEST_DIRS = frozenset({"tests", "test", "testing"})
CONFIG_NAMES = frozenset({
    "setup.py", "setup.cfg", "pyproject.toml", "tox.ini", "pytest.ini", "noxfile.py",
    "sitecustomize.py", "usercustomize.py", "conftest.py", "makefile", "gnumakefile",
    "manifest.in", "pipfile", "pipfile.lock", "poetry.lock", "requirements.txt",
})
CONFIG_SUFFIXES = (
    ".cfg", ".ini", ".toml", ".pth", ".sh", ".bash", ".zsh", ".fish", ".bat", ".cmd", ".ps1",
    ".pyc", ".pyo", ".pyd", ".so", ".dll", ".dylib", ".egg-info", ".dist-info", ".whl",
)
ALLOWED_MODE = "100644"
_IDENT_PY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\.py$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NO_EOL = "\\ No newline at end of file\n"
IGNORED_WORKSPACE_DIRS = frozenset({"__pycache__", ".pytest_cache", ".git"})


@dataclass
class PatchCheck:
    """Outcome of the static policy. `reason` names the offending path and rule."""

    ok: bool
    reason: str = ""


@dataclass
class FilePatch:
    """One file section of a unified diff, as parsed (paths without the a/ b/ prefix)."""

    old_path: str | None
    new_path: str | None
    header: list[str] = field(default_factory=list)
    hunks: int = 0
    binary: bool = False
    modes: list[str] = field(default_factory=list)
    rename_or_copy: bool = False

    @property
    def paths(self) -> list[str]:
        return [p for p in (self.old_path, self.new_path) if p is not None]


def _strip_prefix(raw: str, prefix: str) -> str | None:
    raw = raw.split("\t", 1)[0].rstrip("\n").rstrip("\r")
    if raw == "/dev/null":
        return None
    if raw.startswith('"'):
        # git quotes names with unusual bytes; we never accept those.
        return raw
    return raw[len(prefix):] if raw.startswith(prefix) else raw


def parse_patch(text: str) -> list[FilePatch]:
    """Parse a unified (optionally git-extended) diff. Empty text → []. Raises
    `PatchFormatError` for anything else that is not a well-formed unified diff."""
    if not isinstance(text, str):
        raise PatchFormatError(f"patch must be text, got {type(text).__name__}")
    if not text.strip():
        return []
    lines = text.splitlines(keepends=True)
    files: list[FilePatch] = []
    cur: FilePatch | None = None
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        body = line.rstrip("\n")
        if body.startswith("diff --git "):
            m = re.match(r"^diff --git (\S+) (\S+)$", body)
            if not m:
                raise PatchFormatError(f"line {i + 1}: unparseable 'diff --git' header")
            cur = FilePatch(_strip_prefix(m.group(1), "a/"), _strip_prefix(m.group(2), "b/"))
            cur.header.append(body)
            files.append(cur)
            i += 1
            continue
        if body.startswith("GIT binary patch") or (body.startswith("Binary files ") and body.endswith(" differ")):
            if cur is None:
                cur = FilePatch(None, None)
                files.append(cur)
            cur.binary = True
            i += 1
            # Skip the base85 payload up to the next file section.
            while i < n and not lines[i].startswith("diff --git "):
                i += 1
            continue
        if cur is not None and not cur.hunks and re.match(
            r"^(old mode|new mode|deleted file mode|new file mode|similarity index|dissimilarity index|"
            r"rename from|rename to|copy from|copy to|index) ", body
        ):
            cur.header.append(body)
            word = body.split(" ")
            if body.startswith(("old mode", "new mode", "deleted file mode", "new file mode")):
                cur.modes.append(word[-1])
            if body.startswith(("rename ", "copy ", "similarity", "dissimilarity")):
                cur.rename_or_copy = True
            i += 1
            continue
        if body.startswith("--- "):
            if i + 1 >= n or not lines[i + 1].startswith("+++ "):
                raise PatchFormatError(f"line {i + 1}: '---' header without a following '+++' header")
            old = _strip_prefix(body[4:], "a/")
            new = _strip_prefix(lines[i + 1].rstrip("\n")[4:], "b/")
            if cur is None or cur.hunks or (cur.header and "diff --git" not in cur.header[0]) or not cur.header:
                cur = FilePatch(old, new)
                files.append(cur)
            else:
                # Trust the ---/+++ names over the diff --git line when both exist.
                cur.old_path, cur.new_path = old, new
            i += 2
            while i < n and lines[i].startswith("@@"):
                m = _HUNK.match(lines[i])
                if not m:
                    raise PatchFormatError(f"line {i + 1}: malformed hunk header {lines[i].rstrip()!r}")
                old_len = int(m.group(2)) if m.group(2) is not None else 1
                new_len = int(m.group(4)) if m.group(4) is not None else 1
                i += 1
                seen_old = seen_new = 0
                while i < n and (seen_old < old_len or seen_new < new_len):
                    tag = lines[i][:1]
                    if tag == " ":
                        seen_old += 1
                        seen_new += 1
                    elif tag == "-":
                        seen_old += 1
                    elif tag == "+":
                        seen_new += 1
                    elif tag == "\\":
                        pass
                    elif lines[i] in ("\n", "\r\n"):
                        # Some tools strip the single space of an empty context line.
                        seen_old += 1
                        seen_new += 1
                    else:
                        raise PatchFormatError(
                            f"line {i + 1}: hunk body line does not start with ' ', '+', '-' or '\\'"
                        )
                    i += 1
                if seen_old != old_len or seen_new != new_len:
                    raise PatchFormatError(
                        f"line {i}: hunk line counts do not match its header (-{old_len} +{new_len})"
                    )
                while i < n and lines[i].startswith("\\"):
                    i += 1
                cur.hunks += 1
            if cur.hunks == 0 and not cur.binary:
                raise PatchFormatError(f"line {i}: file header without any hunk")
            continue
        if body.strip() == "":
            i += 1
            continue
        if cur is None:
            raise PatchFormatError(f"line {i + 1}: not a unified diff (no 'diff --git' or '---' header first)")
        raise PatchFormatError(f"line {i + 1}: unexpected line outside a hunk: {body[:60]!r}")
    if not files:
        raise PatchFormatError("no file sections found: not a unified diff")
    for fp in files:
        if fp.hunks == 0 and not fp.binary and not fp.modes and not fp.rename_or_copy:
            raise PatchFormatError(f"{fp.new_path or fp.old_path}: file section without hunks")
    return files


def _path_rule(path: str) -> str | None:
    """Why `path` may never be touched by a patch (None when it is a plain source path)."""
    if not path:
        return "empty path"
    if path.startswith('"'):
        return "quoted (non-plain) file name"
    if "\\" in path or any(ord(c) < 32 or ord(c) == 127 for c in path):
        return "backslash or control character in path"
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        return "absolute path"
    parts = path.split("/")
    if any(p in ("", ".") for p in parts):
        return "empty or '.' path component"
    if ".." in parts:
        return "path escapes the repository ('..')"
    lowered = [p.lower() for p in parts]
    if any(p in TEST_DIRS for p in lowered[:-1]):
        return "inside a test directory"
    name = lowered[-1]
    if name == "conftest.py" or (name.startswith("test_") and name.endswith(".py")) or name.endswith("_test.py"):
        return "test file"
    if any(p.startswith(".") for p in parts):
        return "hidden file or directory"
    if "__pycache__" in lowered:
        return "__pycache__"
    if name in CONFIG_NAMES or name.startswith(".env"):
        return "build/config/environment file"
    if name.endswith(CONFIG_SUFFIXES):
        return "build/config/environment or compiled file"
    return None


def check_patch(task: Task, patch: str) -> PatchCheck:
    """Apply the static policy to `patch` against `task`'s source tree (runs no code)."""
    try:
        files = parse_patch(patch)
    except PatchFormatError as exc:
        return PatchCheck(False, f"not a unified diff: {exc}")
    source = task.source_files
    public = set(task.public_tests)
    packages = {str(PurePosixPath(p).parent) for p in source if PurePosixPath(p).name == "__init__.py"}
    touched: set[str] = set()
    for fp in files:
        label = fp.new_path or fp.old_path or "<unknown>"
        if fp.binary:
            return PatchCheck(False, f"{label}: binary patch")
        if fp.rename_or_copy:
            return PatchCheck(False, f"{label}: renames and copies are not allowed")
        for mode in fp.modes:
            if mode == "120000":
                return PatchCheck(False, f"{label}: symlink (mode 120000)")
            if mode != ALLOWED_MODE:
                return PatchCheck(False, f"{label}: file mode {mode} (only {ALLOWED_MODE} allowed)")
        if not fp.paths:
            return PatchCheck(False, "file section without a path")
        if fp.old_path is not None and fp.new_path is not None and fp.old_path != fp.new_path:
            return PatchCheck(False, f"{fp.old_path} -> {fp.new_path}: renames are not allowed")
        for path in fp.paths:
            rule = _path_rule(path)
            if rule:
                return PatchCheck(False, f"{path}: {rule}")
            if path in public:
                return PatchCheck(False, f"{path}: public test file")
        path = fp.new_path or fp.old_path
        assert path is not None
        if path in touched:
            return PatchCheck(False, f"{path}: patched twice in one diff")
        touched.add(path)
        if fp.old_path is None:  # a new file
            if path in source:
                return PatchCheck(False, f"{path}: created but already exists")
            parent = str(PurePosixPath(path).parent)
            if not _IDENT_PY.match(PurePosixPath(path).name):
                return PatchCheck(False, f"{path}: a new file must be a plain .py module")
            if parent not in packages:
                return PatchCheck(False, f"{path}: a new module must be inside an existing package directory")
        elif fp.old_path not in source:
            return PatchCheck(False, f"{fp.old_path}: not in the task's source tree")
    return PatchCheck(True, "")


# ---- producing and reading diffs ---------------------------------------------------------
def make_patch(before: dict[str, str], after: dict[str, str]) -> str:
    """Git-style unified diff (`a/`, `b/`) turning state `before` into `after`; '' if equal."""
    chunks: list[str] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        header = [f"diff --git a/{path} b/{path}\n"]
        if old is None:
            header.append(f"new file mode {ALLOWED_MODE}\n")
        elif new is None:
            header.append(f"deleted file mode {ALLOWED_MODE}\n")
        lines = difflib.unified_diff(
            _lines(old or ""), _lines(new or ""),
            fromfile=f"a/{path}" if old is not None else "/dev/null",
            tofile=f"b/{path}" if new is not None else "/dev/null",
            n=3,
        )
        chunks.append("".join(header) + "".join(lines))
    return "".join(chunks)


def _lines(text: str) -> list[str]:
    """Split keeping ends; a last line without newline gets git's no-EOL marker."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] = lines[-1] + "\n" + _NO_EOL
    return lines


def changed_paths(patch: str) -> list[str]:
    """Paths a unified diff touches (new side; old side for deletions)."""
    paths = []
    for line in patch.splitlines():
        if line.startswith("+++ ") or line.startswith("--- "):
            name = line[4:].split("\t")[0].strip()
            if name == "/dev/null":
                continue
            name = name[2:] if name[:2] in ("a/", "b/") else name
            if name not in paths:
                paths.append(name)
    return paths


def require_diff(text: str, where: str) -> None:
    """PatchFormatError unless `text` is empty or is a diff: a `diff --git` file section (a
    binary-only or mode-only section has no hunk) or `---/+++` headers with an `@@` hunk.

    This only tells a diff from other text (prose, a file's contents) so that a command fed
    the wrong file fails with exit 2; whether a diff is well formed and allowed is the
    policy's call (`check_patch`), which answers with a verdict, not an error.
    """
    if not text.strip():
        return
    lines = text.splitlines()
    if any(line.startswith("diff --git ") for line in lines):
        return
    if not any(_HUNK.match(line) for line in lines) or not changed_paths(text):
        raise PatchFormatError(f"{where}: not a unified diff (no 'diff --git' header, nor "
                               "'---/+++' headers and '@@' hunks)")


def apply_patch(files: dict[str, str], patch: str, where: str = "patch") -> dict[str, str]:
    """The state `files` + `patch`, computed with `git apply` in a scratch dir (trusted data
    only: task authors' reference patches, never policy output)."""
    if not patch.strip():
        return dict(files)
    require_diff(patch, where)
    with tempfile.TemporaryDirectory(prefix="rlvr-apply-") as tmp:
        root = Path(tmp)
        for path, content in files.items():
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
        proc = subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], cwd=root,
                              input=patch.encode(), capture_output=True)
        if proc.returncode != 0:
            raise PatchFormatError(
                f"{where}: does not apply: {proc.stderr.decode(errors='replace').strip()}")
        return {str(p.relative_to(root)): p.read_text()
                for p in sorted(root.rglob("*")) if p.is_file()}


# ---- the agent workspace's diff ----------------------------------------------------------
def _sha(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def extract_patch(workspace: Path, task: Task) -> tuple[str, PatchCheck]:
    """The diff of an agent workspace against `task.repo_files` (source tree only), checked.

    Public tests must be byte-identical to the snapshot (else the rollout is discarded);
    `__pycache__`, `.pytest_cache` and `.git` directories are ignored (running the public
    tests creates them). A symlink or non-UTF-8 file in the workspace yields a rejection,
    not a silent skip: the diff that reaches the enclave must describe the workspace.
    """
    workspace = Path(workspace)
    public = set(task.public_tests)
    for path in sorted(public):
        full = workspace / path
        if full.is_symlink() or not full.is_file():
            return "", PatchCheck(False, f"{path}: public test file missing or replaced")
        try:
            data = full.read_bytes()
        except OSError as exc:
            return "", PatchCheck(False, f"{path}: public test unreadable ({exc.strerror})")
        if _sha(data) != _sha(task.repo_files[path]):
            return "", PatchCheck(False, f"{path}: public tests' checksum changed")
    current: dict[str, str] = {}
    for root, dirs, files in os.walk(workspace, followlinks=False):
        rel_root = Path(root).relative_to(workspace)
        for d in list(dirs):
            full = Path(root) / d
            if d in IGNORED_WORKSPACE_DIRS and not full.is_symlink():
                dirs.remove(d)
            elif full.is_symlink():
                dirs.remove(d)
                return "", PatchCheck(False, f"{(rel_root / d).as_posix()}: symlink (mode 120000)")
        for name in files:
            rel = (rel_root / name).as_posix()
            full = Path(root) / name
            if name.endswith((".pyc", ".pyo")) and rel_root.name == "__pycache__":
                continue
            if full.is_symlink():
                return "", PatchCheck(False, f"{rel}: symlink (mode 120000)")
            if rel in public:
                continue
            if not full.is_file():
                return "", PatchCheck(False, f"{rel}: not a regular file")
            if os.stat(full).st_mode & 0o111 and rel in task.source_files:
                # An executable bit would need mode 100755 in the diff.
                return "", PatchCheck(False, f"{rel}: file mode 100755 (only {ALLOWED_MODE} allowed)")
            try:
                current[rel] = full.read_bytes().decode("utf-8")
            except UnicodeDecodeError:
                return "", PatchCheck(False, f"{rel}: binary patch (file is not UTF-8 text)")
    patch = make_patch(task.source_files, current)
    return patch, check_patch(task, patch)
