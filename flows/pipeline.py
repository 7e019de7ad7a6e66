"""The Prefect face of the one DAG: `dvc.yaml`, read through DVC's own API, run stage by stage.

There is exactly one DAG definition, `dvc.yaml`. `load_dag` asks DVC for it
(`dvc.repo.Repo(root).index`: its pipeline stages and the dependency graph DVC itself builds
from deps/outs), so this module holds no parser and no second graph. Each stage is one Prefect
task that runs `dvc repro --single-item <stage>` with this interpreter's DVC (the venv's, not
whatever `dvc` is first on PATH), so DVC still decides what is up to date and writes
`dvc.lock`; every line the stage prints is streamed to the Prefect run log as it comes.

Entry points (all address the module-level flow `rlvr_pipeline`):

    python -m flows.pipeline                       # whole DAG
    python -m flows.pipeline curate selfcheck      # a subset, still in DAG order
    python -m flows.pipeline rollout --upstream    # rollout and every stage it depends on
    python -m flows.pipeline -S rollout.seed=1     # `dvc exp run -S` semantics, per-stage tasks
    python -m flows.pipeline --serve               # the scheduled deployment (NIGHTLY)
    prefect deploy flows/pipeline.py:rlvr_pipeline # for a work pool

Failures. A stage that exits non-zero (2 = bad input, 1 = a bug) fails its task at once with
`StageFailed` naming the stage and exit code; it is not retried, a re-run would fail the
same way. Only an *infrastructure* failure is retried (`InfrastructureFailure`): the DVC
process could not be launched (OSError), it or the stage's process was killed by a signal
(e.g. SIGKILL from the OOM killer; DVC reports the stage as "exited with -9", or with 137
when a shell ran it: `killed_by_signal`), or another
DVC process held the repository lock. The first failing stage stops the run, as `dvc repro`
does.

SQLite "database is locked". With no `PREFECT_API_URL`, a flow run starts a temporary
Prefect server on a SQLite file under `PREFECT_HOME`. On a fresh `PREFECT_HOME` that
server's telemetry service (`send_telemetry_heartbeat`, one of the few services Prefect runs
in the ephemeral server) writes its session row while the server's own startup writes hold
the database, and SQLite refuses the second writer at once ("database is locked", a
deferred transaction upgrading to a write is not covered by busy_timeout; PrefectHQ/prefect
#18934, #19771: "sqlite locking is hard to avoid with the ephemeral client"). Importing this
module therefore defaults `PREFECT_SERVER_ANALYTICS_ENABLED=false` (that service off) and
`PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=90` (the 20 s default is too tight on two
cores); an explicit value in the environment wins. For anything beyond a one-off run, start
one server (`prefect server start`, the only process that owns the database) and point
every client at it with `PREFECT_API_URL` (README "Scheduling with Prefect").
"""
from __future__ import annotations

import os

# Before Prefect is imported: these configure the temporary server a flow run starts when
# no PREFECT_API_URL is set (see the module docstring).
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")

import json  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import tomllib  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Callable, Iterable, Sequence  # noqa: E402

import yaml  # noqa: E402
from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.artifacts import create_markdown_artifact  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402
from prefect.runtime import flow_run as current_flow_run  # noqa: E402

from rlvr.errors import ConfigError, RlvrError, exit_on_error  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
PIPELINE_ENV = "RLVR_PIPELINE_RUN"      # rlvr/tracking/pipeline.py: one MLflow parent per value
MLFLOW_UI_ENV = "RLVR_MLFLOW_UI"        # base URL of the MLflow UI for artifact links
DEFAULT_MLFLOW_UI = "http://127.0.0.1:5000"
STAGE_RETRIES = 2                       # infrastructure failures only
STAGE_RETRY_DELAY_S = 10
MAX_METRIC_ROWS = 200                   # per metrics file in a stage's artifact

# The served deployment: every night at 03:00 (server time zone UTC unless the server says
# otherwise), the whole DAG with a second seed for rollouts and evaluation, saved as the DVC
# experiment `nightly-seed1` so `dvc exp show` compares it with the workspace.
NIGHTLY_NAME = "rlvr-nightly"
NIGHTLY_CRON = "0 3 * * *"
NIGHTLY_PARAMETERS: dict[str, Any] = {
    "targets": None,
    "set_params": ["rollout.seed=1", "evaluate.seed=1"],
    "experiment": "nightly-seed1",
}


