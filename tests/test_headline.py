"""Headline metrics (issue 39 item 5): the DVC metrics files hold a few numbers per stage,
the rest lives in the stages' details files, so `dvc exp show` (as the README prints it),
`dvc metrics show/diff` and `rlvr metrics` fit a terminal."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from rlvr.tracking.headline import DETAILS_DIR, HEADLINES, headline, lookup
from rlvr.tracking.stage import stage_run

ROOT = Path(__file__).resolve().parents[1]
DVC = Path(sys.executable).with_name("dvc")


def _readme_exp_show() -> list[str]:
    """The `dvc exp show` command the README prints, as argv for dvc."""
    text = (ROOT / "README.md").read_text()
    found = re.search(r"^\.venv/bin/dvc (exp show [^\n#]*)", text, re.M)
    assert found, "README: no `.venv/bin/dvc exp show ...` line"
    return shlex.split(found.group(1))


def test_headline_selects_renames_and_leaves_out_what_is_absent():
    full = {"accepted": 8, "rejected": 0, "by_split": {"train": 5}}
    assert headline("curate", full) == {"curated": 8}
    assert headline("evaluate", {"init": {"heldout_function": {"pass_at_1": 0.25}}}) == {"init_p1": 0.25}
    assert headline("grpo", {"final": {"train/reward": 0.5}}) == {"reward": 0.5}
    assert headline("no_such_stage", full) == {}
    assert lookup({"a": {"b": 1}}, "a.c") is None


def test_headline_names_are_unique_short_and_kept_by_the_readme_command():
    names = [name for spec in HEADLINES.values() for name, _ in spec]
    assert len(names) == len(set(names))
    assert all(not re.search(r"[./]", n) for n in names)  # what `--drop '.*[./]'` keeps
    assert "--drop" in _readme_exp_show()


def test_every_metrics_stage_of_the_dag_has_a_headline_entry_and_a_details_out():
    from rlvr.orchestrate.dag import load_dag

    dag = load_dag(ROOT)
    with_metrics = {name for name, stage in dag.items() if stage.metrics}
    assert with_metrics == set(HEADLINES)
    text = (ROOT / "dvc.yaml").read_text()
    for name in with_metrics:
        assert f"--details {DETAILS_DIR}/{name}.json" in text
        assert f"- {DETAILS_DIR}/{name}.json:" in text


def test_stage_run_writes_details_and_the_headline(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_TRACKING", "off")
    monkeypatch.delenv("DVC_STAGE", raising=False)
    with stage_run("verify", metrics_path=tmp_path / "m.json",
                   details_path=tmp_path / "d/verify.json") as run:
        run.log_metrics({"success_rate": 0.25, "reasons": {"timeout": 2}})
    assert json.loads((tmp_path / "m.json").read_text()) == {"verified": 0.25}
    assert json.loads((tmp_path / "d/verify.json").read_text()) == {
        "success_rate": 0.25, "reasons": {"timeout": 2}}
    with stage_run("verify", metrics_path=tmp_path / "all.json") as run:  # a library caller
        run.log_metrics({"success_rate": 0.5})
    assert json.loads((tmp_path / "all.json").read_text()) == {"success_rate": 0.5}


def test_the_committed_headlines_are_the_committed_details_reduced():
    """What `make pipeline` committed: each metrics file is its details file's headline,
    and every headline path exists in the details (a renamed metric fails here)."""
    for stage, spec in HEADLINES.items():
        details = json.loads((ROOT / DETAILS_DIR / f"{stage}.json").read_text())
        committed = json.loads((ROOT / "metrics" / f"{stage}.json").read_text())
        assert committed == headline(stage, details), stage
        for name, dotted in spec:
            assert lookup(details, dotted) is not None, (stage, name, dotted)


def test_dvc_shows_the_headlines_only_and_exp_show_fits_200_columns():
    from rlvr.tracking.metrics_view import metric_rows

    keys = {r.key for r in metric_rows(ROOT)}   # DVC's metrics, through DVC's API
    assert keys == {name for spec in HEADLINES.values() for name, _ in spec}
    done = subprocess.run([str(DVC), *_readme_exp_show(), "--no-pager"], cwd=ROOT,
                          env={**os.environ, "COLUMNS": "200"}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines and max(len(line) for line in lines) <= 200
    assert "…" not in done.stdout
    header = next(line for line in lines if "Experiment" in line)
    for spec in HEADLINES.values():
        for name, _ in spec:
            assert name in header, name
