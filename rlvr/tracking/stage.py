"""One tracked stage run: params, input/output hashes, metrics -> MLflow and a DVC metrics file.

Every stage opens a `StageRun`; it is how a metric traces back to the exact params, code and
input artifacts (by DVC content hash) that made it (SPEC §9). The MLflow run opens when the
stage body starts and ends with it: FINISHED when the body returns, FAILED when it raises
(or exits non-zero), KILLED on Ctrl-C or SIGTERM; it nests under the pipeline run's parent
(`rlvr.tracking.pipeline`, env `RLVR_PIPELINE_RUN`). MLflow gets every metric; the DVC
metrics file the stage's headline numbers when a details file takes the rest. What it holds:

* run name and tag `stage`: the DVC stage name (`DVC_STAGE`, which `dvc repro` sets: the
  `selfcheck` stage runs `stages.verify --selfcheck`), else the name the stage passes;
* params named as in params.yaml: each of the stage's `sections` read from the params file,
  nested keys dotted (`synthesize.per_operator`, `sandbox.limits.wall_seconds`), so a
  `dvc exp run -S synthesize.per_operator=10` shows under that very name;
* datasets (`log_inputs`) for every input and output path, files and directories, named by
  their path and digested by DVC's md5 (`lineage.dvc_md5`, equal to `dvc.lock`), context
  `input` / `output`; the same digests as tags `input.<name>.md5`, `output.<name>.md5`;
* tags: git commit, `git_dirty` (tracked sources differ from HEAD; `dvc.lock` and DVC outs,
  which `dvc repro` deletes or rewrites, do not count: `lineage.git_dirty`), the md5 of `dvc.lock` when
  the stage started, the DVC experiment name and baseline under `dvc exp run`, the pipeline
  key; every string metric (`policy_version`, `verifier_version`, `stop_reason`, ...) as a
  tag of its dotted name (MLflow metrics are numbers);
* numeric metrics (nested dicts dotted), per-step metrics with their `step` (sent in
  batches through `MlflowClient.log_batch` while the stage runs), small artifacts.

MLflow stays optional: `RLVR_TRACKING=off` skips it (the metrics file is still written,
only when the body succeeds). Where the runs live: `rlvr.tracking.store`.
"""
from __future__ import annotations

import json
import logging
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from rlvr.artifacts.io import write_json
from rlvr.config import as_dict
from rlvr.tracking import lineage
from rlvr.tracking.headline import headline
from rlvr.tracking.pipeline import PIPELINE_TAG, open_parent, pipeline_key
from rlvr.tracking.store import EXPERIMENT, tracking_enabled, tracking_uri

MAX_ARTIFACT_BYTES = 8 << 20
STEP_FLUSH_METRICS = 1000   # MLflow's metrics-per-batch limit
STEP_FLUSH_SECONDS = 10.0   # a live curve in the UI without one call per step


@dataclass
class StageRun:
    stage: str
    metrics_path: Path
    metrics: dict[str, Any] = field(default_factory=dict)
    # where every metric goes when the metrics file holds the headline only (headline.py)
    details_path: Path | None = None
    artifacts: list[Path] = field(default_factory=list)
    # (step, {name: value}) in order: curves (loss, lr, eval numbers) logged with `step`
    steps: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    outputs: dict[str, Path] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    run_id: str | None = None        # the MLflow run (None when tracking is off)
    parent_run_id: str | None = None
    _tracker: "_Tracker | None" = field(default=None, repr=False)

    def log_metrics(self, values: dict[str, Any]) -> None:
        self.metrics.update(values)

    def log_step(self, step: int, values: dict[str, Any]) -> None:
        """Per-step numbers (a training loop's `log` callback): MLflow gets them with `step`."""
        numbers, _ = split_values(values)
        self.steps.append((int(step), numbers))
        if self._tracker is not None:
            self._tracker.add_step(int(step), numbers)

    def log_artifact(self, path: Path | str) -> None:
        self.artifacts.append(Path(path))

    def log_tags(self, values: Mapping[str, str]) -> None:
        """Strings the run is known by (versions, a reason) that are not part of the
        metrics file: MLflow tags."""
        self.tags.update({k: str(v) for k, v in values.items()})

    def log_output(self, name: str, path: Path | str) -> None:
        """An output known only once the body ran; hashed when the stage ends."""
        self.outputs[name] = Path(path)


def split_values(values: Mapping[str, Any], prefix: str = "") -> tuple[dict[str, float],
                                                                       dict[str, str]]:
    """Nested metrics -> (dotted numeric values, dotted string values); bools count as
    numbers, lists and None are left out (no scalar to plot or compare)."""
    numbers: dict[str, float] = {}
    strings: dict[str, str] = {}
    for k, v in values.items():
        key = f"{prefix}{k}"
        if isinstance(v, (bool, int, float)):
            numbers[key] = float(v)
        elif isinstance(v, str):
            strings[key] = v
        elif isinstance(v, Mapping):
            n, s = split_values(v, f"{key}.")
            numbers.update(n)
            strings.update(s)
    return numbers, strings


