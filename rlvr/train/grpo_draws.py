"""GRPO's dynamic sampling (SPEC §7): a draw selects tasks, rolls them out and has their diffs
verified (`make_draw`); each group it yields is admitted or dropped with a status (`admit`,
the statuses in `STATUSES`), and draws repeat until a step's batch is full or the draw cap is
hit (`collect_groups`; with several ranks rank 0 draws and the others receive the result,
`share_groups`)."""
from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from rlvr.agent.passport import apply_verdicts, needs_verdict
from rlvr.agent.rollout import RolloutParams, patch_rows, roll_out
from rlvr.sandbox.params import SandboxParams
from rlvr.tasks.model import Task
from rlvr.train.curriculum import Curriculum
from rlvr.train.grpo_config import GRPOParams
from rlvr.train.grpo_state import LoopState, versions_behind

Verifier = Callable[[Sequence[Task], list[dict]], list[dict]]
# Every status a drawn group can get (`admit`), in the order the dashboard and ledger list them.
STATUSES = ("accepted", "identical_rewards", "stale", "infra_error", "surplus")


@dataclass
class Draw:
    """One draw: the tasks the curriculum chose, their G rollouts each, verified and scored."""

    index: int                        # global draw number = the rollouts' sampling round
    chosen: list[str]
    bands: dict[str, str]             # task -> band when it was chosen
    p_before: dict[str, float | None]  # task -> p̂ when it was chosen
    rows: list[dict]                  # scored passports, group then sample order
    timing: dict[str, float]


def make_draw(index: int, *, curriculum: Curriculum, by_id: Mapping[str, Task], engine,
              rp: RolloutParams, sandbox_params: SandboxParams, sandbox, verifier: Verifier,
              params: GRPOParams, parts_root: Path, lock: threading.Lock | None = None,
              roll: Callable[..., list[dict]] = roll_out) -> Draw:
    """Select `tasks_per_draw` tasks, roll them out (G each, sampling round `index`), hand the
    submitted diffs to the verifier and apply its verdicts (SPEC §5 reward). `roll`: who
    rolls out (`roll_out` in this process, or `RolloutWorkers.roll_out`)."""
    with lock or contextlib.nullcontext():
        chosen = curriculum.select(params.tasks_per_draw, index)
        bands = {t: curriculum.band(t) for t in chosen}
        p_before = {t: curriculum.stats[t].p_hat for t in chosen}
    t0 = time.perf_counter()
    spent: dict = {}
    rows = roll([by_id[t] for t in chosen], rp, sandbox_params, parts_root, engine=engine,
                sandbox=sandbox, sampling_round=index, stats=spent)
    t1 = time.perf_counter()
    patches = patch_rows([r for r in rows if needs_verdict(r)])
    verdicts = verifier([by_id[t] for t in chosen], patches) if patches else []
    rows = apply_verdicts(rows, verdicts, where=f"grpo draw {index}")
    return Draw(index, chosen, bands, p_before, rows,
                {"time/rollout_s": t1 - t0, "time/verify_s": time.perf_counter() - t1,
                 "time/generate_s": float(spent.get("generate_seconds", 0.0))})


def admit(rewards: list[float] | None, staleness: int, accepted: int, params: GRPOParams) -> str:
    """A group's status: `infra_error` (a rollout has no reward), `identical_rewards` (no
    signal), `stale` (Δv = v_trainer − v_rollout > max_staleness), `accepted` (while the
    batch needs groups) or `surplus`."""
    if rewards is None:
        return "infra_error"
    if max(rewards) == min(rewards):
        return "identical_rewards"
    if staleness > params.max_staleness:
        return "stale"
    return "accepted" if accepted < params.groups_per_step else "surplus"


def final_rewards(rows: Sequence[Mapping[str, Any]], params: GRPOParams) -> list[float] | None:
    """R_final of each rollout of a group: SPEC §5 reward (from the verdict) with the overlong
    penalty; None if any rollout has no reward (an infra error: the group is not trained)."""
    if any(r["reward"] is None for r in rows):
        return None
    rewards = torch.tensor([float(r["reward"]) for r in rows], dtype=torch.float64)
    lengths = torch.tensor([int(r["n_trainable_tokens"]) for r in rows])
    return [float(x) for x in params.overlong.apply(rewards, lengths)]


def share_groups(step: int, state: LoopState, curriculum: Curriculum,
                 next_draw: Callable[[int], Draw] | None, params: GRPOParams,
                 lock: threading.Lock, backend) -> tuple[list[dict], dict[str, float]]:
    """`collect_groups` on rank 0; with several ranks, its groups, the new ledger entries,
    the draw counter and the curriculum state are broadcast, so every rank trains on the same
    step batch and holds the same loop state (rlvr/train/grpo.py: data-parallel)."""
    if backend.world == 1:
        return collect_groups(step, state, curriculum, next_draw, params, lock)
    payload = None
    if backend.rank == 0:
        before = len(state.ledger)
        groups, timing = collect_groups(step, state, curriculum, next_draw, params, lock)
        with lock:
            payload = (groups, timing, state.draws, state.ledger[before:], curriculum.state())
    groups, timing, draws, entries, cur = backend.from_rank0(payload)
    if backend.rank != 0:
        state.draws = draws
        state.ledger.extend(entries)
        curriculum.load_state(cur)
    return groups, timing


def collect_groups(step: int, state: LoopState, curriculum: Curriculum,
                   next_draw: Callable[[int], Draw], params: GRPOParams,
                   lock: threading.Lock | None = None) -> tuple[list[dict], dict[str, float]]:
    """Draw groups until `groups_per_step` informative ones are kept or `max_draws` draws
    were made (SPEC §7 dynamic sampling). `next_draw(index)`: the draw with that index
    (made now, or taken from the async producer's queue). Every drawn group is returned and
    entered in the ledger with its status (`admit`) and staleness."""
    groups: list[dict] = []
    timing = {"time/rollout_s": 0.0, "time/verify_s": 0.0, "time/generate_s": 0.0}
    accepted = 0
    for _ in range(params.max_draws):
        if accepted >= params.groups_per_step:
            break
        draw = next_draw(state.draws)
        for k in timing:
            timing[k] += draw.timing[k]
        state.draws = draw.index + 1
        rows = draw.rows
        for gid in dict.fromkeys(r["group_id"] for r in rows):
            members = [r for r in rows if r["group_id"] == gid]
            task_id = members[0]["task_id"]
            with lock or contextlib.nullcontext():
                curriculum.update(task_id, [r["reward_outcome"] for r in members])
            rewards = final_rewards(members, params)
            staleness = versions_behind(state, min(int(r["policy_step"]) for r in members))
            status = admit(rewards, staleness, accepted, params)
            accepted += status == "accepted"
            group = {"step": step, "draw": draw.index, "group_id": gid, "task_id": task_id,
                     "band": draw.bands[task_id], "p_hat_before": draw.p_before[task_id],
                     "policy_step": int(members[0]["policy_step"]), "staleness": staleness,
                     "status": status, "rewards": rewards, "rows": members}
            groups.append(group)
            state.ledger.append({k: v for k, v in group.items() if k != "rows"}
                                | {"trajectory_ids": [r["trajectory_id"] for r in members]})
    return groups, timing
