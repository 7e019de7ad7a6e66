"""MLflow lineage of real stages run by `dvc repro` in a throwaway DVC project: one parent run
per pipeline run with a nested run per stage, params under their params.yaml names, input and
output datasets digested with the md5 `dvc.lock` records (a directory and a file), git / DVC
tags, and a FAILED run for a stage that fails. Plus the pipeline-key contract and the
stages' declared params sections against dvc.yaml."""
from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlvr.artifacts import schemas
from rlvr.artifacts.io import write_table
from rlvr.errors import ConfigError
from rlvr.tracking.lineage import dvc_md5
from rlvr.tracking.passport import labelled_rates, success_rate_distribution
from rlvr.tracking.pipeline import PIPELINE_ENV, PIPELINE_TAG, SOURCE_TAG, pipeline_key
from taskkit import write_task

ROOT = Path(__file__).resolve().parents[1]
DVC = Path(sys.executable).with_name("dvc")
PY = sys.executable

PARAMS = """\
sandbox:
  workers: 1
  limits: {wall_seconds: 30}
split:
  heldout_families: []
  regression_families: []
  heldout_function_share: 0.0
curate:
  reference_runs: 2
  max_mutants: 0
verify:
  seed: 5
  consensus_runs: 1
"""

DAG = f"""\
stages:
  curate:
    cmd: {PY} -m stages.curate --source data/tasks --out artifacts/tasks.parquet
      --selfcheck-out artifacts/selfcheck_patches.parquet --metrics metrics/curate.json
    deps: [data/tasks]
    params: [curate, split, sandbox]
    outs: [artifacts/tasks.parquet, artifacts/tasks.rejections.parquet,
           artifacts/selfcheck_patches.parquet]
    metrics: [{{metrics/curate.json: {{cache: false}}}}]
  selfcheck:
    cmd: {PY} -m stages.verify --selfcheck --tasks artifacts/tasks.parquet
      --patches artifacts/selfcheck_patches.parquet --out artifacts/selfcheck_verdicts.parquet
      --metrics metrics/selfcheck.json
    deps: [artifacts/tasks.parquet, artifacts/selfcheck_patches.parquet]
    params: [verify, sandbox]
    outs: [artifacts/selfcheck_verdicts.parquet, artifacts/selfcheck_verdicts.timings.parquet]
    metrics: [{{metrics/selfcheck.json: {{cache: false}}}}]
  verify:
    cmd: {PY} -m stages.verify --tasks artifacts/tasks.parquet
      --patches artifacts/selfcheck_patches.parquet --out artifacts/verdicts.parquet
      --metrics metrics/verify.json --passport artifacts/passport.json
      --selfcheck-verdicts artifacts/selfcheck_verdicts.parquet
    deps: [artifacts/tasks.parquet, artifacts/tasks.rejections.parquet,
           artifacts/selfcheck_patches.parquet, artifacts/selfcheck_verdicts.parquet]
    params: [verify, sandbox, split]
    outs: [artifacts/verdicts.parquet, artifacts/verdicts.timings.parquet,
           artifacts/passport.json]
  broken:
    cmd: {PY} -m stages.verify --tasks artifacts/tasks.parquet --patches bad_patches.parquet
      --out artifacts/bad.parquet --metrics metrics/bad.json
    deps: [artifacts/tasks.parquet, bad_patches.parquet]
    params: [verify, sandbox]
    outs: [artifacts/bad.parquet]
"""


def _run(cmd, cwd, env):
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    return done


def _git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                   check=True, capture_output=True)


