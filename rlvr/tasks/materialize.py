"""The agent's view of a task: the buggy repo with public tests only, as a git repository.

Hidden tests and the reference never leave the task record on this path; a fresh commit
lets the agent (and `extract_patch`) diff against the pristine state.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from rlvr.errors import RlvrError
from rlvr.tasks.model import Task

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "rlvr", "GIT_AUTHOR_EMAIL": "rlvr@localhost",
    "GIT_COMMITTER_NAME": "rlvr", "GIT_COMMITTER_EMAIL": "rlvr@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
}


def write_files(root: Path, files: dict[str, str]) -> None:
    for rel, content in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)


def materialize(task: Task, out_dir: Path | str, *, git: bool = True) -> Path:
    """Write the buggy repo (public tests included) to `out_dir` (must be new or empty)."""
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise RlvrError(f"{out}: output directory exists and is not empty")
    out.mkdir(parents=True, exist_ok=True)
    write_files(out, task.repo_files)
    if git:
        env = {**os.environ, **_GIT_ENV}
        for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"],
                    ["git", "commit", "-q", "-m", f"{task.task_id}: buggy state"]):
            subprocess.run(cmd, cwd=out, env=env, check=True, capture_output=True)
    return out
