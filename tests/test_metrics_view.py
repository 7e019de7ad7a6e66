"""`rlvr metrics`: DVC's metrics through DVC's API, one per line, beside another revision."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rlvr.errors import RlvrError
from rlvr.tracking.metrics_view import flatten, metric_rows, render

DVC_YAML = """stages:
  a:
    cmd: echo
    metrics:
      - m/a.json:
          cache: false
  b:
    cmd: echo
    metrics:
      - m/b.json:
          cache: false
"""


def _git(root, *args):
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture()
def repo(tmp_path):
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@t")
    _git(tmp_path, "config", "user.name", "t")
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "dvc.yaml").write_text(DVC_YAML)
    (tmp_path / "m").mkdir()
    (tmp_path / "m/a.json").write_text(json.dumps({"acc": {"train": 0.5, "heldout": 0.25},
                                                   "decision": "block"}))
    (tmp_path / "m/b.json").write_text(json.dumps({"steps": 10}))
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "one")
    (tmp_path / "m/a.json").write_text(json.dumps({"acc": {"train": 0.75, "heldout": 0.25},
                                                   "decision": "promote"}))
    return tmp_path


def test_flatten_dots_nested_keys():
    assert flatten({"a": {"b": 1, "c": {"d": "x"}}, "e": 2}) == {"a.b": 1, "a.c.d": "x", "e": 2}


def test_rows_are_long_and_filterable(repo):
    rows = metric_rows(repo)
    assert [(r.file, r.key, r.value) for r in rows] == [
        ("m/a.json", "acc.train", 0.75), ("m/a.json", "acc.heldout", 0.25),
        ("m/a.json", "decision", "promote"), ("m/b.json", "steps", 10)]
    assert [r.key for r in metric_rows(repo, patterns=["acc.*"])] == ["acc.train", "acc.heldout"]
    assert [r.key for r in metric_rows(repo, patterns=["m/b.json:*"])] == ["steps"]
    text = render(rows)
    assert max(len(line) for line in text.splitlines()) < 80
    assert text.splitlines()[0] == "m/a.json" and "promote" in text


def test_against_a_revision_shows_changes(repo):
    rows = metric_rows(repo, rev="HEAD")
    text = render(rows, rev="HEAD", changed_only=True)
    assert "acc.train" in text and "+0.25" in text
    assert "decision" in text and "changed" in text
    assert "acc.heldout" not in text and "steps" not in text   # unchanged: left out


def test_unknown_revision_is_a_named_error(repo):
    with pytest.raises(RlvrError, match="--rev nosuch"):
        metric_rows(repo, rev="nosuch")


def test_unreadable_metrics_file_is_shown_not_fatal(repo):
    (repo / "m/b.json").write_text("{not json")
    rows = metric_rows(repo)
    assert any(r.file == "m/b.json" and r.key == "<unreadable>" for r in rows)


def test_cli_prints_the_long_table_and_names_a_miss(repo, capsys):
    from rlvr import cli

    cli.main(["metrics", "--root", str(repo), "acc.*", "--rev", "HEAD", "--changed"])
    out = capsys.readouterr().out
    assert "acc.train" in out and "+0.25" in out and "acc.heldout" not in out
    with pytest.raises(SystemExit) as exc:
        cli.main(["metrics", "--root", str(repo), "nothing.*"])
    assert exc.value.code == 2 and "nothing matches" in capsys.readouterr().err


def test_details_are_read_from_the_workspace_and_a_revision(repo, capsys):
    from rlvr import cli

    (repo / "reports/stages").mkdir(parents=True)
    (repo / "reports/stages/a.json").write_text(json.dumps({"cost": {"seconds": 10.0}}))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "two")
    (repo / "reports/stages/a.json").write_text(json.dumps({"cost": {"seconds": 12.5}}))
    rows = metric_rows(repo, rev="HEAD", details=True)
    assert [(r.file, r.key, r.value, r.other) for r in rows] == [
        ("reports/stages/a.json", "cost.seconds", 12.5, 10.0)]
    cli.main(["metrics", "--root", str(repo), "--details"])
    assert "cost.seconds" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        cli.main(["metrics", "--root", str(repo), "--details", "--rev", "nosuch"])
    assert exc.value.code == 2 and "reports/stages at nosuch" in capsys.readouterr().err