def _lock_md5(lock: dict, stage: str, kind: str, path: str) -> str:
    (entry,) = [e for e in lock["stages"][stage][kind] if e["path"] == path]
    return entry["md5"]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """The DAG above run twice: `dvc repro verify` (curate, selfcheck, verify) under
    RLVR_PIPELINE_RUN=pipe-1 on a clean checkout, then (a tracked file edited) `dvc repro broken` with no key at all."""
    root = tmp_path_factory.mktemp("dvcproj")
    write_task(root / "data" / "tasks", "mini-clamp")
    (root / "params.yaml").write_text(PARAMS)
    (root / "dvc.yaml").write_text(DAG)
    (root / "notes.txt").write_text("tracked, used by no stage\n")
    write_table(root / "bad_patches.parquet",
                [{"task_id": "no-such-task", "candidate_id": "x:1", "origin": "reference",
                  "patch": ""}], schemas.PATCHES, contract="patches")
    _git(root, "init", "-q")
    subprocess.run([str(DVC), "init", "-q"], cwd=root, check=True, capture_output=True)
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "project")
    store = root / "mlflow.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": f"sqlite:///{store}",
           "RLVR_PROGRESS": "0", "PYTHONDONTWRITEBYTECODE": "1",
           "PATH": f"{DVC.parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("RLVR_TRACKING", None)
    first = _run([str(DVC), "repro", "verify"], root, {**env, PIPELINE_ENV: "pipe-1"})
    assert first.returncode == 0, first.stdout + first.stderr
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    (root / "notes.txt").write_text("edited\n")
    second = _run([str(DVC), "repro", "broken"], root,
                  {k: v for k, v in env.items() if k != PIPELINE_ENV})
    assert second.returncode != 0
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{store}")
    exp = client.get_experiment_by_name("rlvr")
    runs = client.search_runs([exp.experiment_id])
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                          text=True, check=True).stdout.strip()
    return root, lock, runs, head, client


def _by_name(runs, name):
    (run,) = [r for r in runs if r.info.run_name == name]
    return run


def _datasets(client, run, context):
    full = client.get_run(run.info.run_id)
    return {d.dataset.name: d.dataset.digest for d in full.inputs.dataset_inputs
            if {t.key: t.value for t in d.tags}.get("mlflow.data.context") == context}


def test_labelled_rates_and_success_distribution():
    rows = ([{"origin": "reference", "success": True, "reason": "none"}] * 15
            + [{"origin": "reference", "success": False, "reason": "tests_failed"}]
            + [{"origin": "empty", "success": False, "reason": "tests_failed"}] * 16
            + [{"origin": "empty", "success": True, "reason": "infra_error"},
               {"origin": "rollout:t1", "success": True, "reason": "none"}])
    got = labelled_rates(rows)
    assert (got["positives"], got["false_negatives"], got["false_negative_rate"]) == \
        (16, 1, 1 / 16)
    assert (got["negatives"], got["false_positives"], got["infra_errors"],
            got["unlabelled"]) == (16, 0, 1, 1)
    # 0 false passes in 16: the exact 95% bound is 1 - 0.05**(1/16), not 0
    assert got["false_positive_rate_upper95"] == pytest.approx(1 - 0.05 ** (1 / 16), abs=1e-6)
    dist = success_rate_distribution(
        [{"task_id": "a", "reward_outcome": 1.0}, {"task_id": "a", "reward_outcome": 0.0},
         {"task_id": "b", "reward_outcome": 1.0}, {"task_id": "c", "reward_outcome": 0.0},
         {"task_id": "d", "reward_outcome": None}])
    assert (dist["tasks"], dist["rollouts"], dist["at_zero"], dist["at_one"]) == (3, 4, 1, 1)
    assert [b["tasks"] for b in dist["bins"]] == [1, 0, 1, 0, 1]
    assert dist["per_task"]["a"] == {"p_hat": 0.5, "n": 2}


def test_one_parent_per_pipeline_run_with_a_nested_run_per_stage(project):
    _, _, runs, _, _ = project
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 2
    first = [p for p in parents if p.data.tags[PIPELINE_TAG] == "pipe-1"][0]
    assert first.data.tags[SOURCE_TAG] == "env"
    assert first.info.status == "FINISHED"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == first.info.run_id]
    # the selfcheck stage runs stages.verify --selfcheck and is named after its DVC stage
    assert sorted(r.info.run_name for r in children) == ["curate", "selfcheck", "verify"]
    assert all(r.info.status == "FINISHED" for r in children)
    assert all(r.data.tags["stage"] == r.info.run_name for r in children)
    # opened when the stage started, not after its body: it lasted as long as the stage
    curate = _by_name(runs, "curate")
    metrics_written = (project[0] / "metrics" / "curate.json").stat().st_mtime * 1000
    assert curate.info.start_time < metrics_written <= curate.info.end_time + 1


def test_failing_stage_is_a_failed_run_under_its_own_dvc_repro_parent(project):
    root, _, runs, _, _ = project
    broken = _by_name(runs, "broken")
    assert broken.info.status == "FAILED"
    assert broken.data.tags["error"].startswith("UnknownTaskError")
    parent = [r for r in runs if r.info.run_id == broken.data.tags["mlflow.parentRunId"]][0]
    assert parent.data.tags[SOURCE_TAG] == "dvc repro"
    assert parent.data.tags[PIPELINE_TAG].startswith("dvc-repro:")
    assert parent.info.status == "FAILED"
    assert not (root / "metrics" / "bad.json").exists()