class StageFailed(RlvrError):
    """A stage ran and exited non-zero: its own verdict on its input or code; not retried."""

    def __init__(self, stage: str, exit_code: int, detail: str = ""):
        self.stage, self.exit_code = stage, exit_code
        super().__init__(f"stage '{stage}' failed with exit code {exit_code}"
                         + (f": {detail}" if detail else ""))


class InfrastructureFailure(RuntimeError):
    """The stage could not run to a verdict (launch error, killed by a signal, repo lock
    held): the only failure the stage task retries."""

    def __init__(self, stage: str, reason: str):
        self.stage, self.reason = stage, reason
        super().__init__(f"stage '{stage}': {reason}")


@dataclass(frozen=True)
class DagStage:
    """One pipeline stage as DVC sees it. `upstream`: the stages whose outs it depends on
    (direct edges of DVC's graph); `metrics`: its metrics files, relative to the repo root."""

    name: str
    upstream: tuple[str, ...]
    metrics: tuple[str, ...]


def _root_of(root: Path | str | None) -> Path:
    """The repo root; a path to a dvc.yaml means its folder (older callers passed the file)."""
    path = Path(root) if root is not None else REPO_ROOT
    if path.name == "dvc.yaml":
        path = path.parent
    return path.resolve()


def load_dag(root: Path | str | None = None) -> dict[str, DagStage]:
    """The pipeline stages of `root`'s dvc.yaml files in a dependency order (each after all
    its upstream stages; ties in dvc.yaml order), from DVC's index and graph."""
    import networkx as nx
    from dvc.exceptions import DvcException
    from dvc.repo import Repo
    from dvc.stage import PipelineStage

    root = _root_of(root)
    if not (root / "dvc.yaml").is_file():
        raise ConfigError(f"{root / 'dvc.yaml'}: cannot read the DAG: no such file")
    try:
        with Repo(str(root), uninitialized=not (root / ".dvc").is_dir()) as repo:
            index = repo.index
            stages = [s for s in index.stages if isinstance(s, PipelineStage)]
            graph = index.graph  # DVC's edges point from a stage to the stages it depends on
            position = {s: i for i, s in enumerate(stages)}
            upstream_graph = graph.reverse(copy=True).subgraph(stages)
            order = nx.lexicographical_topological_sort(upstream_graph, key=position.get)
            dag = {}
            for stage in order:
                ups = sorted((u for u in graph.successors(stage) if u in position),
                             key=position.get)
                name = _address(stage, root)
                dag[name] = DagStage(
                    name=name, upstream=tuple(_address(u, root) for u in ups),
                    metrics=tuple(_relative(m.fs_path, root) for m in stage.metrics))
            return dag
    except DvcException as exc:
        raise ConfigError(f"{root / 'dvc.yaml'}: cannot read the DAG: {exc}") from None


def _address(stage, root: Path) -> str:
    """How `dvc repro` run in `root` names the stage: `name` for root's dvc.yaml, else
    `sub/dvc.yaml:name` (DVC's own `addressing` is relative to the current directory)."""
    file = Path(stage.path).resolve()
    return stage.name if file.parent == root else f"{_relative(str(file), root)}:{stage.name}"


