"""The `evaluate` section of params.yaml: what is evaluated, on which tasks, how (SPEC §8).

Every knob is declared and documented here once; `load_params(path)` reads and validates it
(unknown or mistyped keys name the dotted key, as everywhere in `rlvr.config`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from rlvr.agent.collector import ScheduleParams
from rlvr.agent.episode import Budgets
from rlvr.agent.repetition import RepetitionParams
from rlvr.config import load_section
from rlvr.engines.base import Decoding
from rlvr.errors import ConfigError
from rlvr.sandbox.params import SandboxParams


@dataclass(frozen=True)
class TierSizes:
    """Tasks per evaluation tier (a seeded, fixed sample of that split; 0 = every task).
    Tiers, nearest first (SPEC §8): training tasks, held-out tasks of training families
    (the function-level split), held-out families, the regression family."""

    train: int = 32
    heldout_function: int = 32
    heldout: int = 32
    regression: int = 16

    def __post_init__(self) -> None:
        for f in fields(self):
            if getattr(self, f.name) < 0:
                raise ConfigError(f"evaluate.tasks_per_tier.{f.name}: must be >= 0 (0 = all)")

    def get(self, tier: str) -> int:
        return getattr(self, tier)


@dataclass(frozen=True)
class EvaluateParams:
    # Checkpoints to evaluate: name -> HF policy directory. Every checkpoint is rolled out
    # on the same tasks with the same sample seeds, so any two compare paired.
    checkpoints: dict[str, str] = field(default_factory=lambda: {
        "init": "models/policy-init"})
    # Token engine acting as the policy: torch (CPU default) | vllm (GPU).
    engine: Literal["torch", "vllm"] = "torch"
    # Backend settings of that engine (rlvr.engines.build_engine `options`).
    engine_options: dict[str, Any] = field(default_factory=dict)
    tasks_per_tier: TierSizes = field(default_factory=TierSizes)
    # n: samples per task. pass@k and pass^k are reported for k = 1..n (unbiased estimators
    # need n >= k), pass@1 with its 95% interval.
    samples_per_task: int = 4
    # Seeds the task sample of every tier and every episode's sample seed (identical for
    # every checkpoint).
    seed: int = 0
    # Sampling: evaluation samples the policy's own distribution (temperature 1) by default,
    # so pass@k measures what RL would draw; 0 = greedy (then n > 1 repeats one answer).
    decoding: Decoding = field(default_factory=Decoding)
    # Deployment budgets (SPEC §3): keep equal to `rollout.budgets` — a policy evaluated
    # under other limits than it acts under is measured on a different task.
    budgets: Budgets = field(default_factory=Budgets)
    repetition: RepetitionParams = field(default_factory=RepetitionParams)
    workers: int = 2            # tool thread pool
    groups_per_wave: int = 8    # token engines: task groups batched into one generate call
    # token engines: cohorts or one continuous decode per wave (`rollout.schedule`); the
    # sampled ids are the same either way
    schedule: ScheduleParams = field(default_factory=ScheduleParams)
    # Verification of the submitted diffs in fresh enclaves (SPEC §4): consensus runs for a
    # first-time pass, and the verification seed.
    consensus_runs: int = 3
    verify_seed: int = 1234
    # Report: two-sided level of every interval; bootstrap replicates of paired comparisons.
    level: float = 0.95
    bootstrap: int = 2000

    def __post_init__(self) -> None:
        if not self.checkpoints:
            raise ConfigError("evaluate.checkpoints: name at least one checkpoint")
        for name, path in self.checkpoints.items():
            if not name or not path:
                raise ConfigError(f"evaluate.checkpoints.{name}: needs a name and a path")
        for key in ("samples_per_task", "workers", "groups_per_wave", "consensus_runs",
                    "bootstrap"):
            if getattr(self, key) < 1:
                raise ConfigError(f"evaluate.{key}: must be >= 1")
        if not 0.0 < self.level < 1.0:
            raise ConfigError(f"evaluate.level: must be in (0, 1), got {self.level!r}")


def load_params(path: Path | str) -> tuple[EvaluateParams, SandboxParams]:
    """The `evaluate` and `sandbox` sections of `path`."""
    try:
        params = load_section(EvaluateParams, "evaluate", path)
    except ValueError as exc:  # the budgets' / repetition guard's own checks
        raise ConfigError(f"{path}: evaluate: {exc}") from None
    return params, load_section(SandboxParams, "sandbox", path)