def test_params_are_named_as_in_params_yaml(project):
    _, _, runs, _, _ = project
    curate = _by_name(runs, "curate").data.params
    assert curate["curate.reference_runs"] == "2"
    assert curate["sandbox.limits.wall_seconds"] == "30"
    assert curate["split.heldout_families"] == "[]"
    assert not any(k.startswith("verify.") for k in curate)
    assert _by_name(runs, "selfcheck").data.params == {
        "verify.seed": "5", "verify.consensus_runs": "1", "sandbox.workers": "1",
        "sandbox.limits.wall_seconds": "30"}


def test_datasets_carry_the_md5_dvc_lock_records(project):
    root, lock, runs, _, client = project
    curate, selfcheck = _by_name(runs, "curate"), _by_name(runs, "selfcheck")
    tasks_dir = _lock_md5(lock, "curate", "deps", "data/tasks")
    tasks_file = _lock_md5(lock, "curate", "outs", "artifacts/tasks.parquet")
    assert tasks_dir.endswith(".dir")
    # DVC's hashing, computed here, equals dvc.lock for a directory and for a file
    assert dvc_md5(root / "data" / "tasks", root) == tasks_dir
    assert dvc_md5(root / "artifacts" / "tasks.parquet", root) == tasks_file
    assert tasks_file == hashlib.md5((root / "artifacts/tasks.parquet").read_bytes()).hexdigest()
    assert _datasets(client, curate, "input") == {"data/tasks": tasks_dir}
    assert _datasets(client, curate, "output") == {
        "artifacts/tasks.parquet": tasks_file,
        "artifacts/tasks.rejections.parquet": _lock_md5(
            lock, "curate", "outs", "artifacts/tasks.rejections.parquet"),
        "artifacts/selfcheck_patches.parquet": _lock_md5(
            lock, "curate", "outs", "artifacts/selfcheck_patches.parquet")}
    # the next stage's input is the same dataset: the lineage chain is one digest
    assert _datasets(client, selfcheck, "input")["artifacts/tasks.parquet"] == tasks_file
    assert _datasets(client, selfcheck, "output") == {
        "artifacts/selfcheck_verdicts.parquet": _lock_md5(
            lock, "selfcheck", "outs", "artifacts/selfcheck_verdicts.parquet")}
    assert curate.data.tags["input.source.md5"] == tasks_dir


def test_git_dvc_and_version_tags(project):
    _, _, runs, head, _ = project
    curate, selfcheck, broken = (_by_name(runs, n) for n in ("curate", "selfcheck", "broken"))
    assert {r.data.tags["git_commit"] for r in (curate, selfcheck, broken)} == {head}
    assert curate.data.tags["git_dirty"] == "false"
    assert broken.data.tags["git_dirty"] == "true"   # notes.txt edited
    assert "dvc_lock_md5" not in curate.data.tags    # the first stage ran before any dvc.lock
    assert len(selfcheck.data.tags["dvc_lock_md5"]) == 32
    assert "dvc_exp_name" not in curate.data.tags
    assert selfcheck.data.tags["verifier_version"].startswith("enclave-")
    metrics = json.loads((project[0] / "metrics" / "selfcheck.json").read_text())
    assert selfcheck.data.metrics["by_origin.reference.success_rate"] == \
        metrics["by_origin"]["reference"]["success_rate"] == 1.0


def test_passport_is_an_artifact_with_the_verifier_facts(project):
    root, lock, runs, _, client = project
    passport = json.loads((root / "artifacts" / "passport.json").read_text())
    pool = passport["tasks"]["pools"]["tasks.parquet"]
    assert (pool["accepted"], pool["rejected"], pool["by_split"]) == (1, 0, {"train": 1})
    assert passport["tasks"]["split_rules"]["heldout_function_share"] == 0.0
    verifier = passport["verifier"]
    assert verifier["version"].startswith("enclave-") and len(verifier["config_hash"]) == 64
    sample = verifier["labelled_sample"]["selfcheck"]
    assert (sample["positives"], sample["negatives"]) == (1, 1)
    assert (sample["false_positives"], sample["false_negatives"]) == (0, 0)
    assert sample["false_positive_rate_upper95"] == pytest.approx(0.95)  # 0/1: little known
    assert passport["sandbox"]["limits"]["wall_seconds"] == 30
    verify = _by_name(runs, "verify")
    assert _datasets(client, verify, "output")["artifacts/passport.json"] == _lock_md5(
        lock, "verify", "outs", "artifacts/passport.json")
    assert "split.heldout_function_share" in verify.data.params
    logged = [a.path for a in client.list_artifacts(verify.info.run_id)]
    assert logged == ["passport.json"]


