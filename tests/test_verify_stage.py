"""Stage `verify`: patches Parquet -> verdicts Parquet, with the reference/empty self-check."""
from __future__ import annotations

import json

import pytest

from rlvr.artifacts import schemas
from rlvr.artifacts.io import read_table, write_table
from rlvr.authoring.authored import load_task_dir
from rlvr.authoring.curation import CurationParams, curate
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


def test_verdicts_are_written_back_into_the_passports(pools, tmp_path, capsys, monkeypatch):
    from agentkit import tiny_policy_dir
    from rlvr.agent.passport import needs_verdict, read_trajectories, write_trajectories
    from rlvr.agent.rollout import RolloutParams, TeacherParams, patch_rows, roll_out
    from rlvr.sandbox.params import SandboxParams
    from rlvr.teachers.acting import open_engine

    monkeypatch.setenv("RLVR_TRACKING", "off")
    root, tasks, paths = pools
    (tmp_path / "params.yaml").write_text(PARAMS)
    params = RolloutParams(engine="scripted", model_dir=str(tiny_policy_dir()), split="",
                           group_size=3, seed=1, teacher=TeacherParams(noise=0.5))
    rows = roll_out(tasks, params, SandboxParams(workers=1), tmp_path / "parts",
                    open_engine=open_engine)
    traj_in, traj_out = tmp_path / "trajectories.parquet", tmp_path / "scored.parquet"
    write_trajectories(traj_in, rows)
    _patches(tmp_path / "p.parquet", patch_rows(rows))
    assert len(patch_rows(rows)) >= 2, "the teacher submitted too little to verify"
    out, metrics = tmp_path / "v.parquet", tmp_path / "m.json"
    verify.main(["--params", str(tmp_path / "params.yaml"),
                 "--tasks", str(paths[0]), "--tasks", str(paths[1]),
                 "--patches", str(tmp_path / "p.parquet"), "--out", str(out),
                 "--metrics", str(metrics),
                 "--trajectories", str(traj_in), "--trajectories-out", str(traj_out)])
    verdicts = {v["candidate_id"]: v
                for v in read_table(out, schemas.VERDICTS, contract="verdicts").to_pylist()}
    scored = read_trajectories(traj_out).to_pylist()
    assert [r["trajectory_id"] for r in scored] == [r["trajectory_id"] for r in rows]
    for before, after in zip(rows, scored):
        if needs_verdict(before):
            v = verdicts[before["trajectory_id"]]
            assert after["reward_outcome"] == float(v["success"])
            assert after["verdict_reason"] == v["reason"]
            assert after["verifier_version"] == v["verifier_version"]
            assert after["reward"] is not None and before["reward"] is None
        else:  # decided at rollout time: untouched
            assert (after["reward"], after["verdict_reason"]) == (before["reward"],
                                                                   before["verdict_reason"])
    summary = json.loads(metrics.read_text())
    assert summary["trajectories"]["rollouts"] == len(rows)
    assert summary["trajectories"]["unverified"] == 0
    assert summary["infra_errors"] == 0
    assert summary["success_rate_excluding_infra"] == summary["success_rate"]

    # A rerun on the same inputs writes the same verdict and passport bytes (what dvc.lock
    # needs); each verdict's seconds, CPU and RSS are in the sidecar, which may differ.
    from rlvr.enclave.batch import read_verdict_timings

    out2, traj_out2 = tmp_path / "again" / "v.parquet", tmp_path / "again" / "scored.parquet"
    verify.main(["--params", str(tmp_path / "params.yaml"),
                 "--tasks", str(paths[0]), "--tasks", str(paths[1]),
                 "--patches", str(tmp_path / "p.parquet"), "--out", str(out2),
                 "--metrics", str(tmp_path / "m2.json"),
                 "--trajectories", str(traj_in), "--trajectories-out", str(traj_out2)])
    assert out2.read_bytes() == out.read_bytes()
    assert traj_out2.read_bytes() == traj_out.read_bytes()
    for path in (out, out2):
        timings = read_verdict_timings(path.with_name("v.timings.parquet"))
        assert set(timings) == set(verdicts)
        assert all(t["cpu_seconds"] is not None and t["max_rss_kb"] for t in timings.values())
    assert summary["wall_seconds_total"] == pytest.approx(
        sum(t["wall_seconds"] for t in read_verdict_timings(
            out.with_name("v.timings.parquet")).values()), abs=2e-3)
    assert not set(schemas.VERDICT_TIMING_COLUMNS) & set(schemas.VERDICTS.names)

    # the pair goes together; a trajectories file the verdicts do not belong to writes nothing
    with pytest.raises(SystemExit) as exc:
        verify.main(["--params", str(tmp_path / "params.yaml"), "--tasks", str(paths[0]),
                     "--patches", str(tmp_path / "p.parquet"), "--out", str(out),
                     "--metrics", str(metrics), "--trajectories", str(traj_in)])
    assert exc.value.code == 2
    assert "go together" in capsys.readouterr().err
    first = patch_rows(rows)[:1]
    _patches(tmp_path / "one.parquet", first)
    with pytest.raises(SystemExit) as exc:
        verify.main(["--params", str(tmp_path / "params.yaml"),
                     "--tasks", str(paths[0]), "--tasks", str(paths[1]),
                     "--patches", str(tmp_path / "one.parquet"),
                     "--out", str(tmp_path / "v2.parquet"), "--metrics", str(tmp_path / "m2.json"),
                     "--trajectories", str(traj_in),
                     "--trajectories-out", str(tmp_path / "s2.parquet")])
    assert exc.value.code == 2
    assert "no verdict for" in capsys.readouterr().err
    assert not (tmp_path / "s2.parquet").exists() and not (tmp_path / "v2.parquet").exists()
