"""Bad input gives one named error and exit status 2, and never touches existing artifacts."""
from __future__ import annotations

import shutil

import pytest

from rlvr.cli import main
from rlvr.authoring.authored import load_task_dir
from rlvr.tasks.pool import save_tasks
from taskkit import write_task


def _fails(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    return err


@pytest.fixture
def pool(tmp_path):
    """A tasks file written before the bad command, to check it is left untouched."""
    task = load_task_dir(write_task(tmp_path / "src"))
    path = tmp_path / "tasks.parquet"
    save_tasks(path, [task.with_(split="train")])
    return path


def test_missing_task_yaml_is_named(tmp_path, pool, capsys):
    task_dir = write_task(tmp_path / "bad")
    (task_dir / "task.yaml").unlink()
    before = pool.read_bytes()
    err = _fails(["curate", "--source", str(tmp_path / "bad"), "--out", str(pool)], capsys)
    assert "task.yaml" in err and "mini-clamp" in err
    assert pool.read_bytes() == before


def test_missing_reference_is_named(tmp_path, pool, capsys):
    task_dir = write_task(tmp_path / "bad")
    (task_dir / "reference.patch").unlink()
    before = pool.read_bytes()
    err = _fails(["curate", "--source", str(tmp_path / "bad"), "--out", str(pool)], capsys)
    assert "reference.patch" in err and "missing" in err
    assert pool.read_bytes() == before


def test_missing_field_is_named(tmp_path, capsys):
    task_dir = write_task(tmp_path / "bad")
    (task_dir / "task.yaml").write_text("instruction: fix it\n")
    err = _fails(["curate", "--source", str(tmp_path / "bad"), "--out",
                  str(tmp_path / "o.parquet")], capsys)
    assert "'family'" in err
    assert not (tmp_path / "o.parquet").exists()


def test_reference_that_is_not_a_diff_is_named(tmp_path, capsys):
    task_dir = write_task(tmp_path / "bad")
    (task_dir / "reference.patch").write_text("please fix clamp\n")
    err = _fails(["curate", "--source", str(tmp_path / "bad"), "--out",
                  str(tmp_path / "o.parquet")], capsys)
    assert "reference.patch" in err and "not a unified diff" in err


def test_patch_that_is_not_a_diff(tmp_path, pool, capsys):
    patch = tmp_path / "p.diff"
    patch.write_text("just some words\n")
    err = _fails(["verify", "--tasks", str(pool), "--task-id", "mini-clamp",
                  "--patch", str(patch)], capsys)
    assert "p.diff" in err and "not a unified diff" in err


def test_unknown_task_id(tmp_path, pool, capsys):
    patch = tmp_path / "p.diff"
    patch.write_text("")
    err = _fails(["tasks", "show", "nope", "--tasks", str(pool)], capsys)
    assert "'nope'" in err and str(pool) in err
    err = _fails(["verify", "--tasks", str(pool), "--task-id", "nope", "--patch",
                  str(patch)], capsys)
    assert "'nope'" in err


def test_corrupt_parquet(tmp_path, capsys):
    bad = tmp_path / "tasks.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    err = _fails(["tasks", "list", "--tasks", str(bad)], capsys)
    assert "tasks.parquet" in err and "Parquet" in err


def test_parquet_missing_columns(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    bad = tmp_path / "tasks.parquet"
    pq.write_table(pa.table({"task_id": ["x"]}), bad)
    err = _fails(["tasks", "list", "--tasks", str(bad)], capsys)
    assert "missing column" in err


def test_materialize_refuses_non_empty_dir(tmp_path, pool, capsys):
    out = tmp_path / "ws"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    err = _fails(["tasks", "materialize", "mini-clamp", "--tasks", str(pool), "--out",
                  str(out)], capsys)
    assert "not empty" in err
    assert (out / "keep.txt").read_text() == "mine"


def test_failed_curation_keeps_previous_artifact(tmp_path, pool, capsys):
    """A source that breaks half-way (second task malformed) writes nothing."""
    src = tmp_path / "src2"
    write_task(src, "a")
    shutil.copytree(src / "a", src / "b")
    (src / "b" / "hidden_tests" / "test_hidden.py").unlink()
    before = pool.read_bytes()
    err = _fails(["curate", "--source", str(src), "--out", str(pool)], capsys)
    assert "hidden_tests" in err
    assert pool.read_bytes() == before
