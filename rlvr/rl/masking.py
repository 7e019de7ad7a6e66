"""The loss mask as every RL formula applies it (SPEC §3 "Loss mask").

mask `[B, T]` (bool or 0/1): 1 only on tokens the policy sampled. Masked tokens enter
neither the loss, the ratio, the KL nor the length normaliser. Every token tensor is masked
*where it enters* a formula with `torch.where`, never by multiplying: a placeholder at a
masked position (0, 1, −inf, NaN — a placeholder logprob of 1 gives ratio e⁻¹, Flash-RL #19)
then changes neither the value nor the gradient, which is exactly 0 there.
"""

from __future__ import annotations

import torch
from torch import Tensor


def as_mask(mask: Tensor, like: Tensor) -> Tensor:
    """mask `[B, T]` as bool, checked against the token tensor `like` `[B, T]`."""
    if mask.shape != like.shape:
        raise ValueError(
            f"mask shape {tuple(mask.shape)} != token tensor shape {tuple(like.shape)}"
        )
    return mask.bool()


def masked(values: Tensor, mask: Tensor, fill: float = 0.0) -> Tensor:
    """`values` `[B, T]` where mask is set, `fill` elsewhere (value and gradient)."""
    return torch.where(as_mask(mask, values), values, torch.full_like(values, fill))


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of `values` `[B, T]` over the masked-in tokens (0-d; 0 when there are none)."""
    m = as_mask(mask, values)
    return masked(values, m).sum() / m.sum().clamp(min=1)


def turn_index(turn_ids: Tensor, mask: Tensor) -> Tensor:
    """turn_ids `[B, T]` (turn number ≥ 0 of each token in its episode) as long indices, 0 at
    masked tokens (whatever they held there: they are masked out of every per-turn sum)."""
    if turn_ids.shape != mask.shape:
        raise ValueError(
            f"turn_ids shape {tuple(turn_ids.shape)} != mask shape {tuple(mask.shape)}"
        )
    m = mask.bool()
    ids = torch.where(m, turn_ids.long(), torch.zeros_like(turn_ids, dtype=torch.long))
    if bool((ids < 0).any()):
        raise ValueError("turn_ids must be >= 0 on policy tokens")
    return ids


def sum_per_turn(values: Tensor, ids: Tensor) -> Tensor:
    """`[B, K]` sums of `values` `[B, T]` grouped by turn index `ids` `[B, T]`, K = max id + 1.
    Pass values already masked (0 at masked tokens)."""
    k = int(ids.max().item()) + 1 if ids.numel() else 1
    out = torch.zeros(values.shape[0], k, dtype=values.dtype, device=values.device)
    return out.scatter_add(1, ids, values)
