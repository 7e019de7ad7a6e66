"""Loss aggregation: per-token losses `[B, T]` → one scalar (SPEC §7, configurable, recorded).

    seq_mean       (1/B') Σ_i (1/|o_i|) Σ_t ℓ_{i,t}     original GRPO; B' = sequences with ≥ 1
                                                       policy token. Short sequences weigh more.
    token_mean     (1/Σ_i |o_i|) Σ_i Σ_t ℓ_{i,t}        DAPO; the normaliser is the number of
                                                       policy tokens (of the *global* batch
                                                       when `num_tokens` is given).
    constant       (1/C) Σ_i Σ_t ℓ_{i,t}                 Dr.GRPO, recommended: C fixed in
                                                       advance (G·L per group), so no sequence's
                                                       weight depends on its own length or its
                                                       batch-mates' — no bias toward long
                                                       failures, no dependence on micro-batch
                                                       layout. C is an explicit argument; record it.
    turn_mean      (1/Σ_i T_i) Σ_i Σ_t (1/|I_it|) Σ_{k∈I_it} ℓ_k    turn-level reduction for
                                                       multi-turn episodes (T_i turns of
                                                       episode i, I_it the policy tokens of
                                                       turn t).

|o_i| and every normaliser count policy tokens only (mask = 1): the 290 masked tokens of a
330-token episode with 40 policy tokens change neither the sum nor the normaliser (40).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from rlvr.errors import ConfigError
from rlvr.rl.masking import as_mask, masked, sum_per_turn, turn_index

Aggregation = Literal["seq_mean", "token_mean", "constant", "turn_mean"]
AGGREGATIONS: tuple[str, ...] = ("seq_mean", "token_mean", "constant", "turn_mean")


def token_count(mask: Tensor) -> Tensor:
    """Number of policy tokens, Σ_i |o_i| (0-d long): the token-mean normaliser."""
    return mask.bool().sum()


def seq_mean(loss: Tensor, mask: Tensor) -> Tensor:
    """`(1/B') Σ_i (1/|o_i|) Σ_t ℓ_{i,t}` over the B' sequences with ≥ 1 policy token.

    loss `[B, T]` → 0-d.
    """
    m = as_mask(mask, loss)
    lengths = m.sum(dim=-1)
    per_seq = masked(loss, m).sum(dim=-1) / lengths.clamp(min=1)
    return per_seq.sum() / (lengths > 0).sum().clamp(min=1)


def token_mean(loss: Tensor, mask: Tensor, num_tokens: int | None = None) -> Tensor:
    """`Σ ℓ / Σ_i |o_i|`. loss `[B, T]` → 0-d.

    num_tokens: the policy-token count of the whole optimizer step (all micro-batches and
    ranks) when this is one micro-batch of it; default: this batch's own count.
    """
    m = as_mask(mask, loss)
    if num_tokens is None:
        denominator = token_count(m).clamp(min=1)
    elif num_tokens > 0:
        denominator = num_tokens
    else:
        raise ValueError(f"num_tokens must be > 0, got {num_tokens}")
    return masked(loss, m).sum() / denominator


def constant_denominator(loss: Tensor, mask: Tensor, denominator: float) -> Tensor:
    """Dr.GRPO `Σ ℓ / C` with C given (`dr_grpo_denominator`). loss `[B, T]` → 0-d."""
    if denominator <= 0:
        raise ValueError(f"constant loss denominator must be > 0, got {denominator}")
    return masked(loss, as_mask(mask, loss)).sum() / denominator


def dr_grpo_denominator(num_sequences: int, max_response_tokens: int) -> int:
    """SPEC §7: Dr.GRPO's constant `G·L` per group (L = maximum response length), i.e.
    `num_sequences · L` for the whole step so each group keeps the weight 1/(G·L)·(1/N)."""
    if num_sequences <= 0 or max_response_tokens <= 0:
        raise ValueError("num_sequences and max_response_tokens must be > 0")
    return num_sequences * max_response_tokens


def turn_mean(loss: Tensor, mask: Tensor, turn_ids: Tensor) -> Tensor:
    """SPEC §7 `L_turn = (1/Σ_i T_i) Σ_i Σ_t (1/|I_it|) Σ_{k∈I_it} ℓ_k`.

    loss, turn_ids `[B, T]` → 0-d.
    A turn counts in T_i only if it has at least one policy token.
    """
    m = as_mask(mask, loss)
    ids = turn_index(turn_ids, m)
    sums = sum_per_turn(masked(loss, m), ids)
    counts = sum_per_turn(m.to(loss.dtype), ids)
    present = counts > 0
    per_turn = torch.where(present, sums / counts.clamp(min=1), torch.zeros_like(sums))
    return per_turn.sum() / present.sum().clamp(min=1)


def aggregate(
    loss: Tensor,
    mask: Tensor,
    mode: str,
    *,
    denominator: float | None = None,
    num_tokens: int | None = None,
    turn_ids: Tensor | None = None,
) -> Tensor:
    """Dispatch to the aggregation `mode` (one of AGGREGATIONS). loss `[B, T]` → 0-d."""
    if mode == "seq_mean":
        return seq_mean(loss, mask)
    if mode == "token_mean":
        return token_mean(loss, mask, num_tokens)
    if mode == "constant":
        if denominator is None:
            raise ValueError("aggregation 'constant' needs its denominator (record it)")
        return constant_denominator(loss, mask, denominator)
    if mode == "turn_mean":
        if turn_ids is None:
            raise ValueError("aggregation 'turn_mean' needs turn_ids")
        return turn_mean(loss, mask, turn_ids)
    raise ConfigError(f"loss_aggregation must be one of {list(AGGREGATIONS)}, got {mode!r}")