def _relative(path: str, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return path


def stage_order(root: Path | str | None = None) -> list[str]:
    """Stage names of `root`'s DAG in dependency order (`dvc repro`'s order for the DAG)."""
    return list(load_dag(root))


def select_stages(dag: dict[str, DagStage], targets: Sequence[str] | None,
                  with_upstream: bool = False) -> list[str]:
    """The stages to run, in DAG order. None/empty = all. An unknown name is a ConfigError
    naming it. `with_upstream` adds every stage a target depends on (`dvc repro TARGET`)."""
    if not targets:
        return list(dag)
    unknown = [t for t in targets if t not in dag]
    if unknown:
        raise ConfigError(f"unknown stage(s) {', '.join(map(repr, unknown))} "
                          f"(dvc.yaml has: {', '.join(dag)})")
    chosen = set(targets)
    if with_upstream:
        todo = list(targets)
        while todo:
            for up in dag[todo.pop()].upstream:
                if up not in chosen:
                    chosen.add(up)
                    todo.append(up)
    return [name for name in dag if name in chosen]


# ----------------------------------------------------------------------------- one stage
_EXITED = re.compile(r"failed to run: .*, exited with (-?\d+)\s*$")
_LOCKED = ("Unable to acquire lock", "is busy, it is being blocked by")


def dvc_command(*args: str) -> list[str]:
    """This interpreter's DVC, whatever `dvc` PATH would find."""
    return [sys.executable, "-m", "dvc", *args]


def stage_env(pipeline_key: str | None) -> dict[str, str]:
    """The stage process's environment: the venv's bin first on PATH (dvc.yaml commands call
    `python`), the MLflow pipeline key, no progress bars in the log."""
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
    env.setdefault("RLVR_PROGRESS", "0")
    if pipeline_key:
        env.setdefault(PIPELINE_ENV, pipeline_key)
    return env


def killed_by_signal(status: int | None) -> int | None:
    """The signal that ended a stage, from the status DVC reports: -N when DVC's shell exec'd
    the command (bash with SHELL set), 128+N when a shell (e.g. dash as /bin/sh, used when SHELL
    is unset) ran it as a child and reported the death as its own exit status."""
    if status is None:
        return None
    if status < 0:
        return -status
    if 128 < status <= 128 + max(signal.valid_signals()):
        return status - 128
    return None


def run_streamed(stage: str, argv: list[str], root: Path, env: dict[str, str],
                 emit: Callable[[str], None]) -> list[str]:
    """Run `argv` in `root`, passing each output line (stdout and stderr, merged in order) to
    `emit` as it is printed; the lines. Non-zero exit -> StageFailed / InfrastructureFailure
    (module docstring)."""
    try:
        proc = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                text=True, errors="replace", bufsize=1)
    except OSError as exc:
        raise InfrastructureFailure(stage, f"cannot launch {argv[0]}: {exc}") from None
    lines = []
    with proc:
        for line in proc.stdout:
            line = line.rstrip("\n")
            lines.append(line)
            emit(line)
    code = proc.returncode
    if code == 0:
        return lines
    if code < 0:
        raise InfrastructureFailure(stage, f"dvc was killed by signal {-code}")
    status = None
    for line in reversed(lines):
        found = _EXITED.search(line)
        if found:
            status = int(found.group(1))
            break
    signal_number = killed_by_signal(status)
    if signal_number is not None:
        raise InfrastructureFailure(stage, f"the stage process was killed by signal {signal_number}")
    if any(marker in line for line in lines for marker in _LOCKED):
        raise InfrastructureFailure(stage, "another DVC process holds the repository lock")
    if status is None:  # DVC itself refused (bad dvc.yaml, missing dependency, ...)
        errors = [ln.strip() for ln in lines if ln.startswith("ERROR")]
        raise StageFailed(stage, code, f"dvc: {errors[-1] if errors else 'no error line'}")
    # The stage's last words, not DVC's ERROR line (which repeats the whole command).
    last = next((ln.strip() for ln in reversed(lines)
                 if ln.strip() and not ln.startswith("ERROR")), "")
    raise StageFailed(stage, status, last)


def retry_infrastructure_only(task_, task_run, state) -> bool:
    """Prefect `retry_condition_fn`: retry when the failure was InfrastructureFailure."""
    try:
        state.result()
    except InfrastructureFailure:
        return True
    except BaseException:  # noqa: BLE001 - any other failure is final
        return False
    return False


def read_metrics(path: Path) -> dict[str, Any] | None:
    """A DVC metrics file (json / yaml / toml), flattened to dotted keys; None if absent."""
    try:
        text = path.read_text()
    except OSError:
        return None
    if path.suffix == ".toml":
        data = tomllib.loads(text)
    elif path.suffix in (".yaml", ".yml"):
        data = yaml.safe_load(text)
    else:
        data = json.loads(text)
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            flat[prefix or path.stem] = value

    walk("", data)
    return flat


def metrics_markdown(stage: str, outcome: str, metrics: dict[str, dict | None],
                     mlflow_link: str | None) -> str:
    """The stage's Prefect artifact: outcome, one metrics table per file, the MLflow run."""
    parts = [f"## Stage `{stage}`", "", f"**Outcome:** {outcome}", ""]
    parts.append(f"**MLflow run:** [{mlflow_link}]({mlflow_link})" if mlflow_link
                 else "**MLflow run:** none found (tracking off, or the stage did not run)")
    for name, values in metrics.items():
        parts += ["", f"### `{name}`", ""]
        if values is None:
            parts.append("_not written_")
            continue
        parts += ["| metric | value |", "| --- | --- |"]
        items = list(values.items())
        for key, value in items[:MAX_METRIC_ROWS]:
            shown = f"{value:.6g}" if isinstance(value, float) else json.dumps(value)
            parts.append(f"| `{key}` | {shown.replace('|', '/')} |")
        if len(items) > MAX_METRIC_ROWS:
            parts.append(f"\n_{len(items) - MAX_METRIC_ROWS} more in {name}_")
    if not metrics:
        parts += ["", "_this stage declares no metrics file_"]
    return "\n".join(parts) + "\n"


