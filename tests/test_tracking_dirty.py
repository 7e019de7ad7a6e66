"""MLflow's `git_dirty` tag means "tracked sources differ from the commit": `dvc.lock` and
the DAG's outs (asked of DVC, git-tracked metrics included) never count, since `dvc repro`
deletes a stage's outs before running it and rewrites the lock (issue 39, item 2)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rlvr.tracking.lineage import changed_paths, dirty_paths, dvc_outs, git_dirty
from rlvr.tracking.pipeline import PIPELINE_ENV

ROOT = Path(__file__).resolve().parents[1]
DVC = Path(sys.executable).with_name("dvc")
PY = sys.executable

STAGE = """\
import json, pathlib
from rlvr.tracking.stage import stage_run
with stage_run('s', sections=('a',), metrics_path='metrics/s.json') as run:
    pathlib.Path('out').mkdir(exist_ok=True)
    pathlib.Path('out/data.txt').write_text('x')
    run.log_metrics({'ok': 1})
"""


def _git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout


def _project(root: Path) -> Path:
    """A committed DVC project whose one stage has a directory out and a git-tracked
    (cache: false) metrics file, as this repository's metrics/*.json are."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "params.yaml").write_text("a: {b: 1}\n")
    (root / "s.py").write_text(STAGE)
    (root / "notes.txt").write_text("tracked, used by no stage\n")
    (root / "dvc.yaml").write_text(
        f"stages:\n  s:\n    cmd: {PY} s.py\n    deps: [s.py]\n    params: [a]\n"
        "    outs: [out]\n    metrics: [{metrics/s.json: {cache: false}}]\n")
    (root / "metrics").mkdir()
    (root / "metrics" / "s.json").write_text('{"ok": 0}\n')
    (root / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    _git(root, "init", "-q")
    subprocess.run([str(DVC), "init", "-q"], cwd=root, check=True, capture_output=True)
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "project")
    return root


def test_dvc_outs_come_from_dvc(tmp_path):
    root = _project(tmp_path)
    assert sorted(p.relative_to(root).as_posix() for p in dvc_outs(root)) == [
        "metrics/s.json", "out"]
    assert dvc_outs(tmp_path / "nowhere") == []


def test_dirty_paths_drop_outs_and_the_lock(tmp_path):
    root = tmp_path
    changed = [root / "dvc.lock", root / "metrics/s.json", root / "out/a/b.txt",
               root / "outside.txt", root / "src/x.py"]
    assert dirty_paths(changed, [root / "metrics/s.json", root / "out"], root) == [
        root / "outside.txt", root / "src/x.py"]


def test_removed_outs_and_a_rewritten_lock_are_not_dirty(tmp_path):
    root = _project(tmp_path)
    assert git_dirty(root) is False
    (root / "metrics" / "s.json").unlink()            # what dvc repro does before the cmd
    (root / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n# rewritten\n")
    assert {p.name for p in changed_paths(root)} == {"s.json", "dvc.lock"}
    assert git_dirty(root) is False
    (root / "notes.txt").write_text("edited\n")       # a tracked source: dirty
    assert git_dirty(root) is True
    _git(root, "checkout", "notes.txt")
    _git(root, "mv", "notes.txt", "renamed.txt")      # a staged rename counts too
    assert git_dirty(root) is True


def test_stage_under_dvc_repro_in_a_clean_clone_logs_git_dirty_false(tmp_path):
    """The stage's committed metrics file is deleted by DVC before the command runs."""
    from mlflow import MlflowClient

    root = _project(tmp_path / "src")
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", str(root), str(clone))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {k: v for k, v in os.environ.items() if k not in (PIPELINE_ENV, "RLVR_TRACKING")}
    env.update(PYTHONPATH=str(ROOT), MLFLOW_TRACKING_URI=uri, PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([str(DVC), "repro", "s"], cwd=clone, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    client = MlflowClient(uri)
    (run,) = [r for r in client.search_runs(
        [client.get_experiment_by_name("rlvr").experiment_id]) if r.info.run_name == "s"]
    assert run.data.tags["git_dirty"] == "false"
    # and the tree the stage left is "dirty" only in DVC's files
    assert {p.relative_to(clone).as_posix() for p in changed_paths(clone)} <= {
        "metrics/s.json", "dvc.lock"}
