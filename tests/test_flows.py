"""The Prefect flow over dvc.yaml (flows/pipeline.py), run under Prefect's test harness.

The flow runs against a tiny throwaway DVC project (git + `dvc init` in a tmp dir) whose
stages are one-line python commands, not against a subset of this repo's DAG: the cheapest
real subset (curate -> selfcheck) takes minutes on two cores and would rewrite this
checkout's artifacts and dvc.lock. The DVC machinery exercised (DVC's index and graph,
`dvc repro --single-item`, `dvc exp save`, metrics files) is the same.
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

import flows.pipeline as fp
from rlvr.errors import ConfigError
from rlvr.orchestrate.stage_process import killed_by_signal
from rlvr.orchestrate.stage_report import MLFLOW_UI_ENV

DVC_YAML = """\
stages:
  a:
    cmd: >-
      python -c "import json, yaml; n = yaml.safe_load(open('params.yaml'))['a']['n'];
      print('hello from a', n, flush=True); open('a.txt', 'w').write('x' * n);
      json.dump({'n': n, 'nested': {'rate': 0.25}}, open('a.json', 'w'))"
    params: [a]
    outs: [a.txt]
    metrics:
      - a.json:
          cache: false
  b:
    cmd: python -c "print('b read', open('a.txt').read()); open('b.txt', 'w').write('b')"
    deps: [a.txt]
    outs: [b.txt]
  c:
    cmd: python -c "open('c.txt', 'w').write('c')"
    outs: [c.txt]
  bad:
    cmd: >-
      python -c "import sys; print('bad input - field n', file=sys.stderr); sys.exit(2)"
  flaky:
    cmd: >-
      python -c "import os, pathlib, signal; m = pathlib.Path('flaky.tries');
      m.write_text(m.read_text() + 'x' if m.exists() else 'x');
      os.kill(os.getpid(), signal.SIGKILL) if len(m.read_text()) == 1 else print('second try')"
