"""Token entropy and the adaptive entropy controller (SPEC §7 "Entropy").

A fixed entropy bonus does not work: too small and entropy still collapses, too large and it
explodes. The controller moves the bonus coefficient α against the measured entropy:

    α_{k+1} = clip(α_k − η·(H̄_k − (H_min + H_max)/2), α_min, α_max)

H̄_k is the mean token entropy of the behaviour policy on policy tokens at step k; below the
band's centre α rises (more bonus), above it α falls. The per-token loss gets −α·H.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlvr.errors import ConfigError
from rlvr.rl.masking import as_mask, masked


def token_entropy(logits: Tensor, mask: Tensor) -> Tensor:
    """`H_t = −Σ_v π(v|·) log π(v|·)` per token from logits `[B, T, V]`; 0 on masked. `[B, T]`.

    Pass the logits after the same processing the sampler applied (temperature, masks) to
    measure the *behaviour* policy's entropy. Half-precision logits are computed in fp32.
    """
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # bf16 → fp32
    logp = torch.log_softmax(logits, dim=-1)
    h = -(logp.exp() * logp).sum(dim=-1)
    return masked(h, as_mask(mask, h))


def update_entropy_coef(
    coef: float,
    mean_entropy: float,
    eta: float,
    h_min: float,
    h_max: float,
    coef_min: float,
    coef_max: float,
) -> float:
    """SPEC §7: `α_{k+1} = clip(α_k − η·(H̄_k − (H_min+H_max)/2), α_min, α_max)`."""
    target = (h_min + h_max) / 2
    return min(max(coef - eta * (mean_entropy - target), coef_min), coef_max)


@dataclass
class EntropyController:
    """The state α_k of the SPEC §7 controller and its band; `step` applies one update.

    The band is model- and tokenizer-specific (measure the SFT checkpoint's entropy first);
    eta = 0 with coef = 0 switches entropy control off (record that in the passport).
    """

    coef: float = 0.0
    """α_k, the current entropy-bonus coefficient (the loss gets −α·H)."""
    eta: float = 0.005
    """η, the controller's step size per unit of entropy error (nats)."""
    h_min: float = 0.2
    """H_min, lower edge of the target entropy band (nats per token)."""
    h_max: float = 0.6
    """H_max, upper edge of the band; the controller aims at (H_min + H_max)/2."""
    coef_min: float = 0.0
    """α_min: the coefficient never goes below (0: never an entropy *penalty*)."""
    coef_max: float = 0.01
    """α_max: the coefficient never goes above (a large bonus makes entropy explode)."""

    def __post_init__(self) -> None:
        if self.h_min > self.h_max:
            raise ConfigError(f"h_max: must be >= h_min ({self.h_min}), got {self.h_max}")
        if self.eta < 0:
            raise ConfigError(f"eta: must be >= 0, got {self.eta}")
        if not self.coef_min <= self.coef <= self.coef_max:
            raise ConfigError(
                f"coef: must lie in [coef_min, coef_max] = [{self.coef_min}, {self.coef_max}], "
                f"got {self.coef}"
            )

    @property
    def enabled(self) -> bool:
        """False when the coefficient is pinned at 0 (no bonus, no movement)."""
        return not (self.eta == 0 and self.coef == 0)

    def step(self, mean_entropy: float) -> float:
        """Update α from this step's mean token entropy H̄_k; return the new α_{k+1}."""
        self.coef = update_entropy_coef(
            self.coef,
            float(mean_entropy),
            self.eta,
            self.h_min,
            self.h_max,
            self.coef_min,
            self.coef_max,
        )
        return self.coef
