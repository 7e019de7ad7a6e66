"""The `gate` section of params.yaml: what is compared, and every threshold of the release
gate, declared before the run (SPEC §8: "stop signals are declared in params before the run").

Every knob is declared and documented here once; `load_params(path)` reads and validates it
(unknown or mistyped keys name the dotted key, as everywhere in `rlvr.config`). A threshold set
to null switches its stop signal off — the report then lists it as `off`, never as passed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path

from rlvr.artifacts.schemas import EVAL_TIERS
from rlvr.config import load_section
from rlvr.errors import ConfigError


@dataclass(frozen=True)
class ContractParams:
    """Rule 3, contract compliance: every tool call the candidate emitted in evaluation must
    parse against its schema (an eval row counts the turns whose action did not parse,
    `n_invalid_actions`)."""

    # Largest tolerated share of the candidate's tool calls (turns) that did not parse;
    # 0 = every single one must parse (SPEC §8 rule 3 as written).
    max_invalid_rate: float = 0.0
    # Episodes with unparsed calls quoted in gate.json / the report (most unparsed first).
    examples: int = 5


@dataclass(frozen=True)
class StopSignalParams:
    """Rule 4, declared stop signals: each raised flag blocks the candidate with its name.
    Differences are candidate − champion on the paired evaluation; null = signal off."""

    # "Train up while held-out down" (SPEC §8, the reference pathology): the train tier's
    # pass@1 rose by at least `train_rise` while a held-out tier's pass@1 or pass@k fell by
    # at least `heldout_drop` -> `train_up_heldout_down`.
    train_rise: float | None = 0.05
    heldout_drop: float | None = 0.05
    # Same pattern against the trainer's own reward curve (training metrics, key
    # `keys.reward`): last − first >= `reward_rise` with a held-out drop as above ->
    # `reward_up_heldout_down`; unavailable when the trainer logs no reward (SFT).
    reward_rise: float | None = 0.05
    # A held-out tier's pass@k (k = samples per task) fell by more than this ->
    # `pass_at_k_drop` ("pass@k drops sharply").
    pass_at_k_drop: float | None = 0.2
    # Lower edge of the entropy band: the last logged token entropy (training metrics, key
    # `keys.entropy`) below it -> `entropy_collapse` (SPEC §7).
    entropy_min: float | None = 0.05
    # Upper edge: the last logged token entropy above it -> `entropy_blowup`. A policy that
    # a too-large step knocked off its demonstrations samples near-uniform noise; both
    # engineered collapses of LEARNING.md passed through it (2.9 and 6.3 nats per token,
    # against 0.1–0.25 for SFT and healthy GRPO).
    entropy_max: float | None = 1.5
    # Evaluation parse-error rate (unparsed turns / turns) rose by more than this ->
    # `parse_error_spike`.
    parse_error_spike: float | None = 0.1
    # Share of episodes ending in a verifier / rollout infra error rose by more than this ->
    # `infra_error_rise` ("verifier errors rise").
    infra_error_rise: float | None = 0.05
    # Mean policy-generated tokens per episode grew by more than this factor ->
    # `length_growth` (SPEC §7 unbounded length growth).
    length_growth: float | None = 2.0
    # Pathology flags the trainer raised itself (training metrics `flags`): any true one
    # blocks as `trainer:<name>`.
    trainer_flags: bool = True


@dataclass(frozen=True)
class TrainingKeys:
    """Names of the curves in the candidate's training metrics (a list of {step, name: value}
    records: the SFT card's `metrics.evals`, or `curves` of any trainer). A key that is not
    there makes the signals that need it `unavailable` (said so in the report)."""

    reward: str = "train/reward"
    entropy: str = "train/entropy"
    length: str = "train/length_mean"
    parse_error: str = "eval/parse_error_rate"
    loss: str = "train/loss_mean"


@dataclass(frozen=True)
class RegistryParams:
    """The MLflow model registry the gate writes (tracking URI: MLFLOW_TRACKING_URI, else
    the repo's sqlite store)."""

    model_name: str = "rlvr-policy"   # registered model holding every candidate's version
    alias: str = "champion"           # moves only on promotion (and on `rlvr gate rollback`)


@dataclass(frozen=True)
class GateParams:
    # Checkpoint names in eval.parquet (`evaluate.checkpoints`) and their HF directories: a
    # directory is content-hashed (`weights_fingerprint`), checked against the policy
    # version its evaluation recorded, and registered with that hash.
    candidate: str = "sft"
    champion: str = "init"
    candidate_dir: str = "models/policy-sft"
    champion_dir: str = "models/policy-init"
    # Rule 1: held-out tasks of the trained type (held-out functions of training families).
    target_tier: str = "heldout_function"
    # Rule 2: tiers that must stay at or above the champion (held-out families, regression).
    other_tiers: tuple[str, ...] = ("heldout", "regression")
    # Non-inferiority margins on the paired pass@1 difference (candidate − champion): a
    # point estimate below −tolerance fails; an interval reaching below it is inconclusive.
    tolerance: float = 0.05
    regression_tolerance: float = 0.05
    # Two-sided level of every interval; bootstrap replicates and seed of the paired ones.
    level: float = 0.95
    bootstrap: int = 2000
    seed: int = 0
    # Rule 5, enough evidence, per gated tier: at least this many tasks and graded
    # (task, sample) pairs, and an interval narrow enough for the tolerance (its half-width,
    # or with no discordant task at all the Wilson bound z²/(T+z²) on the share of tasks
    # that could differ, must not exceed the tier's tolerance).
    min_tasks: int = 20
    min_trials: int = 60
    contract: ContractParams = field(default_factory=ContractParams)
    stop: StopSignalParams = field(default_factory=StopSignalParams)
    keys: TrainingKeys = field(default_factory=TrainingKeys)
    registry: RegistryParams = field(default_factory=RegistryParams)

    def __post_init__(self) -> None:
        if not self.candidate or not self.champion:
            raise ConfigError("gate.candidate / gate.champion: name both checkpoints")
        for key, tier in [("target_tier", self.target_tier),
                          *((f"other_tiers[{i}]", t) for i, t in enumerate(self.other_tiers))]:
            if tier not in EVAL_TIERS:
                raise ConfigError(f"gate.{key}: must be one of {list(EVAL_TIERS)}, got {tier!r}")
        if self.target_tier in self.other_tiers:
            raise ConfigError(f"gate.other_tiers: holds the target tier {self.target_tier!r}")
        for key in ("tolerance", "regression_tolerance"):
            v = getattr(self, key)
            if not (0.0 <= v < 1.0):
                raise ConfigError(f"gate.{key}: must be in [0, 1), got {v!r}")
        if not 0.0 < self.level < 1.0:
            raise ConfigError(f"gate.level: must be in (0, 1), got {self.level!r}")
        for key in ("bootstrap", "min_tasks", "min_trials"):
            if getattr(self, key) < 1:
                raise ConfigError(f"gate.{key}: must be >= 1")
        if not 0.0 <= self.contract.max_invalid_rate <= 1.0:
            raise ConfigError("gate.contract.max_invalid_rate: must be in [0, 1]")
        if self.contract.examples < 0:
            raise ConfigError("gate.contract.examples: must be >= 0")
        for f in fields(self.stop):
            v = getattr(self.stop, f.name)
            if isinstance(v, float) and (not math.isfinite(v) or v < 0):
                raise ConfigError(f"gate.stop.{f.name}: must be a number >= 0 or null")
        lo, hi = self.stop.entropy_min, self.stop.entropy_max
        if lo is not None and hi is not None and hi <= lo:
            raise ConfigError(f"gate.stop.entropy_max: must be above entropy_min ({lo}), got {hi}")
        if self.stop.length_growth is not None and self.stop.length_growth < 1.0:
            raise ConfigError("gate.stop.length_growth: a growth factor, must be >= 1")
        if not self.registry.model_name or not self.registry.alias:
            raise ConfigError("gate.registry: model_name and alias must be non-empty")

    def tolerance_of(self, tier: str) -> float:
        return self.tolerance if tier == self.target_tier else self.regression_tolerance

    @property
    def gated_tiers(self) -> tuple[str, ...]:
        return (self.target_tier, *self.other_tiers)


def load_params(path: Path | str) -> GateParams:
    """The `gate` section of `path`."""
    return load_section(GateParams, "gate", path)
