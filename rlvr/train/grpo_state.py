"""The GRPO loop's state: what a checkpoint's `state.json` holds (its field names are that
file's keys) and what every other piece of the loop reads — the draw counter, the published
policy versions staleness is counted in, the curves, the group ledger."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class LoopState:
    step: int = 0
    policy_step: int = 0
    policy_version: str = ""
    draws: int = 0
    entropy_coef: float = 0.0
    published: list[int] = field(default_factory=list)
    """policy_step of every policy version the trainer published (one per loop step that
    updated the weights): Δv counts these, not optimizer steps (`versions_behind`)."""
    curves: list[dict[str, Any]] = field(default_factory=list)
    ledger: list[dict[str, Any]] = field(default_factory=list)
    curriculum: dict[str, Any] | None = None
    world: int = 1
    """Ranks that trained (a checkpoint holds one optimizer state per rank)."""


def versions_behind(state: LoopState, rollout_step: int) -> int:
    """Δv of SPEC §7 = v_trainer − v_rollout in policy versions: how many weight versions the
    trainer published after the one (identified by its `policy_step`) that sampled the
    rollout. One loop step's update is one version, however many optimizer steps
    (`epochs` x `mini_batches`) it took, so `max_staleness: 1` admits a draw made with the
    weights one update behind."""
    return sum(rollout_step < p <= state.policy_step for p in state.published)
