"""Unified diffs between file-dict states, and applying them on the trusted side.

Curation thinks in *states* (whole file dicts: the buggy snapshot, the fixed one, a stub, a
sibling mutant) because a state hash lets one suite run serve every task that reaches the
same state. The enclave only ever receives the diff text.
"""
from __future__ import annotations

import difflib
import re
import subprocess
import tempfile
from pathlib import Path

from rlvr.errors import PatchFormatError

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")
_NO_EOL = "\\ No newline at end of file\n"


def make_patch(before: dict[str, str], after: dict[str, str]) -> str:
    """Git-style unified diff (`a/`, `b/`) turning state `before` into `after`; '' if equal."""
    chunks: list[str] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        header = [f"diff --git a/{path} b/{path}\n"]
        if old is None:
            header.append("new file mode 100644\n")
        elif new is None:
            header.append("deleted file mode 100644\n")
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
    """PatchFormatError unless `text` is empty or looks like a unified diff with a hunk."""
    if not text.strip():
        return
    if not any(_HUNK.match(line) for line in text.splitlines()) or not changed_paths(text):
        raise PatchFormatError(f"{where}: not a unified diff (no '---/+++' headers and '@@' hunks)")


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
