"""Importance ratios of the GRPO surrogate (SPEC §7), token-, sequence- and turn-level.

All take logprobs `[B, T]` of the sampled tokens under the policy being trained (π_θ, with
gradient), the logprobs they are compared against (π_old: the recorded behaviour logprobs,
or the trainer's own recomputation of them on the first pass, detached) and the loss mask
`[B, T]`. Masked tokens get log-ratio 0 (ratio 1) and contribute nothing to any sum or mean.

On the first pass of fresh data π_old = sg(π_θ), so every ratio is exactly 1 while its
gradient is ∇log π_θ: the clipped surrogate reduces to the policy-gradient form A·∇log π
(SPEC §7's built-in self-check).
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.rl.masking import as_mask, masked, sum_per_turn, turn_index


def log_ratio(logprobs: Tensor, old_logprobs: Tensor, mask: Tensor) -> Tensor:
    """`log ρ_{i,t} = log π_θ(o_{i,t}|·) − log π_old(o_{i,t}|·)`, 0 on masked tokens. `[B, T]`."""
    if logprobs.shape != old_logprobs.shape:
        raise ValueError(
            f"logprobs {tuple(logprobs.shape)} and old logprobs {tuple(old_logprobs.shape)} differ"
        )
    m = as_mask(mask, logprobs)
    return masked(logprobs - old_logprobs.detach(), m)


def token_ratio(logprobs: Tensor, old_logprobs: Tensor, mask: Tensor) -> Tensor:
    """SPEC §7 token ratio `ρ_{i,t} = π_θ(o_{i,t}|·)/π_old(o_{i,t}|·)`, 1 on masked tokens.

    `[B, T]`.
    """
    return torch.exp(log_ratio(logprobs, old_logprobs, mask))


def sequence_ratio(logprobs: Tensor, old_logprobs: Tensor, mask: Tensor) -> Tensor:
    """SPEC §7 GSPO sequence ratio `s_i = exp(mean_t log ρ_{i,t})` over the policy tokens. `[B]`.

    A sequence with no policy token gets s_i = 1. To use it in the token-shaped surrogate,
    broadcast `s[:, None].expand_as(logprobs)` and clip it with the GSPO range; aggregate by
    `seq_mean` to get GSPO's per-sequence objective exactly.
    """
    m = as_mask(mask, logprobs)
    total = log_ratio(logprobs, old_logprobs, m).sum(dim=-1)
    return torch.exp(total / m.sum(dim=-1).clamp(min=1))


def turn_ratio(logprobs: Tensor, old_logprobs: Tensor, mask: Tensor, turn_ids: Tensor) -> Tensor:
    """SPEC §7 turn-level ratio `r_t = exp(Σ_{k∈I_t}(log π_θ − log π_beh))`, broadcast to the
    tokens of turn t. `[B, T]`; 1 on masked tokens.

    turn_ids: `[B, T]` integer turn index (≥ 0) of each token within its episode; values at
    masked tokens are ignored. I_t = the policy tokens of turn t.
    """
    m = as_mask(mask, logprobs)
    ids = turn_index(turn_ids, m)
    per_turn = sum_per_turn(log_ratio(logprobs, old_logprobs, m), ids)
    return masked(torch.exp(per_turn.gather(1, ids)), m, 1.0)