def test_dvc_exp_run_names_the_parent_and_tags_the_experiment(tmp_path):
    """`dvc exp run` passes DVC_EXP_NAME / DVC_EXP_BASELINE_REV to every stage command."""
    from mlflow import MlflowClient

    (tmp_path / "params.yaml").write_text("a: {b: 1}\n")
    (tmp_path / "s.py").write_text(
        "from rlvr.tracking.stage import stage_run\n"
        "with stage_run('s', sections=('a',), metrics_path='m.json') as run:\n"
        "    run.log_metrics({'ok': 1})\n")
    (tmp_path / "dvc.yaml").write_text(
        f"stages:\n  s:\n    cmd: {PY} s.py\n    deps: [s.py]\n    params: [a]\n"
        "    metrics: [{m.json: {cache: false}}]\n")
    _git(tmp_path, "init", "-q")
    subprocess.run([str(DVC), "init", "-q"], cwd=tmp_path, check=True, capture_output=True)
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "exp")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {k: v for k, v in os.environ.items() if k not in (PIPELINE_ENV, "RLVR_TRACKING")}
    env.update(PYTHONPATH=str(ROOT), MLFLOW_TRACKING_URI=uri, PYTHONDONTWRITEBYTECODE="1")
    done = _run([str(DVC), "exp", "run", "-n", "tidy-run", "-S", "a.b=2"], tmp_path, env)
    assert done.returncode == 0, done.stdout + done.stderr
    client = MlflowClient(uri)
    runs = {r.info.run_name: r for r in client.search_runs(
        [client.get_experiment_by_name("rlvr").experiment_id])}
    stage = runs["s"]
    assert stage.data.tags["dvc_exp_name"] == "tidy-run"
    assert stage.data.params == {"a.b": "2"}
    parent = client.get_run(stage.data.tags["mlflow.parentRunId"])
    baseline = stage.data.tags["dvc_exp_baseline_rev"]
    assert parent.data.tags[PIPELINE_TAG] == f"dvc-exp:tidy-run@{baseline[:12]}"
    assert baseline == stage.data.tags["git_commit"]


# ---- the pipeline key and per-step metrics, in process ------------------------------------
def test_pipeline_key_contract():
    assert pipeline_key({PIPELINE_ENV: "prefect:1f2e"}).key == "prefect:1f2e"
    exp = pipeline_key({"DVC_EXP_NAME": "sunny-cake", "DVC_EXP_BASELINE_REV": "a" * 40,
                        "DVC_STAGE": "curate"})
    assert (exp.key, exp.source) == (f"dvc-exp:sunny-cake@{'a' * 12}", "dvc exp run")
    assert pipeline_key({}) is None                       # by hand: a standalone run
    assert pipeline_key({"DVC_STAGE": "curate"}) is None  # no dvc process above this test
    with pytest.raises(ConfigError, match=PIPELINE_ENV):
        pipeline_key({PIPELINE_ENV: "has spaces"})