def _numeric(values: dict[str, Any]) -> dict[str, float]:
    return split_values(values)[0]


def params_from_file(path: Path | str, sections: Sequence[str]) -> dict[str, str]:
    """The `sections` of a params.yaml as `section.key[.sub]` -> value text (lists and
    empty mappings as JSON), as DVC names them in `dvc params diff` and `-S`."""
    import yaml

    data = yaml.safe_load(Path(path).read_text()) or {}
    out: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping) and value:
            for k, v in value.items():
                walk(f"{prefix}.{k}", v)
        elif isinstance(value, str):
            out[prefix] = value
        else:
            out[prefix] = json.dumps(value)

    for section in sections:
        if section in data:
            walk(section, data[section])
    return out


@contextmanager
def stage_run(stage: str, params: Any = None, *, sections: Sequence[str] = (),
              params_file: Path | str = "params.yaml",
              inputs: Mapping[str, Path | str | None] | None = None,
              outputs: Mapping[str, Path | str | None] | None = None,
              metrics_path: Path | str,
              details_path: Path | str | None = None) -> Iterator[StageRun]:
    """Track one stage. Metrics are written (atomically) only if the stage body succeeds:
    all of them to `metrics_path`, or with `details_path` all of them there and the stage's
    headline numbers (`headline.HEADLINES`) to `metrics_path`, the file DVC displays.

    `sections`: the params.yaml sections the stage depends on (its dvc.yaml `params:`),
    logged from `params_file` under their params.yaml names; without them (or without the
    file: a library caller) `params` (a params dataclass) is logged flat. `inputs` / `outputs`: name -> path (file or
    directory; None entries are skipped), hashed when the stage starts / ends."""
    name = os.environ.get(lineage.DVC_STAGE_ENV) or stage
    run = StageRun(stage=name, metrics_path=Path(metrics_path),
                   details_path=Path(details_path) if details_path is not None else None,
                   outputs={k: Path(v) for k, v in (outputs or {}).items() if v is not None})
    tracker = None
    if tracking_enabled():
        logged = (params_from_file(params_file, sections)
                  if sections and Path(params_file).is_file()
                  else {k: str(v) for k, v in as_dict(params).items()} if params is not None
                  else {})
        tracker = _Tracker.open(name, logged, {k: Path(v) for k, v in (inputs or {}).items()
                                               if v is not None})
        run._tracker, run.run_id, run.parent_run_id = tracker, tracker.run_id, tracker.parent_id
    restore = _terminate_as_exit() if tracker is not None else None
    try:
        yield run
        if run.details_path is not None:
            write_json(run.details_path, run.metrics)
            write_json(run.metrics_path, headline(run.stage, run.metrics))
        else:
            write_json(run.metrics_path, run.metrics)
    except BaseException as exc:
        if tracker is not None:
            tracker.close(run, _status(exc), error=exc)
        raise
    finally:
        if restore is not None:
            restore()
    if tracker is not None:
        tracker.close(run, "FINISHED")


class Terminated(SystemExit):
    """SIGTERM while a tracked stage ran (a scheduler cancelling it): exit status 143."""


