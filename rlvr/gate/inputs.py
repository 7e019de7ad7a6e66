"""What the gate reads, checked before any rule runs (SPEC §8 inputs).

* `select_side(rows, name, where)` — one checkpoint's eval rows out of an `eval.parquet`
  (a missing checkpoint is a `GateInputError` naming the file and the checkpoints it has);
* `check_comparable(candidate, champion, tiers)` — both sides were evaluated on the same
  tasks with the same sample seeds in every tier (and hold the gated tiers): the rules are
  paired comparisons, so anything else is refused, never silently intersected;
* `checkpoint_hash(rows, model_dir, side)` — the content hash of the exact checkpoint the
  rows evaluated (its `policy_version`), checked against the directory as it is now;
* `read_training_metrics(path)` — the candidate's training metrics as `TrainingMetrics`
  (curves and trainer-raised flags), from an SFT model card, an SFT metrics file, or any
  trainer's `{"curves": [...], "flags": {...}}`.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from rlvr.engines.model_dir import weights_fingerprint
from rlvr.errors import RlvrError


class GateInputError(RlvrError):
    """The gate's inputs cannot be compared (different tasks or seeds, a missing checkpoint,
    a checkpoint that changed since it was evaluated, an unreadable training-metrics file)."""


def select_side(rows: Sequence[Mapping[str, Any]], name: str, where: str) -> list[dict]:
    """The rows of checkpoint `name` in the evaluation `where` (a file name, for errors)."""
    mine = [dict(r) for r in rows if r["checkpoint"] == name]
    if not mine:
        have = sorted({r["checkpoint"] for r in rows})
        raise GateInputError(f"{where}: no evaluation of checkpoint {name!r} "
                             f"(it holds {have or 'no rows'})")
    return mine


def _keys(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, set]]:
    """tier -> run -> {(task_id, seed)}."""
    out: dict[str, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    for r in rows:
        out[r["tier"]][r["run"]].add((r["task_id"], int(r["seed"])))
    return out


def check_comparable(candidate: Sequence[Mapping[str, Any]],
                     champion: Sequence[Mapping[str, Any]], tiers: Sequence[str]) -> None:
    """Refuse evaluations that are not paired: per tier, every run of both sides must hold
    the identical task set and, per task, the identical sample seeds; both must hold every
    gated tier (`tiers`) and the same tiers overall."""
    ka, kb = _keys(candidate), _keys(champion)
    if set(ka) != set(kb):
        raise GateInputError(f"candidate and champion were evaluated on different tiers: "
                             f"{sorted(ka)} vs {sorted(kb)}")
    for tier in tiers:
        if tier not in ka:
            raise GateInputError(f"tier {tier!r} (gated) is in neither evaluation "
                                 f"(they hold {sorted(ka)})")
    for tier in sorted(ka):
        sets = [("candidate", run, s) for run, s in sorted(ka[tier].items())] + \
               [("champion", run, s) for run, s in sorted(kb[tier].items())]
        side0, run0, ref = sets[0]
        ref_tasks = {t for t, _ in ref}
        for side, run, keys in sets[1:]:
            if keys == ref:
                continue
            tasks = {t for t, _ in keys}
            who = f"{side} (run {run!r}) vs {side0} (run {run0!r})"
            if tasks != ref_tasks:
                diff = sorted(tasks ^ ref_tasks)
                raise GateInputError(f"tier {tier!r}: {who} were evaluated on different task "
                                     f"sets ({len(diff)} task(s) in one only, e.g. {diff[0]!r})")
            diff = sorted(keys ^ ref)
            raise GateInputError(f"tier {tier!r}: {who} used different sample seeds "
                                 f"(e.g. task {diff[0][0]!r} seed {diff[0][1]})")


def policy_versions(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    return sorted({r["policy_version"] for r in rows})


def policy_steps(rows: Sequence[Mapping[str, Any]]) -> list[int]:
    return sorted({int(r["policy_step"]) for r in rows if r.get("policy_step") is not None})


def checkpoint_hash(rows: Sequence[Mapping[str, Any]], model_dir: Path | str | None,
                    side: str) -> str:
    """The content hash of the checkpoint `rows` evaluated.

    The evaluation records its `policy_version` (by default the weights fingerprint of the
    directory, `rlvr.engines.model_dir.weights_fingerprint`). With `model_dir`, the directory
    is hashed now and must match (a checkpoint rewritten after its evaluation is not the one
    the evidence is about); a custom, non-hash policy version cannot be checked and the
    directory's hash is used. Several policy versions under one checkpoint name (pooled
    training seeds) have no single hash: joined with "," without a directory (the gate can
    compare them, the registry will not register them), refused with one."""
    versions = policy_versions(rows)
    if model_dir is None or str(model_dir) == "":
        # pooled training runs of one recipe: comparable, but no single checkpoint (the
        # registry refuses to register a joined hash)
        return ",".join(versions)
    now = weights_fingerprint(model_dir)
    hashed = [v for v in versions if v.startswith("sha256:")]
    if len(versions) != 1:
        raise GateInputError(f"{side}: {len(versions)} policy versions in its evaluation "
                             f"({versions}) but one directory {model_dir}")
    if hashed and hashed[0] != now:
        raise GateInputError(f"{side}: {model_dir} hashes to {now} but its evaluation is of "
                             f"{hashed[0]} (the directory changed since it was evaluated)")
    return now


# ---- training metrics ------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainingMetrics:
    """The candidate trainer's record: `curves` [{step, name: value}] in step order, the
    pathology `flags` it raised itself (None: it records no flags), where it came from."""

    source: str
    curves: tuple[dict[str, float], ...] = ()
    flags: dict[str, bool] | None = None

    def series(self, key: str) -> list[tuple[int, float]]:
        """(step, value) of curve `key`, in step order, non-finite values left out."""
        out = []
        for rec in self.curves:
            v = rec.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                out.append((int(rec.get("step", len(out))), float(v)))
        return sorted(out)

    def keys(self) -> list[str]:
        return sorted({k for rec in self.curves for k in rec if k != "step"})


def _flags(obj: Any, where: str) -> dict[str, bool] | None:
    if obj is None:
        return None
    if isinstance(obj, list) and all(isinstance(x, str) for x in obj):
        return {x: True for x in obj}
    if isinstance(obj, dict) and all(isinstance(v, bool) for v in obj.values()):
        return {str(k): v for k, v in obj.items()}
    raise GateInputError(f"{where}: `flags` must be a list of names or a name -> true/false "
                         "mapping")


def parse_training_metrics(data: Any, where: str) -> TrainingMetrics:
    """Curves and flags out of one of the known layouts:

    * any trainer: `{"curves": [{step, ...}], "flags": {name: bool} | [names]}`;
    * the SFT model card (`training.json`): `metrics.evals` (one record per evaluation);
    * the SFT stage's details (`reports/stages/sft.json`): `final_eval` (the last evaluation only)."""
    if not isinstance(data, dict):
        raise GateInputError(f"{where}: training metrics must be a JSON object")
    metrics = data.get("metrics") if isinstance(data.get("metrics"), dict) else {}
    curves = data.get("curves")
    if curves is None:
        curves = metrics.get("evals")
    if curves is None and isinstance(data.get("final_eval"), dict):
        final = dict(data["final_eval"])
        final.setdefault("step", data.get("steps", 0))
        curves = [final]
    if curves is None:
        curves = []
    if not isinstance(curves, list) or not all(isinstance(c, dict) for c in curves):
        raise GateInputError(f"{where}: curves must be a list of {{step, name: value}} records")
    flags = _flags(data.get("flags", metrics.get("flags")), where)
    return TrainingMetrics(where, tuple(sorted((dict(c) for c in curves),
                                               key=lambda c: c.get("step", 0))), flags)


def read_training_metrics(path: Path | str | None) -> TrainingMetrics | None:
    """`parse_training_metrics` of a JSON file; None for no path."""
    if path is None or str(path) == "":
        return None
    path = Path(path)
    if path.is_dir():
        path = path / "training.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise GateInputError(f"{path}: training metrics not found") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise GateInputError(f"{path}: not readable JSON: {exc}") from None
    return parse_training_metrics(data, str(path))
