"""Versions hash tracked sources only (a scratch file never changes a verifier version)."""
from __future__ import annotations

import subprocess

from rlvr.versioning import _tracked_in, source_digest


def _git(cwd, *args):
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True)


def test_untracked_files_do_not_change_the_digest_but_tracked_edits_do(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("A = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "pkg/a.py")
    before = source_digest(pkg.glob("*.py"))
    (pkg / "scratch.py").write_text("print('mine')\n")
    _tracked_in.cache_clear()
    assert source_digest(pkg.glob("*.py")) == before
    (pkg / "a.py").write_text("A = 2\n")
    assert source_digest(pkg.glob("*.py")) != before


def test_outside_git_every_file_counts(tmp_path):
    (tmp_path / "a.py").write_text("A = 1\n")
    before = source_digest(tmp_path.glob("*.py"))
    (tmp_path / "b.py").write_text("B = 1\n")
    _tracked_in.cache_clear()
    assert source_digest(tmp_path.glob("*.py")) != before
