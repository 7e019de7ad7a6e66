"""The clipped surrogate objective of GRPO (SPEC §7), with clip-higher.

    J_{i,t} = min(ρ_{i,t}·A_i, clip(ρ_{i,t}, 1 − ε_low, 1 + ε_high)·A_i),   ε_low ≤ ε_high

ε_high > ε_low (DAPO's clip-higher, e.g. 0.2 / 0.28) lets low-probability tokens with a
positive advantage grow further before the clip stops them, which counters entropy collapse.
The per-token *loss* is −J (see `loss.py`); this module stays in objective form, as the spec.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.errors import ConfigError
from rlvr.rl.masking import as_mask, masked, masked_mean


def check_clip_range(eps_low: float, eps_high: float, what: str = "eps") -> None:
    """Refuse a clip range outside 0 ≤ ε_low ≤ ε_high, ε_low < 1 (1 − ε_low must stay > 0)."""
    if not 0 <= eps_low < 1:
        raise ConfigError(f"{what}_low: must be in [0, 1), got {eps_low}")
    if eps_high < eps_low:
        raise ConfigError(f"{what}_high: must be >= {what}_low ({eps_low}), got {eps_high}")


def broadcast_advantages(advantages: Tensor, like: Tensor) -> Tensor:
    """advantages `[B]` (one per sequence) or `[B, T]` → `[B, T]` shaped like `like`."""
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    return advantages.detach().expand_as(like)


def clipped_surrogate(
    ratio: Tensor, advantages: Tensor, mask: Tensor, eps_low: float, eps_high: float
) -> Tensor:
    """SPEC §7: `min(ρA, clip(ρ, 1−ε_low, 1+ε_high)A)` per token, 0 on masked tokens. `[B, T]`.

    ratio: `[B, T]` (token ratio, or a sequence / turn ratio broadcast to tokens);
    advantages: `[B]` or `[B, T]`, treated as constants.
    """
    check_clip_range(eps_low, eps_high)
    m = as_mask(mask, ratio)
    ratio = masked(ratio, m, 1.0)
    adv = broadcast_advantages(advantages, ratio)
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    return masked(torch.minimum(ratio * adv, clipped * adv), m)


def clip_fractions(
    ratio: Tensor, advantages: Tensor, mask: Tensor, eps_low: float, eps_high: float
) -> dict[str, float]:
    """Dashboard (SPEC §7): share of policy tokens whose surrogate is clipped (zero gradient),
    for positive and negative advantages separately.

    A > 0 is clipped when ρ > 1 + ε_high; A < 0 when ρ < 1 − ε_low. Each fraction is over the
    policy tokens of that sign (0 when there are none). ratio, mask: `[B, T]`.
    """
    m = as_mask(mask, ratio)
    with torch.no_grad():
        adv = broadcast_advantages(advantages, ratio)
        pos, neg = m & (adv > 0), m & (adv < 0)
        return {
            "clip_frac_pos": float(masked_mean((ratio > 1 + eps_high).to(ratio.dtype), pos)),
            "clip_frac_neg": float(masked_mean((ratio < 1 - eps_low).to(ratio.dtype), neg)),
        }
