"""The trajectory reward of SPEC §5, as pure functions of passport fields.

    R(τ) = R_outcome + λ_fmt · R_format − α · |τ_gen| / T_max

* R_outcome ∈ {0, 1}: the enclave's verdict (filled by `verify`; known already at rollout
  time only when it is forced to 0, see below);
* R_format ∈ [0, 1]: share of the episode's turns whose action parsed against its schema;
* |τ_gen|: tokens the acting engine generated (= trainable tokens); T_max: the episode's
  generation budget.

Forced zero: a rollout that ended by a collector limit (max_turns, max_tokens), the
repetition guard or the invalid-action limit gets R = 0 outright (SPEC §3: truncation counts
as failure with reward 0) — no format bonus, no length term. An `infra_error` rollout has no
reward at all (None): it says nothing about the policy and must not enter training.

λ_fmt + α < 1 keeps "a short wrong rollout never beats a long correct one":
worst correct = 1 − α > λ_fmt = best wrong.
"""
from __future__ import annotations

from dataclasses import dataclass

FORCED_ZERO_STOPS = frozenset({"max_turns", "max_tokens", "repetition", "invalid_action_limit"})


@dataclass(frozen=True)
class RewardParams:
    lambda_fmt: float = 0.05
    alpha: float = 0.05

    def __post_init__(self) -> None:
        if self.lambda_fmt < 0 or self.alpha < 0 or self.lambda_fmt + self.alpha >= 1:
            raise ValueError("reward needs lambda_fmt >= 0, alpha >= 0 and lambda_fmt + alpha < 1")


def format_reward(valid_actions: int, turns: int) -> float:
    return valid_actions / turns if turns else 0.0


def length_fraction(generated_tokens: int, t_max: int) -> float:
    return min(generated_tokens / t_max, 1.0) if t_max > 0 else 0.0


def total_reward(outcome: float, fmt: float, generated_tokens: int, t_max: int,
                 lambda_fmt: float, alpha: float) -> float:
    """R = R_outcome + λ_fmt·R_format − α·|τ_gen|/T_max."""
    return outcome + lambda_fmt * fmt - alpha * length_fraction(generated_tokens, t_max)


def rollout_outcome(stop_reason: str, infra_error: bool, patch_ok: bool) -> float | None:
    """R_outcome as far as it is known when the rollout ends: None = ask the verifier."""
    if infra_error:
        return None
    if stop_reason in FORCED_ZERO_STOPS:
        return 0.0
    if stop_reason == "submitted" and not patch_ok:
        return 0.0  # extraction refused the diff: reward 0 with a reason, no policy code run
    return None


def trajectory_reward(stop_reason: str, infra_error: bool, outcome: float | None, fmt: float,
                      generated_tokens: int, t_max: int, lambda_fmt: float,
                      alpha: float) -> float | None:
    """The total reward of a rollout, or None while it is unknown (or meaningless)."""
    if infra_error or outcome is None:
        return None
    if stop_reason in FORCED_ZERO_STOPS:
        return 0.0
    return total_reward(outcome, fmt, generated_tokens, t_max, lambda_fmt, alpha)
