"""KL to a frozen reference policy (SPEC §7), the k3 estimator per sampled token.

    k3 = u − log u − 1,   u = π_ref(o_t|·)/π_θ(o_t|·)

k3 is ≥ 0 for every u (u − 1 ≥ log u), exactly 0 when π_ref = π_θ, and unbiased for
KL(π_θ ‖ π_ref) under samples from π_θ. β = 0 is legitimate (TRL's default, Dr.GRPO's
recipe): then the term is skipped and no reference model needs loading — `uses_reference`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.rl.masking import as_mask, masked


def uses_reference(beta: float) -> bool:
    """Whether a KL coefficient β needs a reference model at all (β = 0: none is loaded)."""
    if beta < 0:
        raise ValueError(f"KL coefficient beta must be >= 0, got {beta}")
    return beta > 0


def k3(logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor) -> Tensor:
    """SPEC §7 `u − log u − 1` with `log u = log π_ref − log π_θ`, per token; 0 on masked. `[B, T]`.

    logprobs: π_θ of the sampled tokens (with gradient); ref_logprobs: π_ref (constant).
    """
    if logprobs.shape != ref_logprobs.shape:
        raise ValueError(
            f"logprobs {tuple(logprobs.shape)} and ref logprobs {tuple(ref_logprobs.shape)} differ"
        )
    m = as_mask(mask, logprobs)
    log_u = masked(ref_logprobs.detach() - logprobs, m)
    return masked(torch.exp(log_u) - log_u - 1, m)
