"""Demonstration selection for rejection-sampling SFT (SPEC §6): verified, clean, distinct.

`select_demonstrations(rows, params) -> Selection(train, val, drops)` takes scored rollout
passports (`schemas.TRAJECTORIES` rows as dicts, with `reward_outcome` filled by verify; an
optional `verdict_reason` column) and keeps a rollout only if

1. nothing hit an infrastructure error (rollout `infra_error`, stop reason `infra_error`, or
   verdict reason `infra_error`) — an infra error is never a task outcome, so it is neither
   a demonstration nor a failure;
2. it is a verified success (`reward_outcome == 1.0`);
3. it ended by `submit` (stop reason `submitted`);
4. the collector did not truncate it;
5. every tool call was valid (`n_invalid_actions == 0` and every turn `action_valid`);
6. it fits `sft.max_seq_len` tokens (a transcript is never cut to fit);

then drops token-identical duplicates (sha256 of the token ids; the first in a seeded order is
kept) and caps each task at `sft.demos.max_per_task` (a seeded choice). Every dropped rollout
gets exactly one row in `drops` with the reason of the first rule it broke
(`schemas.SFT_DROP_REASONS`) and a detail. Finally whole tasks are held out for validation
(`sft.demos.val_fraction`, seeded), so the validation loss measures transfer to unseen tasks
rather than to sibling samples of a trained task.

The result is deterministic in (rows as a set, params): order of input rows does not matter.
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from rlvr.artifacts import schemas
from rlvr.artifacts.io import read_table, write_table
from rlvr.train.sft_config import SFTParams


@dataclass
class Selection:
    train: list[dict[str, Any]]   # schemas.SFT_DATA rows, part == "train"
    val: list[dict[str, Any]]     # part == "val"
    drops: list[dict[str, Any]]   # schemas.SFT_DROPS rows

    def summary(self) -> dict[str, Any]:
        """Counts for metrics: kept per part, drops per reason, tasks covered."""
        reasons = {r: 0 for r in schemas.SFT_DROP_REASONS}
        for d in self.drops:
            reasons[d["reason"]] += 1
        kept = self.train + self.val
        seen = {d["task_id"] for d in self.drops} | {r["task_id"] for r in kept}
        return {
            "rollouts": len(kept) + len(self.drops),
            "kept": len(kept), "train": len(self.train), "val": len(self.val),
            "train_tokens": sum(r["n_tokens"] for r in self.train),
            "train_trainable_tokens": sum(r["n_trainable_tokens"] for r in self.train),
            "tasks_seen": len(seen),
            "tasks_with_demos": len({r["task_id"] for r in kept}),
            "tasks_train": len({r["task_id"] for r in self.train}),
            "tasks_val": len({r["task_id"] for r in self.val}),
            **{f"dropped_{r}": n for r, n in reasons.items()},
        }


def token_hash(token_ids: Sequence[int]) -> str:
    """The dedup key: sha256 of the token ids as little-endian int32."""
    return hashlib.sha256(np.asarray(token_ids, dtype="<i4").tobytes()).hexdigest()


def drop_reason(row: dict[str, Any], max_seq_len: int) -> tuple[str, str] | None:
    """(reason, detail) of the first rule (module docstring, 1-6) that `row` breaks, or None."""
    stop = row.get("stop_reason")
    verdict = row.get("verdict_reason")
    if row.get("infra_error") or stop == "infra_error" or verdict == "infra_error":
        where = ("rollout" if row.get("infra_error") or stop == "infra_error" else "verification")
        return "infra_error", f"{where}: {row.get('stop_detail') or verdict or stop}"
    outcome = row.get("reward_outcome")
    if outcome is None or float(outcome) != 1.0:
        return "not_verified", (f"reward_outcome={outcome!r}"
                                + (f", verdict {verdict}" if verdict else ""))
    if stop != "submitted":
        return "not_submitted", f"stop_reason={stop}"
    if row.get("truncated"):
        return "truncated", f"truncation_source={row.get('truncation_source')}"
    bad_turns = [t.get("turn") for t in row.get("turns") or [] if not t.get("action_valid")]
    n_invalid = int(row.get("n_invalid_actions") or 0)
    if n_invalid or bad_turns:
        return "invalid_action", f"n_invalid_actions={n_invalid}, invalid turns {bad_turns}"
    n = len(row["token_ids"])
    if n > max_seq_len:
        return "too_long", f"{n} tokens > max_seq_len {max_seq_len}"
    return None


def _order_key(seed: int, row: dict[str, Any]) -> str:
    return hashlib.sha256(f"{seed}:{row['trajectory_id']}".encode()).hexdigest()


def _drop(row: dict[str, Any], reason: str, detail: str, thash: str = "") -> dict[str, Any]:
    return {"trajectory_id": row["trajectory_id"], "task_id": row["task_id"],
            "family": row.get("family") or "", "reason": reason, "detail": detail,
            "token_hash": thash}


def demo_row(row: dict[str, Any], thash: str) -> dict[str, Any]:
    mask = [int(m) for m in row["loss_mask"]]
    return {"trajectory_id": row["trajectory_id"], "task_id": row["task_id"],
            "family": row.get("family") or "", "part": "train",
            "token_ids": [int(t) for t in row["token_ids"]], "loss_mask": mask,
            "n_tokens": len(mask), "n_trainable_tokens": sum(mask), "token_hash": thash,
            "engine": row.get("engine") or "", "policy_version": row.get("policy_version") or ""}


def select_demonstrations(rows: Iterable[dict[str, Any]], params: SFTParams) -> Selection:
    """Scored rollout passports -> kept train/val demonstrations and the drop log."""
    seed, cap = params.seed, params.demos.max_per_task
    ordered = sorted(rows, key=lambda r: _order_key(seed, r))  # input order never matters
    drops: list[dict[str, Any]] = []
    clean: list[dict[str, Any]] = []
    for row in ordered:
        why = drop_reason(row, params.max_seq_len)
        if why is None:
            clean.append(row)
        else:
            drops.append(_drop(row, *why))
    kept_by_hash: dict[str, str] = {}
    per_task: dict[str, list[dict[str, Any]]] = {}
    for row in clean:
        h = token_hash(row["token_ids"])
        if h in kept_by_hash:
            drops.append(_drop(row, "duplicate", f"same token ids as {kept_by_hash[h]}", h))
            continue
        kept_by_hash[h] = row["trajectory_id"]
        task = per_task.setdefault(row["task_id"], [])
        if cap and len(task) >= cap:
            drops.append(_drop(row, "over_cap", f"task already has {cap} demonstrations", h))
            continue
        task.append(demo_row(row, h))
    tasks = sorted(per_task)
    random.Random(seed).shuffle(tasks)
    n_val = int(round(params.demos.val_fraction * len(tasks)))
    if params.demos.val_fraction > 0 and len(tasks) >= 2:
        n_val = min(max(n_val, 1), len(tasks) - 1)  # both parts non-empty
    else:
        n_val = 0
    val_tasks = set(tasks[:n_val])
    train, val = [], []
    for task_id in sorted(per_task):
        for demo in per_task[task_id]:
            if task_id in val_tasks:
                demo["part"] = "val"
                val.append(demo)
            else:
                train.append(demo)
    drops.sort(key=lambda d: (d["task_id"], d["trajectory_id"]))
    return Selection(train=train, val=val, drops=drops)


def data_hash(demos: Iterable[dict[str, Any]]) -> str:
    """Content hash of a set of demonstrations (part, token ids and loss mask of each),
    independent of their order: the `data hash` of the SFT model card."""
    items = sorted(
        f"{d['part']}:{d['token_hash']}:"
        + hashlib.sha256(np.asarray(d["loss_mask"], dtype="i1").tobytes()).hexdigest()
        for d in demos)
    return "sha256:" + hashlib.sha256(json.dumps(items).encode()).hexdigest()[:16]


def write_selection(selection: Selection, data_path: Path | str, drops_path: Path | str) -> None:
    """Both Parquet artifacts, each checked against its data contract before the rename."""
    write_table(data_path, selection.train + selection.val, schemas.SFT_DATA, "sft_data")
    write_table(drops_path, selection.drops, schemas.SFT_DROPS, "sft_drops")


def read_demonstrations(path: Path | str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """An `sft_data` artifact -> (train rows, val rows)."""
    rows = read_table(path, schemas.SFT_DATA, "sft_data").to_pylist()
    return [r for r in rows if r["part"] == "train"], [r for r in rows if r["part"] == "val"]
