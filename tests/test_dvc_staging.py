"""`dvc.lock` and the git-tracked metrics / plots it names are staged together or not at all
(issue 39, item 4): the project turns DVC's `autostage` off, since autostage `git add`s the
lock but never a `cache: false` out."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from test_tracking_dirty import DVC, ROOT, _git, _project


def test_project_config_turns_autostage_off():
    from dvc.repo import Repo

    repo = Repo(str(ROOT))
    try:
        assert repo.config["core"]["autostage"] is False
    finally:
        repo.close()


def test_dvc_repro_leaves_lock_and_metrics_staged_alike(tmp_path):
    root = _project(tmp_path)
    shutil.copy(ROOT / ".dvc" / "config", root / ".dvc" / "config")
    _git(root, "commit", "-qam", "the project's DVC config")
    env = {**os.environ, "RLVR_TRACKING": "off", "PYTHONPATH": str(ROOT),
           "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([str(DVC), "repro", "s"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    unstaged = set(_git(root, "diff", "--name-only").split())
    staged = set(_git(root, "diff", "--cached", "--name-only").split())
    assert {"dvc.lock", "metrics/s.json"} <= unstaged
    assert not staged & {"dvc.lock", "metrics/s.json"}
