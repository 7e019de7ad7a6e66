"""The `rlvr` command as a shell user meets it: complete help, quiet closed pipes, a directory
named as such, and no Great Expectations import for a file that already passed its contract
(start time: BENCHMARKS.md "CLI start time")."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rlvr.cli as cli
from rlvr.artifacts import contracts, schemas
from rlvr.artifacts.io import read_table
from rlvr.errors import ArtifactError
from rlvr.authoring.authored import load_task_dir
from rlvr.tasks.pool import list_tasks, load_tasks, save_tasks
from taskkit import BUGGY_CORE, write_task

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def record_dir(tmp_path, monkeypatch) -> Path:
    where = tmp_path / "validated"
    monkeypatch.setenv(contracts.VALIDATED_ENV, str(where))
    return where


@pytest.fixture
def pool(tmp_path, record_dir) -> Path:
    one = load_task_dir(write_task(tmp_path / "src"))
    two = load_task_dir(write_task(tmp_path / "src", "mini-2",
                                      buggy=BUGGY_CORE + "# another copy\n"))
    path = tmp_path / "tasks.parquet"
    save_tasks(path, [one.with_(split="train"), two.with_(split="regression")])
    return path


def _rlvr(*args: str, env: dict | None = None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rlvr.cli", *args], cwd=REPO,
                            env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}, **kw)


def test_help_shows_every_form_and_complete_sentences(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for line in cli.__doc__.strip().splitlines():   # the whole docstring, not its first line
        assert line.rstrip() in out
    for form in ("rlvr tasks list --tasks FILE", "rlvr verify --tasks FILE",
                 "rlvr gate rollback"):
        assert form in out
    assert "these exact forms:\n\n    rlvr tasks list" in out


def test_closed_pipe_ends_quietly(pool):
    proc = _rlvr("tasks", "list", "--tasks", str(pool), stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE)
    proc.stdout.close()            # the reader is gone before the first line is written
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141, err
    assert err == b""              # no BrokenPipeError traceback


def test_list_prints_one_line_per_task(pool, capsys):
    cli.main(["tasks", "list", "--tasks", str(pool)])
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split("\t")[:3] for ln in lines] == [["mini-2", "mini", "regression"],
                                                   ["mini-clamp", "mini", "train"]]
    assert [r["task_id"] for r in list_tasks(pool)] == [t.task_id for t in load_tasks(pool)]


@pytest.mark.parametrize("argv", [
    ["tasks", "list", "--tasks", "{d}"],
    ["tasks", "show", "x", "--tasks", "{d}"],
    ["tasks", "export-swebench", "--tasks", "{pool}", "--out", "{d}"],
    ["verify", "--tasks", "{pool}", "--task-id", "x", "--patch", "{d}"],
])
def test_directory_where_a_file_is_expected_is_named(argv, tmp_path, pool, capsys):
    d = tmp_path / "adir"
    d.mkdir()
    with pytest.raises(SystemExit) as exc:
        cli.main([a.format(d=d, pool=pool) for a in argv])
    assert exc.value.code == 2
    assert capsys.readouterr().err == f"error: {d}: is a directory, expected a file\n"


def test_reader_names_a_directory(tmp_path):
    with pytest.raises(ArtifactError, match="is a directory, expected a Parquet file"):
        read_table(tmp_path, schemas.TASKS, contract="tasks")
    with pytest.raises(ArtifactError, match="artifact not found"):
        read_table(tmp_path / "absent.parquet", schemas.TASKS, contract="tasks")


def test_written_file_is_read_without_importing_great_expectations(pool, record_dir):
    code = ("import sys; from rlvr.tasks.pool import list_tasks; "
            f"n = len(list_tasks({str(pool)!r})); "
            "print(n, 'great_expectations' in sys.modules, 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, text=True,
                         capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1",
                                                   contracts.VALIDATED_ENV: str(record_dir)})
    assert out.stdout.split() == ["2", "False", "False"]


def test_changed_bytes_are_validated_again(pool):
    table = pq.read_table(pool)
    assert contracts.validated_before("tasks", pool, schemas.TASKS)
    dup = pa.concat_tables([table, table.slice(0, 1)])   # a duplicate task id
    pq.write_table(dup, pool)
    assert not contracts.validated_before("tasks", pool, schemas.TASKS)
    with pytest.raises(ArtifactError, match="breaks the 'tasks' data contract"):
        load_tasks(pool)
    assert not contracts.validated_before("tasks", pool, schemas.TASKS)  # failures: no record


def test_record_off_validates_every_time(pool, monkeypatch):
    monkeypatch.setenv(contracts.VALIDATED_ENV, "off")
    assert not contracts.validated_before("tasks", pool, schemas.TASKS)
    assert len(load_tasks(pool)) == 2


def test_record_is_per_schema(pool):
    other = pa.schema([f for f in schemas.TASKS if f.name != "checks"])
    assert contracts.validated_before("tasks", pool, schemas.TASKS)
    assert not contracts.validated_before("tasks", pool, other)


def test_record_follows_the_suite(pool, monkeypatch):
    assert contracts.validated_before("tasks", pool, schemas.TASKS)
    stricter = contracts._SUITES["tasks"] + (contracts.in_set("family", ["other"]),)
    monkeypatch.setitem(contracts._SUITES, "tasks", stricter)
    assert not contracts.validated_before("tasks", pool, schemas.TASKS)


def test_cli_start_imports_no_task_machinery():
    # Keeping `rlvr --help` fast: the author tools (`tasks check`, `tasks rejections`) import
    # the enclave, sandbox and curation only when they run.
    code = ("import sys, rlvr.cli as c; c.build_parser(); "
            "print(sorted(m for m in ('rlvr.authoring.check', 'rlvr.authoring.curation', "
            "'rlvr.enclave', 'rlvr.sandbox', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, text=True,
                         capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.stdout.strip() == "[]"


def test_show_patch_prints_the_reference_fix(pool, capsys):
    task = {t.task_id: t for t in load_tasks(pool)}["mini-clamp"]
    cli.main(["tasks", "show", "mini-clamp", "--tasks", str(pool), "--patch"])
    out = capsys.readouterr().out
    assert out == task.reference_patch and out.startswith(("diff --git", "--- "))
    cli.main(["tasks", "show", "mini-clamp", "--tasks", str(pool)])
    assert '"task_id": "mini-clamp"' in capsys.readouterr().out