def find_mlflow_run(stage: str, since_ms: int, root: Path) -> str | None:
    """Link to the newest MLflow run tagged `stage=<stage>` started since `since_ms` (the
    run rlvr/tracking opened for this execution), or None."""
    if os.environ.get("RLVR_TRACKING", "mlflow") == "off":
        return None
    uri = os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        db = root / uri[len("sqlite:///"):]
        if not db.is_file():
            return None
        uri = f"sqlite:///{db}"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    if not experiments:
        return None
    runs = client.search_runs(experiments, max_results=1, order_by=["attributes.start_time DESC"],
                              filter_string=f"tags.stage = '{stage}' and "
                                            f"attributes.start_time >= {since_ms}")
    if not runs:
        return None
    run = runs[0].info
    base = uri if uri.startswith(("http://", "https://")) else os.environ.get(
        MLFLOW_UI_ENV, DEFAULT_MLFLOW_UI)
    return f"{base.rstrip('/')}/#/experiments/{run.experiment_id}/runs/{run.run_id}"


def artifact_key(stage: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes."""
    return "stage-" + re.sub(r"[^a-z0-9-]+", "-", stage.lower()).strip("-")


def publish_stage_artifact(stage: DagStage, root: Path, outcome: str, since_ms: int) -> None:
    logger = get_run_logger()
    metrics = {}
    for rel in stage.metrics:
        try:
            metrics[rel] = read_metrics(root / rel)
        except (ValueError, yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
            logger.warning("%s: unreadable metrics file: %s", rel, exc)
            metrics[rel] = None
    try:
        link = find_mlflow_run(stage.name, since_ms, root)
    except Exception as exc:  # noqa: BLE001 - a link lookup must never fail the stage
        logger.warning("no MLflow link for stage %s: %s", stage.name, exc)
        link = None
    create_markdown_artifact(key=artifact_key(stage.name),
                             markdown=metrics_markdown(stage.name, outcome, metrics, link),
                             description=f"dvc stage {stage.name}: metrics and MLflow run")


@task(name="dvc-stage", task_run_name="stage:{stage}", retries=STAGE_RETRIES,
      retry_delay_seconds=STAGE_RETRY_DELAY_S, retry_condition_fn=retry_infrastructure_only,
      cache_policy=NO_CACHE)  # DVC, not Prefect's result cache, decides what is up to date
def run_stage(stage: str, root: str, pipeline_key: str | None = None,
              metrics: tuple[str, ...] = ()) -> str:
    """`dvc repro --single-item <stage>`: output streamed to the run log, a Markdown artifact
    with the stage's metrics and MLflow run; returns the stage name."""
    logger = get_run_logger()
    root_path = Path(root)
    info = DagStage(stage, (), tuple(metrics))
    since_ms = int(time.time() * 1000)
    argv = dvc_command("repro", "--single-item", stage)
    logger.info("$ %s", " ".join(argv))
    try:
        run_streamed(stage, argv, root_path, stage_env(pipeline_key), logger.info)
    except StageFailed as exc:
        publish_stage_artifact(info, root_path, f"failed, exit code {exc.exit_code}", since_ms)
        raise
    publish_stage_artifact(info, root_path, "succeeded (ran, or DVC found it up to date)",
                           since_ms)
    return stage


def apply_param_overrides(root: Path, overrides: Iterable[str]) -> dict[str, list[str]]:
    """`dvc exp run -S` overrides (`[FILE:]KEY=VALUE`, Hydra syntax; FILE defaults to
    params.yaml) written into the params files by DVC's own code for `-S`."""
    from dvc.exceptions import DvcException
    from dvc.utils.cli_parse import to_path_overrides
    from dvc.utils.hydra import apply_overrides

    by_file = to_path_overrides(list(overrides))
    for rel, items in by_file.items():
        path = root / rel
        if not path.is_file():
            raise ConfigError(f"{path}: params file of override(s) {items} not found")
        try:
            apply_overrides(str(path), items)
        except DvcException as exc:
            raise ConfigError(f"{path}: bad param override(s) {items}: {exc}") from None
    return by_file


@flow(name="rlvr-pipeline")
def rlvr_pipeline(targets: list[str] | None = None, set_params: list[str] | None = None,
                  root: str | None = None, with_upstream: bool = False,
                  experiment: str | None = None) -> list[str]:
    """Run dvc.yaml's stages (all, or `targets` in DAG order) as Prefect tasks.

    targets: stage names; a subset runs in DAG order, each after its upstream stages.
    set_params: `-S` overrides as `dvc exp run -S` takes them ("rollout.seed=1",
      "params.yaml:sft.lr=1e-4"). They are written into the params files (DVC's code for
      -S), the stages run, then the workspace is saved as a DVC experiment (`dvc exp save`,
      named `experiment` if given): together what `dvc exp run -S` does, one task per stage.
    root: the DVC repository (default: this checkout).
    with_upstream: also run every stage the targets depend on (`dvc repro TARGET`).
    Returns the stages run, in order.
    """
    logger = get_run_logger()
    root_path = _root_of(root)
    dag = load_dag(root_path)
    order = select_stages(dag, targets, with_upstream)
    key = os.environ.get(PIPELINE_ENV) or f"prefect:{current_flow_run.id}"
    if set_params:
        applied = apply_param_overrides(root_path, set_params)
        logger.info("param overrides applied: %s", applied)
    logger.info("stages: %s", " -> ".join(order))
    states: dict[str, Any] = {}
    for name in order:
        upstream = [states[u] for u in dag[name].upstream if u in states]
        state = run_stage(name, str(root_path), key, dag[name].metrics,
                          wait_for=upstream, return_state=True)
        states[name] = state
        state.result()  # the stage's own exception (StageFailed, ...) stops the run here
    if set_params:
        argv = dvc_command("exp", "save", "--force", *(["-n", experiment] if experiment else []),
                           *order)  # cache these stages' outs (all outs must exist otherwise)
        run_streamed("exp save", argv, root_path, stage_env(key), logger.info)
    return order


def nightly_deployment(name: str = NIGHTLY_NAME, cron: str = NIGHTLY_CRON,
                       parameters: dict[str, Any] | None = None):
    """The scheduled deployment `--serve` runs (a RunnerDeployment; `prefect.serve` it)."""
    return rlvr_pipeline.to_deployment(
        name=name, cron=cron,
        parameters=dict(NIGHTLY_PARAMETERS if parameters is None else parameters),
        description="dvc.yaml's DAG, one task per stage; see flows/pipeline.py",
        tags=["rlvr", "dvc"])


def _parse_args(argv: list[str] | None):
    import argparse

    p = argparse.ArgumentParser(prog="python -m flows.pipeline",
                                description="Run dvc.yaml's stages as a Prefect flow, or serve "
                                            "the scheduled deployment.")
    p.add_argument("stages", nargs="*", help="stage names (default: all), run in DAG order")
    p.add_argument("-S", "--set-param", action="append", default=[], metavar="[FILE:]KEY=VALUE",
                   help="param override as for `dvc exp run -S`; the run is saved as a DVC "
                        "experiment")
    p.add_argument("--name", help="the DVC experiment's name (with -S)")
    p.add_argument("--upstream", action="store_true",
                   help="also run every stage the named stages depend on")
    p.add_argument("--root", help="the DVC repository (default: this checkout)")
    p.add_argument("--serve", action="store_true",
                   help=f"serve the deployment '{NIGHTLY_NAME}' (cron '{NIGHTLY_CRON}') until "
                        "interrupted; needs a Prefect server (PREFECT_API_URL)")
    p.add_argument("--cron", default=NIGHTLY_CRON, help="the served deployment's schedule")
    return p.parse_args(argv)


@exit_on_error
def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    if args.serve:
        from prefect import serve

        serve(nightly_deployment(cron=args.cron))
        return
    select_stages(load_dag(args.root), args.stages)  # a bad name fails before a flow run starts
    rlvr_pipeline(targets=args.stages or None, set_params=args.set_param or None,
                  root=args.root, with_upstream=args.upstream, experiment=args.name)


if __name__ == "__main__":
    main()
