"""Fixed, seeded evaluation sets per tier (SPEC §8), the same for every checkpoint.

A tier is a split of the task pool (`rlvr.tasks.splits`): `train` (a sample of training
tasks), `heldout_function` (held-out tasks of training families), `heldout` (held-out
families), `regression`. Within a tier, tasks are ranked by a hash of (seed, tier, task_id)
and the first `tasks_per_tier.<tier>` are taken, so the set depends only on which tasks exist
— not on file order or on the other tiers — and adding tasks to the pool moves a task into
the set only if it outranks one already there.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Iterable, Sequence

from rlvr.artifacts.schemas import EVAL_TIERS
from rlvr.evaluate.params import TierSizes
from rlvr.tasks.model import Task

_SET_VERSION = "rlvr.evalset/1"


@dataclass(frozen=True)
class EvalSet:
    """One tier's tasks, sorted by task_id."""

    tier: str
    tasks: tuple[Task, ...]

    @property
    def task_ids(self) -> tuple[str, ...]:
        return tuple(t.task_id for t in self.tasks)


def _rank(seed: int, tier: str, task_id: str) -> str:
    return hashlib.sha256(json.dumps([_SET_VERSION, seed, tier, task_id]).encode()).hexdigest()


def build_sets(tasks: Iterable[Task], sizes: TierSizes, seed: int) -> list[EvalSet]:
    """Every tier with at least one task, nearest tier first. A task id that occurs twice
    (e.g. in two pool files) is a ValueError: a set must not weigh one task double."""
    by_tier: dict[str, dict[str, Task]] = {tier: {} for tier in EVAL_TIERS}
    for t in tasks:
        if t.split not in by_tier:
            continue  # a split that is no evaluation tier (none today)
        if any(t.task_id in pool for pool in by_tier.values()):
            raise ValueError(f"task '{t.task_id}' appears twice in the evaluation pool")
        by_tier[t.split][t.task_id] = t
    out = []
    for tier in EVAL_TIERS:
        pool = by_tier[tier]
        ranked = sorted(pool, key=lambda tid: _rank(seed, tier, tid))
        n = sizes.get(tier)
        chosen = sorted(ranked[:n] if n else ranked)
        if chosen:
            out.append(EvalSet(tier, tuple(pool[tid] for tid in chosen)))
    return out


def tier_of(sets: Sequence[EvalSet]) -> dict[str, str]:
    """task_id -> tier."""
    return {t.task_id: s.tier for s in sets for t in s.tasks}


def manifest(sets: Sequence[EvalSet]) -> list[dict]:
    """One row per evaluated task (tier, task_id, family, content hash): what every
    checkpoint is evaluated on, for the record."""
    return [{"tier": s.tier, "task_id": t.task_id, "family": t.family,
             "content_hash": t.hashes()["content_hash"]} for s in sets for t in s.tasks]


def fingerprint(sets: Sequence[EvalSet]) -> str:
    """Hash of the manifest: two evaluations with the same fingerprint ran the same tasks."""
    return hashlib.sha256(json.dumps(manifest(sets), sort_keys=True).encode()).hexdigest()[:16]
