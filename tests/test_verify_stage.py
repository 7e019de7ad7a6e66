"""Stage `verify`: patches Parquet -> verdicts Parquet, with the reference/empty self-check."""
from __future__ import annotations

import json

import pytest

from rlvr.artifacts import schemas
from rlvr.artifacts.io import read_table, write_table
from rlvr.tasks.authored import load_task_dir
from rlvr.tasks.curation import CurationParams, curate
from rlvr.tasks.pool import save_tasks
from stages import verify
from taskkit import BUGGY_CORE, FIXED_CORE, write_task

EXTRA = "\n\ndef triple(x):\n    return 3 * x\n"

PARAMS = "sandbox:\n  workers: 1\nverify:\n  seed: 5\n  consensus_runs: 2\n"


@pytest.fixture(scope="module")
def pools(tmp_path_factory):
    """Two task files (the stage reads several pools) with one curated task each."""
    from rlvr.enclave import Enclave

    root = tmp_path_factory.mktemp("pools")
    tasks = [load_task_dir(write_task(root / "src", "a")),
             load_task_dir(write_task(root / "src", "b", family="mini2", buggy=BUGGY_CORE + EXTRA,
                                      fixed=FIXED_CORE + EXTRA))]
    with Enclave(workers=1) as enclave:
        result = curate(tasks, enclave, CurationParams(reference_runs=2, max_mutants=0))
    assert len(result.accepted) == 2, result.rejections
    paths = []
    for task in result.accepted:
        path = root / f"{task.task_id}.parquet"
        save_tasks(path, [task])
        paths.append(path)
    return root, result.accepted, paths


def _patches(path, rows):
    write_table(path, rows, schemas.PATCHES, contract="patches")


def test_verdicts_over_several_pools_and_selfcheck(pools, tmp_path):
    root, tasks, paths = pools
    (tmp_path / "params.yaml").write_text(PARAMS)
    rows = []
    for t in tasks:
        rows += [{"task_id": t.task_id, "candidate_id": f"{t.task_id}:ref", "origin": "reference",
                  "patch": t.reference_patch},
                 {"task_id": t.task_id, "candidate_id": f"{t.task_id}:empty", "origin": "empty",
                  "patch": ""}]
    _patches(tmp_path / "p.parquet", rows)
    out, metrics = tmp_path / "v.parquet", tmp_path / "m.json"
    verify.main(["--params", str(tmp_path / "params.yaml"), "--selfcheck",
                 "--tasks", str(paths[0]), "--tasks", str(paths[1]),
                 "--patches", str(tmp_path / "p.parquet"), "--out", str(out),
                 "--metrics", str(metrics)])
    got = {r["candidate_id"]: (r["success"], r["reason"])
           for r in read_table(out, schemas.VERDICTS, contract="verdicts").to_pylist()}
    assert got == {"a:ref": (True, "none"), "a:empty": (False, "tests_failed"),
                   "b:ref": (True, "none"), "b:empty": (False, "tests_failed")}
    summary = json.loads(metrics.read_text())
    assert summary["by_origin"]["reference"]["success_rate"] == 1.0
    assert summary["runs_total"] == 2 * 2 + 2  # consensus only for the first-time passes


def test_selfcheck_failure_stops_the_stage_and_keeps_old_output(pools, tmp_path, capsys):
    root, tasks, paths = pools
    (tmp_path / "params.yaml").write_text(PARAMS)
    t = tasks[0]
    # Labelled "reference" but it is the empty patch: the verifier must disagree.
    _patches(tmp_path / "p.parquet", [{"task_id": t.task_id, "candidate_id": "x",
                                       "origin": "reference", "patch": ""}])
    out = tmp_path / "v.parquet"
    out.write_bytes(b"previous verdicts")
    with pytest.raises(SystemExit) as exc:
        verify.main(["--params", str(tmp_path / "params.yaml"), "--selfcheck",
                     "--tasks", str(paths[0]), "--patches", str(tmp_path / "p.parquet"),
                     "--out", str(out), "--metrics", str(tmp_path / "m.json")])
    assert exc.value.code == 2
    assert "reference patch got success=False" in capsys.readouterr().err
    assert out.read_bytes() == b"previous verdicts"


def test_patch_for_unknown_task_is_named(pools, tmp_path, capsys):
    root, tasks, paths = pools
    (tmp_path / "params.yaml").write_text(PARAMS)
    _patches(tmp_path / "p.parquet", [{"task_id": "ghost", "candidate_id": "g",
                                       "origin": "rollout:1", "patch": ""}])
    with pytest.raises(SystemExit):
        verify.main(["--params", str(tmp_path / "params.yaml"), "--tasks", str(paths[0]),
                     "--patches", str(tmp_path / "p.parquet"), "--out",
                     str(tmp_path / "v.parquet"), "--metrics", str(tmp_path / "m.json")])
    err = capsys.readouterr().err
    assert "'ghost'" in err and "candidate g" in err


def test_infra_errors_are_counted_apart_and_leave_the_denominator():
    from rlvr.enclave.batch import summarize_verdicts

    def v(cid, success, reason, origin="rollout:x"):
        return {"task_id": "t", "candidate_id": cid, "origin": origin, "success": success,
                "reason": reason, "runs": 1, "wall_seconds": 0.5}

    rows = [v("a", True, "none"), v("b", False, "tests_failed"), v("c", False, "infra_error"),
            v("d", False, "infra_error"), v("e", True, "none", origin="reference")]
    m = summarize_verdicts(rows)
    assert m["verdicts"] == 5 and m["infra_errors"] == 2
    assert m["success_rate"] == pytest.approx(2 / 5)
    assert m["success_rate_excluding_infra"] == pytest.approx(2 / 3)
    assert m["by_origin"]["rollout"] == {"n": 4, "success_rate": 0.25, "infra_errors": 2,
                                         "success_rate_excluding_infra": 0.5}
    assert m["reasons"] == {"infra_error": 2, "none": 2, "tests_failed": 1}
    assert summarize_verdicts([])["success_rate_excluding_infra"] == 0.0
