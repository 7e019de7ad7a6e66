"""Versions of code that decide results hash *tracked* sources only.

A version string (the verifier's, the patch policy's) is recorded in artifacts and decides
whether DVC considers them stale. Hashing whatever `*.py` lies in a folder made a scratch
file in one checkout change every verdict's version, so a fresh clone disagreed with the
`dvc.lock` written there. In a git checkout only files git tracks count; an installed
package (no git) has no scratch files, so there every file counts.
"""
from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path
from typing import Iterable


@functools.lru_cache(maxsize=None)
def _tracked_in(directory: Path) -> frozenset[Path] | None:
    """Files git tracks directly in `directory`, or None when it is not in a git checkout."""
    try:
        out = subprocess.run(["git", "-C", str(directory), "ls-files", "-z", "--", "."],
                             capture_output=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return frozenset((directory / name).resolve() for name in out.decode().split("\0") if name)


def tracked(paths: Iterable[Path]) -> list[Path]:
    """`paths` less those an enclosing git checkout does not track, in sorted order."""
    keep = []
    for path in paths:
        path = Path(path).resolve()
        known = _tracked_in(path.parent)
        if known is None or path in known:
            keep.append(path)
    return sorted(keep)


def source_digest(paths: Iterable[Path], length: int = 12) -> str:
    """sha256 over (name, bytes) of the tracked `paths`."""
    h = hashlib.sha256()
    for path in tracked(paths):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:length]
