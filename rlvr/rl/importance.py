"""Behaviour/trainer mismatch: truncated importance weights (TIS) and the mismatch metric
(SPEC §7 "Staleness"; §3 "Token exactness").

The sampler (vLLM, the torch engine, a stale policy version) and the trainer never produce
bit-identical logprobs: different kernels, batch layouts, top-p renormalisation, Δv > 0.
The surrogate's ratio is taken against π_old (the trainer's own recomputation on the first
pass), and the residual gap to the behaviour policy that really sampled the tokens is
corrected per token by

    w_{i,t} = min(π_old(o_{i,t}|·) / π_beh(o_{i,t}|·), C)

(a constant: no gradient). Truncation at C bounds the variance a rare token with tiny
behaviour probability would otherwise inject. The mismatch is measured and logged, never
assumed zero.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.rl.kl import k3
from rlvr.rl.masking import as_mask, masked, masked_mean
from rlvr.rl.ratio import log_ratio


def truncated_is_weights(
    old_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor, cap: float
) -> Tensor:
    """`w = min(π_old/π_beh, C)` per token, detached; 1 on masked tokens. `[B, T]`.

    old_logprobs: the trainer's logprobs of the sampled tokens before the update;
    behaviour_logprobs: the ones recorded at sampling time; cap: C > 0.
    """
    if cap <= 0:
        raise ValueError(f"TIS cap must be > 0, got {cap}")
    with torch.no_grad():
        w = torch.exp(log_ratio(old_logprobs.detach(), behaviour_logprobs, mask))
        return masked(torch.clamp(w, max=cap), as_mask(mask, w), 1.0)


def logprob_mismatch(
    trainer_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor
) -> dict[str, float]:
    """Mismatch metrics over policy tokens (all `[B, T]` inputs):

    * `logprob_abs_diff_mean` / `_max`: |log π_trainer − log π_beh|;
    * `mismatch_kl`: k3 estimate of KL(π_beh ‖ π_trainer) on the behaviour's own samples;
    * `ratio_outside_10pct`: share of tokens with π_trainer/π_beh outside [0.9, 1.1].
    """
    m = as_mask(mask, trainer_logprobs)
    with torch.no_grad():
        diff = log_ratio(trainer_logprobs.detach(), behaviour_logprobs, m)
        ratio = torch.exp(diff)
        outside = (ratio < 0.9) | (ratio > 1.1)
        return {
            "logprob_abs_diff_mean": float(masked_mean(diff.abs(), m)),
            "logprob_abs_diff_max": float(diff.abs().max()) if m.any() else 0.0,
            "mismatch_kl": float(masked_mean(k3(behaviour_logprobs, trainer_logprobs, m), m)),
            "ratio_outside_10pct": float(masked_mean(outside.to(diff.dtype), m)),
        }
