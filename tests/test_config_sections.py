"""An unknown top-level params.yaml section is an error naming it (ConfigError; exit 2 from a
command), and the known sections are exactly those dvc.yaml's stages declare (issue 39,
item 9)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlvr.config import SECTIONS, read_params
from rlvr.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_known_sections_are_dvc_yamls_and_params_yamls():
    from dvc.repo import Repo

    repo = Repo(str(ROOT))
    try:
        declared = {section for stage in repo.index.stages for dep in stage.params
                    for section in dep.params}
    finally:
        repo.close()
    assert declared == SECTIONS
    assert set(yaml.safe_load((ROOT / "params.yaml").read_text())) == SECTIONS
    assert set(read_params(ROOT / "params.yaml")) == SECTIONS


def test_unknown_section_is_named(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text("curate: {reference_runs: 3}\nrolout: {seed: 1}\n")
    with pytest.raises(ConfigError, match=r"params\.yaml: rolout: unknown section \(known: "):
        read_params(p)


def test_unknown_section_exits_2_with_one_line(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text((ROOT / "params.yaml").read_text() + "\nextra_section:\n  x: 1\n")
    (tmp_path / "task").mkdir()
    done = subprocess.run([sys.executable, "-m", "rlvr.cli", "tasks", "check",
                           str(tmp_path / "task"), "--params", str(p)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: {p}: extra_section: unknown section (known: {', '.join(sorted(SECTIONS))})"]
