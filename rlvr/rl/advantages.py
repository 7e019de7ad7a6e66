"""Group-relative advantages (SPEC §7), a small registry of estimators by name.

rewards `[N, G]` (N groups of G rollouts of one task) → advantages `[N, G]`, one scalar per
rollout, broadcast over its tokens by the surrogate. An estimator is two separable choices:

* the baseline it subtracts (group mean, or leave-one-out mean for RLOO), and
* the reward scaling it divides by (SPEC §7 "Reward scaling": per group std, per batch std,
  or none).

    grpo     A_i = (r_i − mean r) / (std r + ε)         scaling: group (default) | batch
    dr_grpo  A_i = r_i − mean r                          scaling: none
    rloo     A_i = r_i − mean_{j≠i} r_j                  scaling: none (default) | group | batch

std is the *population* std (divide by G): a binary group of G with one success then gives
A = √(G−1) to the success and −1/√(G−1) to the others (SPEC §7); the sample std would give
√(G−1)·√((G−1)/G). A group whose rewards are all equal gets exactly 0 (not a float-rounding
residue of r − mean r): it must contribute exactly no gradient.

Without std scaling the update's scale depends on reward units (calibrate reward components
first); with it a group and its ×0.1 copy get identical advantages. New estimators join with
`@register("name", default_scale=...)` on a baseline function `[N, G] → [N, G]`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

import torch
from torch import Tensor

from rlvr.errors import ConfigError
from rlvr.rl.groups import informative_groups

ScaleMode = Literal["group", "batch", "none"]
SCALE_MODES: tuple[str, ...] = ("group", "batch", "none")


@dataclass(frozen=True)
class Estimator:
    """A registered advantage estimator: its baseline and the reward scalings it admits."""

    name: str
    baseline: Callable[[Tensor], Tensor]
    """rewards `[N, G]` → rewards minus the estimator's baseline, `[N, G]`."""
    default_scale: str
    """scaling used when the config leaves `scale_rewards` unset."""
    scales: tuple[str, ...]
    """scalings that keep the estimator what its name says (Dr.GRPO with std is GRPO)."""


_REGISTRY: dict[str, Estimator] = {}


def register(name: str, *, default_scale: str, scales: tuple[str, ...] = SCALE_MODES):
    """Decorator: register `baseline` (rewards `[N, G]` → centred `[N, G]`) under `name`."""
    if default_scale not in scales or not set(scales) <= set(SCALE_MODES):
        raise ValueError(f"estimator {name}: scales {scales} / default {default_scale!r} invalid")

    def wrap(baseline: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
        if name in _REGISTRY:
            raise ValueError(f"advantage estimator {name!r} registered twice")
        _REGISTRY[name] = Estimator(name, baseline, default_scale, tuple(scales))
        return baseline

    return wrap


def get(name: str) -> Estimator:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(
            f"advantage estimator {name!r} unknown (known: {', '.join(available())})"
        ) from None


def available() -> list[str]:
    return sorted(_REGISTRY)


@register("dr_grpo", default_scale="none", scales=("none",))
def mean_baseline(rewards: Tensor) -> Tensor:
    """Dr.GRPO (and GRPO's numerator): `A_i = r_i − mean r`, mean over the group. `[N, G]`."""
    return rewards - rewards.mean(dim=-1, keepdim=True)


# GRPO: `A_i = (r_i − mean r)/(std r + ε)` = `mean_baseline`, then `scale_by_std` by group.
register("grpo", default_scale="group", scales=("group", "batch"))(mean_baseline)


@register("rloo", default_scale="none")
def leave_one_out_baseline(rewards: Tensor) -> Tensor:
    """RLOO: `A_i = r_i − mean_{j≠i} r_j` = `r_i − (Σ_j r_j − r_i)/(G − 1)`. `[N, G]`, G ≥ 2."""
    g = rewards.shape[-1]
    if g < 2:
        raise ValueError("RLOO needs groups of at least 2 rollouts")
    return rewards - (rewards.sum(dim=-1, keepdim=True) - rewards) / (g - 1)


def scale_by_std(centred: Tensor, rewards: Tensor, scale: str, eps: float) -> Tensor:
    """SPEC §7 reward scaling: divide by `std r + ε` over the group (`[N, 1]`), over the whole
    batch (a scalar), or not at all. std is the population std (correction 0).

    centred, rewards: `[N, G]`. A zero std (only possible where all rewards it covers are
    equal, hence centred = 0) divides by 1, so ε = 0 is allowed and exact.
    """
    if scale == "none":
        return centred
    if scale == "group":
        std = rewards.std(dim=-1, keepdim=True, correction=0)
    elif scale == "batch":
        std = rewards.std(correction=0)
    else:
        raise ConfigError(f"scale_rewards must be one of {list(SCALE_MODES)}, got {scale!r}")
    return centred / torch.where(std > 0, std + eps, torch.ones_like(std))


@dataclass(frozen=True)
class AdvantageConfig:
    """How rewards become advantages; recorded in the update passport (SPEC §7)."""

    estimator: str = "grpo"
    """Registered estimator name: `grpo`, `dr_grpo` or `rloo` (see `available()`)."""
    scale_rewards: ScaleMode | None = None
    """`group` (divide by the group's std), `batch` (by the batch's std) or `none`; None takes
    the estimator's default (grpo: group, dr_grpo: none, rloo: none)."""
    eps: float = 1e-6
    """ε of `std r + ε`; ≥ 0 (0 is exact: zero-std groups are zero anyway)."""

    def __post_init__(self) -> None:
        est = get(self.estimator)
        if self.scale_rewards is not None and self.scale_rewards not in est.scales:
            raise ConfigError(
                f"scale_rewards: {self.scale_rewards!r} not valid for estimator "
                f"{self.estimator!r} (valid: {', '.join(est.scales)})"
            )
        if self.eps < 0:
            raise ConfigError(f"eps: must be >= 0, got {self.eps}")

    @property
    def scale(self) -> str:
        """The scaling actually applied (the passport records this, never None)."""
        return self.scale_rewards or get(self.estimator).default_scale


def compute_advantages(rewards: Tensor, config: AdvantageConfig = AdvantageConfig()) -> Tensor:
    """rewards `[N, G]` → advantages `[N, G]` by `config` (estimator baseline, then scaling).

    Uninformative groups (all rewards equal) get exactly 0. Rewards are data, not
    parameters: the result carries no gradient.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [N, G], got shape {tuple(rewards.shape)}")
    rewards = rewards.detach()
    est = get(config.estimator)
    adv = scale_by_std(est.baseline(rewards), rewards, config.scale, config.eps)
    return torch.where(informative_groups(rewards)[:, None], adv, torch.zeros_like(adv))
