"""The GRPO loss of SPEC §7, assembled from the one-formula modules beside it.

Per policy token (i = sequence, t = token):

    ℓ_{i,t} = −w_{i,t} · min(ρ A_i, clip(ρ, 1−ε_low, 1+ε_high) A_i) + β·k3_{i,t} − α·H_{i,t}

ρ: the token / GSPO sequence / turn ratio (`ratio.py`) against π_old; w: truncated importance
weight π_old/π_beh (`importance.py`, 1 when off); k3: KL to the frozen reference (`kl.py`,
skipped when β = 0); H: token entropy with the controller's coefficient α (`entropy.py`).
ℓ is then aggregated (`aggregation.py`) into the scalar the optimizer steps on.
`GRPOLossConfig` holds every knob; `passport()` is its part of the update passport.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from rlvr.errors import ConfigError
from rlvr.rl.advantages import AdvantageConfig
from rlvr.rl.aggregation import AGGREGATIONS, Aggregation, aggregate, dr_grpo_denominator
from rlvr.rl.importance import truncated_is_weights
from rlvr.rl.kl import k3, uses_reference
from rlvr.rl.masking import as_mask, masked, masked_mean
from rlvr.rl.ratio import sequence_ratio, token_ratio, turn_ratio
from rlvr.rl.surrogate import check_clip_range, clip_fractions, clipped_surrogate

RatioLevel = Literal["token", "sequence", "turn"]


@dataclass(frozen=True)
class GRPOLossConfig:
    """Every knob of the SPEC §7 loss (a `grpo` params sub-section parses into this)."""

    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    """Advantage estimator and reward scaling (`advantages.py`)."""
    ratio_level: RatioLevel = "token"
    """`token` (PPO/GRPO), `sequence` (GSPO: exp of the mean token log-ratio, own clip range)
    or `turn` (exp of the summed log-ratio of each turn, token clip range)."""
    eps_low: float = 0.2
    """ε_low: the ratio is clipped below at 1 − ε_low (token and turn level)."""
    eps_high: float = 0.28
    """ε_high ≥ ε_low: clipped above at 1 + ε_high (clip-higher, DAPO's 0.28)."""
    seq_eps_low: float = 3e-4
    """GSPO's ε_low for the sequence ratio (sequence ratios sit much closer to 1)."""
    seq_eps_high: float = 4e-4
    """GSPO's ε_high ≥ seq_eps_low."""
    beta: float = 0.0
    """β, k3-KL coefficient to the frozen reference, in the loss. 0: no term and no
    reference model loaded (`uses_reference`)."""
    loss_aggregation: Aggregation = "constant"
    """`constant` (Dr.GRPO, recommended), `token_mean` (DAPO), `seq_mean` (original GRPO) or
    `turn_mean` (turn-level reduction); see `aggregation.py`."""
    loss_denominator: float | None = None
    """C of the `constant` aggregation; None = Dr.GRPO's G·L for the step (sequences × max
    response tokens, `denominator()`). Whatever is used is recorded in the passport."""
    tis_cap: float | None = 2.0
    """C of the truncated importance weights min(π_old/π_beh, C); None switches TIS off."""

    def __post_init__(self) -> None:
        if self.ratio_level not in ("token", "sequence", "turn"):
            raise ConfigError(
                f"ratio_level: must be token, sequence or turn; got {self.ratio_level!r}"
            )
        check_clip_range(self.eps_low, self.eps_high, "eps")
        check_clip_range(self.seq_eps_low, self.seq_eps_high, "seq_eps")
        if self.beta < 0:
            raise ConfigError(f"beta: must be >= 0, got {self.beta}")
        if self.loss_aggregation not in AGGREGATIONS:
            raise ConfigError(
                f"loss_aggregation: must be one of {list(AGGREGATIONS)}, "
                f"got {self.loss_aggregation!r}"
            )
        if self.loss_denominator is not None and self.loss_denominator <= 0:
            raise ConfigError(f"loss_denominator: must be > 0, got {self.loss_denominator}")
        if self.tis_cap is not None and self.tis_cap <= 0:
            raise ConfigError(f"tis_cap: must be > 0 (or null for off), got {self.tis_cap}")

    @property
    def uses_reference(self) -> bool:
        """Whether the trainer must load (and keep frozen) a reference model: β > 0."""
        return uses_reference(self.beta)

    @property
    def clip_range(self) -> tuple[float, float]:
        """(ε_low, ε_high) of the configured ratio level."""
        if self.ratio_level == "sequence":
            return self.seq_eps_low, self.seq_eps_high
        return self.eps_low, self.eps_high

    def denominator(self, num_sequences: int, max_response_tokens: int) -> float | None:
        """The constant C for this step (None unless aggregation is `constant`)."""
        if self.loss_aggregation != "constant":
            return None
        if self.loss_denominator is not None:
            return self.loss_denominator
        return dr_grpo_denominator(num_sequences, max_response_tokens)

    def passport(self) -> dict[str, Any]:
        """The loss's fields of the SPEC §7 update passport (the trainer adds the exact
        denominator used, epochs, batch sizes, entropy band and staleness bound)."""
        low, high = self.clip_range
        return {
            "advantage_method": self.advantage.estimator,
            "reward_scaling": self.advantage.scale,
            "advantage_eps": self.advantage.eps,
            "ratio_level": self.ratio_level,
            "clip_low": low,
            "clip_high": high,
            "kl_estimator": "k3",
            "kl_coef": self.beta,
            "kl_placement": "loss" if self.uses_reference else "none",
            "loss_aggregation": self.loss_aggregation,
            "loss_denominator": self.loss_denominator,
            "tis_cap": self.tis_cap,
        }


@dataclass
class LossOutput:
    """The scalar to back-propagate and the step's loss metrics (floats, for the dashboard)."""

    loss: Tensor
    metrics: dict[str, float]


def policy_ratio(
    logprobs: Tensor, old_logprobs: Tensor, mask: Tensor, level: str, turn_ids: Tensor | None = None
) -> Tensor:
    """The ratio of `level`, shaped `[B, T]` (sequence / turn ratios broadcast to tokens)."""
    if level == "token":
        return token_ratio(logprobs, old_logprobs, mask)
    if level == "sequence":
        s = sequence_ratio(logprobs, old_logprobs, mask)
        return masked(s[:, None].expand_as(logprobs), mask, 1.0)
    if level == "turn":
        if turn_ids is None:
            raise ValueError("ratio_level 'turn' needs turn_ids")
        return turn_ratio(logprobs, old_logprobs, mask, turn_ids)
    raise ConfigError(f"ratio_level: must be token, sequence or turn; got {level!r}")


def grpo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    config: GRPOLossConfig = GRPOLossConfig(),
    *,
    ref_logprobs: Tensor | None = None,
    behaviour_logprobs: Tensor | None = None,
    entropy: Tensor | None = None,
    entropy_coef: float = 0.0,
    turn_ids: Tensor | None = None,
    denominator: float | None = None,
    num_tokens: int | None = None,
) -> LossOutput:
    """SPEC §7 loss `ℓ = −w·J + β·k3 − α·H`, aggregated by `config.loss_aggregation`.

    logprobs `[B, T]`: π_θ of the sampled tokens (with gradient). old_logprobs `[B, T]`: π_old
    (first pass: the trainer's own forward, detached → ρ ≡ 1). advantages `[B]` (or `[B, T]`).
    mask `[B, T]`: policy tokens. ref_logprobs `[B, T]`: π_ref, required iff β > 0.
    behaviour_logprobs `[B, T]`: the recorded sampler logprobs → TIS weights (if tis_cap).
    entropy `[B, T]`: token entropy with gradient (`token_entropy`), times α = entropy_coef.
    turn_ids `[B, T]`: for the turn ratio / turn-mean. denominator: C of the `constant`
    aggregation (default `config.loss_denominator`; no silent fallback). num_tokens: the
    step-wide token count when this is a micro-batch under `token_mean`.
    """
    m = as_mask(mask, logprobs)
    low, high = config.clip_range
    ratio = policy_ratio(logprobs, old_logprobs, m, config.ratio_level, turn_ids)
    objective = clipped_surrogate(ratio, advantages, m, low, high)
    metrics: dict[str, float] = {"policy_tokens": float(m.sum())}
    if behaviour_logprobs is not None and config.tis_cap is not None:
        weights = truncated_is_weights(old_logprobs, behaviour_logprobs, m, config.tis_cap)
        objective = objective * weights
        metrics["tis_weight_mean"] = float(masked_mean(weights, m))
    per_token = -objective
    if config.uses_reference:
        if ref_logprobs is None:
            raise ValueError("beta > 0 needs ref_logprobs (the frozen reference's logprobs)")
        kl = k3(logprobs, ref_logprobs, m)
        per_token = per_token + config.beta * kl
        metrics["kl"] = float(masked_mean(kl.detach(), m))
    if entropy is not None:
        if entropy_coef:
            per_token = per_token - entropy_coef * masked(entropy, m)
        metrics["entropy"] = float(masked_mean(entropy.detach(), m))
    if config.loss_aggregation == "constant" and denominator is None:
        denominator = config.loss_denominator
    loss = aggregate(
        per_token,
        m,
        config.loss_aggregation,
        denominator=denominator,
        num_tokens=num_tokens,
        turn_ids=turn_ids,
    )
    with torch.no_grad():
        r = ratio.detach()
        metrics.update(clip_fractions(r, advantages, m, low, high))
        if m.any():
            metrics.update(
                ratio_mean=float(masked_mean(r, m)),
                ratio_min=float(r[m].min()),
                ratio_max=float(r[m].max()),
            )
    if denominator is not None:
        metrics["loss_denominator"] = float(denominator)
    return LossOutput(loss=loss, metrics=metrics)