def _terminate_as_exit():
    """While the stage runs, SIGTERM (default action: die without a trace) raises
    `Terminated`, so the run is ended KILLED instead of left RUNNING; returns the undo.
    Only from the main thread and only over the default handler (never someone else's)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return None

    def handler(signum, frame):
        raise Terminated(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    return lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _status(exc: BaseException) -> str:
    if isinstance(exc, (KeyboardInterrupt, Terminated)):
        return "KILLED"
    if isinstance(exc, SystemExit):
        return "FINISHED" if exc.code in (0, None) else "FAILED"
    return "FAILED"


def _chunks(items: list, n: int) -> Iterator[list]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


class _Tracker:
    """The open MLflow run of one stage (and its parent's status)."""

    def __init__(self, client, run_id: str, parent_id: str | None, root: Path):
        self.client, self.run_id, self.parent_id, self.root = client, run_id, parent_id, root
        self._pending: list = []
        self._last_flush = time.monotonic()

    @classmethod
    def open(cls, stage: str, params: dict[str, str], inputs: dict[str, Path]) -> "_Tracker":
        logging.getLogger("alembic").setLevel(logging.WARNING)
        from mlflow import MlflowClient
        from mlflow.entities import Param, RunTag
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

        client = MlflowClient(tracking_uri())
        experiment_id = _experiment_id(client)
        root = lineage.repo_root()
        context = context_tags(root)
        key = pipeline_key()
        parent_id = None
        tags = {"stage": stage, **context}
        if key is not None:
            parent_id = open_parent(client, experiment_id, key, context)
            tags.update({PIPELINE_TAG: key.key, "mlflow.parentRunId": parent_id})
        created = client.create_run(experiment_id, run_name=stage, tags=tags)
        self = cls(client, created.info.run_id, parent_id, root)
        items = [Param(k, v[:MAX_PARAM_VAL_LENGTH]) for k, v in sorted(params.items())]
        for chunk in _chunks(items, MAX_PARAMS_TAGS_PER_BATCH):
            client.log_batch(self.run_id, params=chunk)
        hashed, missing = self._datasets(inputs, "input")
        client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in hashed.items()])
        if missing:
            client.set_tag(self.run_id, "input.missing", ",".join(missing))
        return self

    def add_step(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._pending.extend(Metric(k, v, now, step) for k, v in values.items())
        if (len(self._pending) >= STEP_FLUSH_METRICS
                or time.monotonic() - self._last_flush >= STEP_FLUSH_SECONDS):
            self.flush_steps()

    def flush_steps(self) -> None:
        from mlflow.utils.validation import MAX_METRICS_PER_BATCH

        pending, self._pending = self._pending, []
        for chunk in _chunks(pending, MAX_METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=chunk)
        self._last_flush = time.monotonic()

    def _datasets(self, paths: dict[str, Path], context: str) -> tuple[dict[str, str],
                                                                       list[str]]:
        """log_inputs one dataset per existing path; (tag -> md5, names of missing paths)."""
        from mlflow.data.meta_dataset import MetaDataset
        from mlflow.entities import DatasetInput, InputTag

        # lazy: subclasses MLflow's DatasetSource (1-2 s to import; RLVR_TRACKING=off skips it)
        from rlvr.tracking.datasets import PathDatasetSource

        inputs, tags, missing = [], {}, []
        for name, path in sorted(paths.items()):
            if not path.exists():
                missing.append(name)
                continue
            digest = lineage.dvc_md5(path, self.root)
            shown = _shown(path, self.root)
            dataset = MetaDataset(PathDatasetSource(shown), name=shown, digest=digest)
            inputs.append(DatasetInput(dataset._to_mlflow_entity(), tags=[
                InputTag("mlflow.data.context", context), InputTag("rlvr.role", name)]))
            tags[f"{context}.{name}.md5"] = digest
        if inputs:
            self.client.log_inputs(self.run_id, datasets=inputs)
        return tags, missing

    def close(self, run: StageRun, status: str, error: BaseException | None = None) -> None:
        """Log what the stage produced and end the run (and the parent's current status).
        On a failure the original exception must surface: a logging error is only warned."""
        try:
            self._close(run, status, error)
        except Exception as exc:  # noqa: BLE001
            if error is None:
                raise
            logging.getLogger(__name__).warning("MLflow: could not record the failed run "
                                                "%s: %s", self.run_id, exc)

    def _close(self, run: StageRun, status: str, error: BaseException | None) -> None:
        from mlflow.entities import Metric, RunTag
        from mlflow.utils.validation import MAX_METRICS_PER_BATCH, MAX_TAG_VAL_LENGTH

        self.flush_steps()
        numbers, strings = split_values(run.metrics)
        now = int(time.time() * 1000)
        for chunk in _chunks([Metric(k, v, now, 0) for k, v in numbers.items()],
                             MAX_METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=chunk)
        tags = {k: v[:MAX_TAG_VAL_LENGTH] for k, v in {**strings, **run.tags}.items()}
        if status == "FINISHED":
            hashed, missing = self._datasets(run.outputs, "output")
            tags.update(hashed)
            if missing:
                tags["output.missing"] = ",".join(missing)
            for path in run.artifacts:
                if path.is_file() and path.stat().st_size < MAX_ARTIFACT_BYTES:
                    self.client.log_artifact(self.run_id, str(path))
        if error is not None:
            text = f"{type(error).__name__}: {error}".strip()
            if isinstance(error, SystemExit):
                text = f"exit status {error.code}"
            tags["error"] = text.splitlines()[0][:MAX_TAG_VAL_LENGTH] if text else "error"
        for chunk in _chunks([RunTag(k, v) for k, v in sorted(tags.items())], 100):
            self.client.log_batch(self.run_id, tags=chunk)
        self.client.set_terminated(self.run_id, status)
        if self.parent_id is not None:
            self.client.set_terminated(self.parent_id, status)


def _shown(path: Path, root: Path) -> str:
    resolved = path.resolve()
    return resolved.relative_to(root).as_posix() if resolved.is_relative_to(root) \
        else str(resolved)


def _experiment_id(client) -> str:
    exp = client.get_experiment_by_name(EXPERIMENT)
    if exp is not None:
        return exp.experiment_id
    try:
        return client.create_experiment(EXPERIMENT)
    except Exception:  # noqa: BLE001  (another stage created it meanwhile)
        exp = client.get_experiment_by_name(EXPERIMENT)
        if exp is None:
            raise
        return exp.experiment_id


def context_tags(root: Path) -> dict[str, str]:
    """Code and DAG state of a run: git commit, dirty flag, dvc.lock md5, DVC experiment."""
    tags = {"git_commit": lineage.git_commit(root)}
    dirty = lineage.git_dirty(root)
    if dirty is not None:
        tags["git_dirty"] = str(dirty).lower()
    lock = lineage.file_md5(root / "dvc.lock")
    if lock is not None:
        tags["dvc_lock_md5"] = lock
    exp = lineage.dvc_experiment()
    if exp is not None:
        tags["dvc_exp_name"], tags["dvc_exp_baseline_rev"] = exp
    return tags