"""


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture()
def project(tmp_path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    _git(root, "init", "-q")
    _git(root, "config", "user.email", "t@example.invalid")
    _git(root, "config", "user.name", "t")
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=root, check=True)
    (root / "dvc.yaml").write_text(DVC_YAML)
    (root / "params.yaml").write_text("a:\n  n: 2\n")
    (root / ".gitignore").write_text("flaky.tries\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "init")
    return root


@pytest.fixture(scope="module")
def harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def _api(coro_fn):
    from prefect.client.orchestration import get_client

    async def go():
        async with get_client() as client:
            return await coro_fn(client)

    return asyncio.run(go())


def _task_runs(flow_run_id):
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    runs = _api(lambda c: c.read_task_runs(
        flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))))
    return {r.name: r for r in runs}


def _logs(flow_run_id) -> list[str]:
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=30)   # logs are sent in batches; wait for the last one
    logs = _api(lambda c: c.read_logs(
        log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))))
    return [log.message for log in logs]


# ------------------------------------------------------------------ under the test harness
def test_two_stage_subset_runs_in_dag_order(harness, project, monkeypatch):
    monkeypatch.setenv("RLVR_TRACKING", "off")
    state = fp.rlvr_pipeline(targets=["b", "a"], root=str(project), return_state=True)
    assert state.is_completed(), state
    assert state.result() == ["a", "b"]          # DAG order, not the order given
    assert (project / "b.txt").read_text() == "b" and not (project / "c.txt").exists()
    lock = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    assert set(lock) == {"a", "b"}               # DVC ran them: its lock file says so

    flow_run_id = state.state_details.flow_run_id
    runs = _task_runs(flow_run_id)
    assert set(runs) == {"stage:a", "stage:b"}
    a, b = runs["stage:a"], runs["stage:b"]
    assert b.start_time >= a.end_time
    upstream = [i.id for i in b.task_inputs["wait_for"]]
    assert upstream == [a.id]                    # the DAG edge is visible in Prefect's graph

    logs = _logs(flow_run_id)
    assert any("hello from a 2" in m for m in logs)   # stage stdout reached Prefect's log
    assert any("b read xx" in m for m in logs)

    artifact = _api(lambda c: c.read_latest_artifacts())
    by_key = {x.key: x for x in artifact}
    table = by_key["stage-a"].data
    assert "| `n` | 2 |" in table and "| `nested.rate` | 0.25 |" in table
    assert "none found" in table                 # tracking off: no MLflow link invented
    assert "declares no metrics file" in by_key["stage-b"].data
    assert "**Outcome:** ran: DVC found " in table   # it ran, and DVC's status said why

    again = fp.rlvr_pipeline(targets=["a"], root=str(project), return_state=True)
    assert again.is_completed(), again
    by_key = {x.key: x for x in _api(lambda c: c.read_latest_artifacts())}
    assert ("**Outcome:** up to date: DVC found nothing changed and did not run it"
            in by_key["stage-a"].data)


def test_unknown_stage_is_an_error_naming_it(harness, project):
    with pytest.raises(ConfigError, match="'nope'"):
        fp.rlvr_pipeline(targets=["a", "nope"], root=str(project))
    assert not (project / "a.txt").exists()      # nothing ran


def test_failing_stage_fails_at_once_and_is_named(harness, project, monkeypatch):
    monkeypatch.setenv("RLVR_TRACKING", "off")
    state = fp.rlvr_pipeline(targets=["bad"], root=str(project), return_state=True)
    assert state.is_failed()
    with pytest.raises(fp.StageFailed) as err:
        state.result()
    assert err.value.stage == "bad" and err.value.exit_code == 2
    assert "stage 'bad' failed with exit code 2: bad input - field n" == str(err.value)
    (run,) = _task_runs(state.state_details.flow_run_id).values()
    assert run.run_count == 1 and run.state.is_failed()   # exit 2 is final: no retry
    assert any("bad input - field n" in m for m in _logs(state.state_details.flow_run_id))


@pytest.mark.parametrize("shell", ["/bin/bash", None])  # None: DVC runs /bin/sh (dash here)
def test_killed_stage_is_retried(harness, project, monkeypatch, shell):
    monkeypatch.setenv("RLVR_TRACKING", "off")
    if shell is None:
        monkeypatch.delenv("SHELL", raising=False)
    else:
        monkeypatch.setenv("SHELL", shell)
    monkeypatch.setattr(fp, "run_stage", fp.run_stage.with_options(retry_delay_seconds=0))
    state = fp.rlvr_pipeline(targets=["flaky"], root=str(project), return_state=True)
    assert state.is_completed(), state
    (run,) = _task_runs(state.state_details.flow_run_id).values()
    assert run.run_count == 2                    # SIGKILL the first time, then it ran
    assert (project / "flaky.tries").read_text() == "xx"


def test_param_overrides_run_as_a_dvc_experiment(harness, project, monkeypatch):
    monkeypatch.setenv("RLVR_TRACKING", "off")
    _git(project, "add", "-A")
    # b reads a's output: a run of `a` alone would save b's metrics from before a.n=5
    with pytest.raises(ConfigError, match=r"stage\(s\) b read them or depend on one"):
        fp.rlvr_pipeline(targets=["a"], set_params=["a.n=5"], root=str(project))
    assert yaml.safe_load((project / "params.yaml").read_text()) == {"a": {"n": 2}}
    assert fp.rlvr_pipeline(targets=["a", "b"], set_params=["a.n=5"], root=str(project),
                            experiment="five") == ["a", "b"]
    assert yaml.safe_load((project / "params.yaml").read_text()) == {"a": {"n": 5}}
    assert (project / "a.txt").read_text() == "x" * 5
    shown = subprocess.run([sys.executable, "-m", "dvc", "exp", "show", "--json"], cwd=project,
                           check=True, capture_output=True, text=True).stdout
    assert '"five"' in shown
    with pytest.raises(ConfigError, match=r"zz\.q=1"):
        fp.rlvr_pipeline(targets=["a"], set_params=["zz.q=1"], root=str(project))


# ---------------------------------------------------------------- no Prefect server needed
def test_an_experiment_must_run_every_stage_its_overrides_reach():
    from rlvr.orchestrate.dag import DagStage, stages_needing

    dag = {"curate": DagStage("curate", (), (), ("params.yaml:curate", "params.yaml:split")),
           "rollout": DagStage("rollout", ("curate",), (), ("params.yaml:rollout",)),
           "sft": DagStage("sft", ("rollout",), (), ("params.yaml:sft",)),
           "evaluate": DagStage("evaluate", ("sft",), (), ("params.yaml:evaluate.seed",)),
           "other": DagStage("other", (), (), ("other.yaml:rollout",))}
    assert stages_needing(dag, ["rollout.seed=1"]) == ["rollout", "sft", "evaluate"]
    assert stages_needing(dag, ["evaluate=x"]) == ["evaluate"]      # a section holds the key
    assert stages_needing(dag, ["other.yaml:rollout.seed=1"]) == ["other"]
    assert stages_needing(dag, ["+split.new=1"]) == ["curate", "rollout", "sft", "evaluate"]
    assert stages_needing(dag, ["gate.tolerance=0.1"]) == []


def test_signal_deaths_are_read_from_either_status_form():
    assert killed_by_signal(-9) == 9           # the shell exec'd the stage
    assert killed_by_signal(137) == 9          # a shell reported its child's SIGKILL
    assert killed_by_signal(143) == 15
    assert killed_by_signal(2) is None and killed_by_signal(1) is None
    assert killed_by_signal(None) is None and killed_by_signal(128) is None
    assert killed_by_signal(255) is None       # beyond any signal: the stage's own code


def test_served_deployment_schedule_and_parameters():
    dep = fp.nightly_deployment()
    assert dep.name == "rlvr-nightly"
    (schedule,) = dep.schedules
    assert schedule.schedule.cron == "0 3 * * *"
    assert dep.parameters == {"targets": None, "set_params": ["rollout.seed=1", "evaluate.seed=1"],
                              "experiment": "nightly-seed1"}
    assert dep.entrypoint.endswith("flows/pipeline.py:rlvr_pipeline")


def test_flow_is_addressable_by_entrypoint():
    from prefect.flows import load_flow_from_entrypoint

    loaded = load_flow_from_entrypoint(str(Path(fp.__file__)) + ":rlvr_pipeline")
    assert loaded.name == "rlvr-pipeline"
    assert set(loaded.parameters.properties) == {"targets", "set_params", "root",
                                                 "with_upstream", "experiment"}


def test_dag_comes_from_dvc(project):
    dag = fp.load_dag(project)
    assert list(dag) == ["a", "b", "c", "bad", "flaky"]
    assert dag["b"].upstream == ("a",) and dag["a"].metrics == ("a.json",)
    assert fp.select_stages(dag, ["b"], with_upstream=True) == ["a", "b"]
    with pytest.raises(ConfigError, match="'x', 'y'"):
        fp.select_stages(dag, ["x", "b", "y"])


def test_this_repos_dag_includes_every_stage():
    dag = fp.load_dag()
    assert {"curate", "selfcheck", "init_policy", "rollout"} <= set(dag)
    order = list(dag)
    for name, stage in dag.items():
        assert all(order.index(up) < order.index(name) for up in stage.upstream)


def test_exit_status_classification(tmp_path):
    seen = []

    def run(code: str):
        return fp.run_streamed("s", [sys.executable, "-c", textwrap.dedent(code)], tmp_path,
                               {"PATH": "/usr/bin:/bin"}, seen.append)

    assert run("print('one'); print('two')") == ["one", "two"] and seen == ["one", "two"]
    with pytest.raises(fp.StageFailed, match="stage 's' failed with exit code 2: last words"):
        run("""
            import sys
            print('last words')
            print("ERROR: failed to reproduce 's': failed to run: x, exited with 2")
            sys.exit(255)""")
    with pytest.raises(fp.InfrastructureFailure, match="killed by signal 9"):
        run("""
            import sys
            print("ERROR: failed to reproduce 's': failed to run: x, exited with -9")
            sys.exit(255)""")
    with pytest.raises(fp.InfrastructureFailure, match="killed by signal 9"):
        run("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    with pytest.raises(fp.InfrastructureFailure, match="holds the repository lock"):
        run("""
            import sys
            print("ERROR: Unable to acquire lock. Most likely another DVC process is running")
            sys.exit(255)""")
    with pytest.raises(fp.InfrastructureFailure, match="cannot launch"):
        fp.run_streamed("s", [str(tmp_path / "no-such-binary")], tmp_path, {}, seen.append)


def test_retry_condition_only_for_infrastructure():
    class Failed:
        def __init__(self, exc):
            self.exc = exc

        def result(self):
            raise self.exc

    assert fp.retry_infrastructure_only(None, None, Failed(fp.InfrastructureFailure("s", "x")))
    assert not fp.retry_infrastructure_only(None, None, Failed(fp.StageFailed("s", 2)))
    assert not fp.retry_infrastructure_only(None, None, Failed(ValueError("bug")))


def test_stage_changes_come_from_dvc_status(project):
    from rlvr.orchestrate.dag import stage_changes
    from rlvr.orchestrate.stage_report import stage_outcome

    before = stage_changes(project, "a")
    assert before and all(isinstance(c, str) for c in before)   # never run: changed
    subprocess.run([sys.executable, "-m", "dvc", "repro", "--single-item", "a"], cwd=project,
                   check=True, capture_output=True)
    assert stage_changes(project, "a") == []
    (project / "params.yaml").write_text("a:\n  n: 3\n")
    assert stage_changes(project, "a") == ["changed deps"]
    assert stage_changes(project / "nowhere", "a") is None
    assert stage_outcome([], []) .startswith("up to date")
    assert stage_outcome(["changed deps"], ["Running stage 'a':"]) == \
        "ran: DVC found changed deps"
    assert stage_outcome(["changed deps"], [
        "Stage 'a' is cached - skipping run, checking out outputs"]).startswith(
        "restored from DVC's run cache")
    assert stage_outcome(None, []).startswith("succeeded (DVC's status was unavailable")


def test_metrics_markdown_and_reading(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"acc": 0.5, "by": {"train": 3, "tag": "x|y"}}))
    values = fp.read_metrics(path)
    assert values == {"acc": 0.5, "by.train": 3, "by.tag": "x|y"}
    md = fp.metrics_markdown("st", "succeeded", {"m.json": values, "gone.json": None},
                             "http://mlflow/#/experiments/1/runs/abc")
    assert "| `acc` | 0.5 |" in md and "| `by.tag` | \"x/y\" |" in md
    assert "[http://mlflow/#/experiments/1/runs/abc]" in md and "_not written_" in md
    assert fp.read_metrics(tmp_path / "absent.json") is None
    assert fp.artifact_key("init_policy") == "stage-init-policy"


def test_mlflow_link_found_for_the_stage_run(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv(MLFLOW_UI_ENV, "http://ui:5000")
    monkeypatch.delenv("RLVR_TRACKING", raising=False)
    client = MlflowClient(uri)
    exp = client.create_experiment("rlvr")
    run = client.create_run(exp, tags={"stage": "a"})
    assert fp.find_mlflow_run("a", 0, tmp_path) == (
        f"http://ui:5000/#/experiments/{exp}/runs/{run.info.run_id}")
    assert fp.find_mlflow_run("b", 0, tmp_path) is None
    assert fp.find_mlflow_run("a", run.info.start_time + 10_000, tmp_path) is None


@pytest.mark.parametrize("given,seen", [(None, "False"), ("true", "True")])
def test_ephemeral_server_telemetry_off_unless_asked(given, seen):
    """The fresh-PREFECT_HOME 'database is locked' storm: the temporary server's telemetry
    service is off by default once flows.pipeline is imported; an explicit setting wins."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "PREFECT_SERVER_ANALYTICS_ENABLED"}
    if given is not None:
        env["PREFECT_SERVER_ANALYTICS_ENABLED"] = given
    code = ("import flows.pipeline; from prefect.settings import get_current_settings; "
            "print(get_current_settings().server.analytics_enabled)")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(fp.__file__).parent.parent,
                         env=env, check=True, capture_output=True, text=True).stdout
    assert out.split() == [seen]


def test_dedicated_server_started_in_the_repo_sends_no_telemetry():
    """`prefect server start` run from the repository root (as the README shows) reads the
    repo's prefect.toml: analytics off without flows.pipeline imported or any variable set."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "PREFECT_SERVER_ANALYTICS_ENABLED"}
    code = ("import sys; from prefect.settings import get_current_settings; "
            "assert 'flows.pipeline' not in sys.modules; "
            "print(get_current_settings().server.analytics_enabled)")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(fp.__file__).parent.parent,
                         env=env, check=True, capture_output=True, text=True).stdout
    assert out.split() == ["False"]