def test_steps_batched_with_step_and_failure_in_process(tmp_path, monkeypatch):
    from mlflow import MlflowClient

    from rlvr.tracking.stage import stage_run

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv(PIPELINE_ENV, "unit-1")
    monkeypatch.delenv("RLVR_TRACKING", raising=False)
    monkeypatch.delenv("DVC_STAGE", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("sft:\n  lora: {r: 8, enabled: false}\n")
    with stage_run("sft", sections=("sft",), metrics_path=tmp_path / "m.json") as run:
        for step in range(1, 4):
            run.log_step(step, {"train": {"loss": 1.0 / step}, "note": "text is no metric"})
        run.log_metrics({"policy_version": "w:abc", "steps": 3})
    with pytest.raises(SystemExit):
        with stage_run("evaluate", metrics_path=tmp_path / "e.json"):
            raise SystemExit(2)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("rlvr")
    runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
    sft, ev = runs["sft"], runs["evaluate"]
    history = client.get_metric_history(sft.info.run_id, "train.loss")
    assert [(m.step, m.value) for m in history] == [(1, 1.0), (2, 0.5), (3, 1.0 / 3)]
    assert sft.data.params == {"sft.lora.r": "8", "sft.lora.enabled": "false"}
    assert sft.data.tags["policy_version"] == "w:abc" and sft.data.metrics["steps"] == 3.0
    assert (ev.info.status, ev.data.tags["error"]) == ("FAILED", "exit status 2")
    assert runs["pipeline unit-1"].info.status == "FAILED"  # the stage that ended last failed
    assert not (tmp_path / "e.json").exists()


def test_sigterm_ends_the_run_killed(tmp_path):
    import signal
    import time

    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    (tmp_path / "s.py").write_text(
        "import pathlib, time\n"
        "from rlvr.tracking.stage import stage_run\n"
        "with stage_run('rollout', metrics_path='m.json'):\n"
        "    pathlib.Path('started').touch()\n"
        "    time.sleep(600)\n")
    env = {k: v for k, v in os.environ.items() if k not in (PIPELINE_ENV, "RLVR_TRACKING",
                                                            "DVC_STAGE")}
    env.update(PYTHONPATH=str(ROOT), MLFLOW_TRACKING_URI=uri)
    proc = subprocess.Popen([PY, "s.py"], cwd=tmp_path, env=env, stderr=subprocess.PIPE)
    try:
        for _ in range(1200):  # wait (up to 2 min) until the body runs: its run is open
            if (tmp_path / "started").exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert (tmp_path / "started").exists(), proc.stderr.read()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 143
    finally:
        proc.kill()
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("rlvr").experiment_id])
    assert (run.info.status, run.data.tags["error"]) == ("KILLED", "exit status 143")
    assert not (tmp_path / "m.json").exists()


def test_compare_two_pipeline_runs(tmp_path, monkeypatch, capsys):
    from rlvr.tracking import compare
    from rlvr.tracking.stage import stage_run

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'm.db'}")
    monkeypatch.delenv("RLVR_TRACKING", raising=False)
    monkeypatch.delenv("DVC_STAGE", raising=False)
    monkeypatch.chdir(tmp_path)
    shared = tmp_path / "shared.txt"
    shared.write_text("same bytes")
    for key, seed, data in (("run-a", 0, "one"), ("run-b", 1, "two")):
        monkeypatch.setenv(PIPELINE_ENV, key)
        (tmp_path / "params.yaml").write_text(f"rollout: {{seed: {seed}, workers: 2}}\n")
        (tmp_path / "in.txt").write_text(data)
        with stage_run("rollout", sections=("rollout",), inputs={"shared": shared,
                                                                 "data": "in.txt"},
                       metrics_path=tmp_path / "m.json") as run:
            run.log_metrics({"success_rate": 0.25 * (seed + 1), "episodes": 8})
    (diff,) = compare.compare_pipeline_runs("run-a", "run-b")
    assert diff.stage == "rollout" and diff.statuses == ("FINISHED", "FINISHED")
    assert diff.params == {"rollout.seed": ("0", "1")}
    assert diff.metrics == {"success_rate": (0.25, 0.5)}
    assert list(diff.datasets) == ["input:in.txt"]   # shared.txt: the same digest
    compare.main(["run-a", "run-b"])
    out = capsys.readouterr().out
    assert "| metric | success_rate | 0.25 | 0.5 | 0.25 |" in out
    with pytest.raises(SystemExit) as exc:
        compare.main(["run-a", "no-such-run"])
    assert exc.value.code == 2 and "no-such-run" in capsys.readouterr().err


# ---- every stage logs the params sections dvc.yaml gives it -------------------------------
def _declared_sections(path: Path) -> list[tuple[str, ...]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "stage_run":
            for kw in node.keywords:
                if kw.arg == "sections":  # a literal, or one literal per branch
                    found += [tuple(ast.literal_eval(n)) for n in ast.walk(kw.value)
                              if isinstance(n, ast.Tuple)]
    return found


def test_stage_sections_match_dvc_yaml():
    dag = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    checked = 0
    for name, spec in dag.items():
        module = spec["cmd"].split("-m stages.")[1].split()[0]
        declared = _declared_sections(ROOT / "stages" / f"{module}.py")
        if not spec.get("params"):  # a stage without params (corpus) logs none
            assert not any(declared), f"stages/{module}.py: sections= but no dvc.yaml params"
            continue
        assert declared, f"stages/{module}.py: stage_run without sections="
        assert set(spec["params"]) in [set(d) for d in declared], name
        checked += 1
    assert checked >= 7
