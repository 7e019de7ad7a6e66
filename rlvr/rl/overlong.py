"""Overlong penalties on the task reward (SPEC §5), per rollout.

Threshold:  R_final = R_task − γ·max(0, T_tokens − T_budget),  with γ·(T_max − T_budget) ≥ 1
DAPO soft:  R_final = R_task + P(|y|),  P = 0                            if |y| ≤ L_max − L_cache
                                          (L_max − L_cache − |y|)/L_cache  if in between
                                          −1                               if |y| > L_max

γ·(T_max − T_budget) ≥ 1 makes the penalty at the generation budget T_max at least the whole
outcome reward: a rollout that runs to the limit can never out-earn a failure that stopped
in time. T_tokens / |y| = the rollout's generated (policy) tokens, `mask.sum(-1)`.
Rewards and lengths here are per rollout, `[N]`: no token tensors, no mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from rlvr.errors import ConfigError


def threshold_overlong(rewards: Tensor, lengths: Tensor, gamma: float, t_budget: int) -> Tensor:
    """SPEC §5 `R_task − γ·max(0, T_tokens − T_budget)`. rewards, lengths `[N]` → `[N]`."""
    excess = torch.clamp(lengths.to(rewards.dtype) - t_budget, min=0)
    return rewards - gamma * excess


def dapo_soft_overlong(lengths: Tensor, l_max: int, l_cache: int) -> Tensor:
    """SPEC §5 DAPO soft overlong penalty P(|y|) ∈ [−1, 0], added to the reward. `[N]` → `[N]`.

    0 up to L_max − L_cache, then linear (L_max − L_cache − |y|)/L_cache down to −1 at L_max,
    −1 beyond.
    """
    y = lengths.to(torch.float64)
    soft_start = l_max - l_cache
    ramp = (soft_start - y) / l_cache
    penalty = torch.where(y <= soft_start, torch.zeros_like(y), ramp)
    return torch.where(y > l_max, torch.full_like(y, -1.0), penalty)


@dataclass(frozen=True)
class OverlongParams:
    """Which overlong penalty applies to R_task, and its lengths (recorded with the run)."""

    mode: Literal["none", "threshold", "dapo"] = "none"
    """`none`, `threshold` (hard: γ per token beyond T_budget) or `dapo` (soft ramp)."""
    gamma: float = 0.0
    """γ, reward lost per generated token beyond T_budget (threshold mode)."""
    t_budget: int = 0
    """T_budget, the length up to which the threshold penalty is 0 (threshold mode)."""
    t_max: int = 0
    """T_max, the episode's generation budget; must satisfy γ·(T_max − T_budget) ≥ 1."""
    l_max: int = 0
    """L_max, DAPO's maximum length: −1 beyond it (dapo mode)."""
    l_cache: int = 0
    """L_cache, DAPO's soft interval below L_max where the penalty ramps 0 → −1 (dapo mode)."""

    def __post_init__(self) -> None:
        if self.mode == "threshold":
            if self.gamma <= 0:
                raise ConfigError(f"gamma: must be > 0 for the threshold penalty, got {self.gamma}")
            if not 0 <= self.t_budget < self.t_max:
                raise ConfigError(
                    f"t_budget: must satisfy 0 <= t_budget < t_max ({self.t_max}), "
                    f"got {self.t_budget}"
                )
            headroom_penalty = self.gamma * (self.t_max - self.t_budget)
            if headroom_penalty < 1:
                raise ConfigError(
                    f"gamma: γ·(T_max − T_budget) = "
                    f"{self.gamma}·({self.t_max} − {self.t_budget}) = {headroom_penalty:g} < 1 "
                    f"(SPEC §5): a correct rollout that runs to T_max would out-earn a failure"
                )
        elif self.mode == "dapo":
            if not 0 < self.l_cache <= self.l_max:
                raise ConfigError(
                    f"l_cache: must satisfy 0 < l_cache <= l_max ({self.l_max}), got {self.l_cache}"
                )
        elif self.mode != "none":
            raise ConfigError(f"mode: must be one of none, threshold, dapo; got {self.mode!r}")

    def apply(self, rewards: Tensor, lengths: Tensor) -> Tensor:
        """R_final `[N]` from R_task `[N]` and generated lengths `[N]` by `mode`."""
        if self.mode == "threshold":
            return threshold_overlong(rewards, lengths, self.gamma, self.t_budget)
        if self.mode == "dapo":
            return rewards + dapo_soft_overlong(lengths, self.l_max, self.l_cache).to(rewards.dtype)
        return rewards
