"""Decoding math as pure functions: raw logits -> the *processed* log-distribution a token is
actually drawn from, and the draw itself.

SPEC §3 token exactness: the behaviour logprob stored with a sampled token is
`process_logits(logits, params)[token]`, i.e. the log-probability under the distribution
after temperature, top-k and top-p — not under the raw softmax. Everything here depends
only on the logits of one step, so `TorchEngine.score` (and the trainer) can recompute the
same numbers from a teacher-forced forward pass.

Conventions (documented because the trainer must follow them too):
* order: the grammar mask (`Decoding.grammar`, `rlvr.engines.constraint`: disallowed tokens
  get -inf logits, as vLLM applies its structured-output bitmask before its sampler), then
  temperature, then top-k, then top-p (as Hugging Face's default warpers);
* top-k keeps every logit >= the k-th largest (ties at the boundary are kept);
* top-p keeps the *minimal nucleus*: tokens in descending probability order up to and
  including the first one at which the cumulative mass reaches `top_p`; the top token is
  always kept, and so is every token tied in probability with the last one kept;
* temperature 0 means greedy: the behaviour distribution is the point mass on the argmax
  (first index on ties), so a sampled token's logprob is exactly 0.0 and any other is -inf;
* all processing runs in fp32, whatever the model dtype.
"""
from __future__ import annotations

import numpy as np
import torch

from rlvr.engines.base import SamplingParams
from rlvr.errors import ConfigError

NEG_INF = float("-inf")


def check_params(params: SamplingParams, vocab_size: int | None = None) -> None:
    """Refuse sampling params an engine cannot honour, naming the field. The knobs and
    `max_new_tokens` were validated when `params` was built (`engines.base.Decoding`); what
    is left needs the engine's vocabulary."""
    if vocab_size is not None:
        bad = [t for t in params.stop_token_ids if not 0 <= t < vocab_size]
        if bad:
            raise ConfigError(f"sampling.stop_token_ids: {bad} outside the vocabulary (size {vocab_size})")


def allowed_mask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[..., W] int32 token bitmask (bit j of word w: token 32w + j is allowed; the layout of
    `rlvr.engines.constraint`) -> [..., vocab_size] bool."""
    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    bits = (bitmask.unsqueeze(-1) >> shifts) & 1  # [..., W, 32]
    return bits.flatten(-2)[..., :vocab_size].bool()


def process_logits(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0,
                   top_p: float = 1.0, allowed: torch.Tensor | None = None) -> torch.Tensor:
    """[..., V] logits -> [..., V] fp32 log-probabilities of the processed distribution
    (-inf outside its support). Each row depends only on its own logits (and its row of
    `allowed`, a [..., W] int32 grammar bitmask: tokens it does not allow are removed
    first). Differentiable in `logits` (the masks are computed from detached values), so a
    trainer can use it too."""
    x = logits.float()
    if allowed is not None:
        x = x.masked_fill(~allowed_mask(allowed.to(x.device), x.shape[-1]), NEG_INF)
    if temperature == 0:
        out = torch.full_like(x, NEG_INF)
        return out.scatter(-1, x.detach().argmax(-1, keepdim=True), 0.0)
    if temperature != 1.0:
        x = x / temperature
    vocab = x.shape[-1]
    if 0 < top_k < vocab:
        kth = _sorted_desc(x.detach())[..., top_k - 1: top_k]
        x = x.masked_fill(x.detach() < kth, NEG_INF)
    if top_p < 1.0:
        x = x.masked_fill(_outside_nucleus(x.detach(), top_p), NEG_INF)
    return torch.log_softmax(x, dim=-1)


def _sorted_desc(x: torch.Tensor) -> torch.Tensor:
    """Values of each row in descending order. On CPU numpy's value-only sort is ~50x faster
    than `torch.sort` (which always builds an index and dominates a decode step)."""
    if x.device.type == "cpu":
        return torch.from_numpy(np.ascontiguousarray(np.sort(x.numpy(), axis=-1)[..., ::-1]))
    return torch.sort(x, dim=-1, descending=True).values


def _outside_nucleus(x: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask of tokens outside the minimal top-p nucleus of softmax(x): the nucleus is every
    token whose probability is >= tau, tau being the smallest probability of the shortest
    descending-order prefix whose mass reaches top_p (a value threshold, so tokens tied with
    tau are all kept and the result does not depend on how a sort orders ties)."""
    probs = torch.softmax(x, dim=-1)
    desc = _sorted_desc(probs)
    mass_before = desc.cumsum(-1)
    mass_before = torch.cat([torch.zeros_like(mass_before[..., :1]), mass_before[..., :-1]], -1)
    n_keep = (mass_before < top_p).sum(-1, keepdim=True)  # >= 1: mass before the top is 0
    tau = desc.gather(-1, n_keep - 1)
    return probs < tau


def process(logits: torch.Tensor, params: SamplingParams,
            allowed: torch.Tensor | None = None) -> torch.Tensor:
    """`process_logits` under `params`' knobs; `allowed`: the grammar bitmask of each row
    when `params.grammar` constrains it (the caller computed it: `rlvr.engines.constraint`)."""
    return process_logits(logits, params.temperature, params.top_k, params.top_p, allowed)


def sample_uniforms(seed: int, sample_seed: int, n: int) -> np.ndarray:
    """The first n draws of one sample's own random stream, keyed by (run seed, sample seed)
    alone: float32 in [0, 1), the value below 1 where rounding to float32 would reach it.
    Every token engine's decode (`TorchEngine.generate`, `DecodeStream`) consumes draw t at
    the sample's token t, so a sample does not depend on the batch or schedule around it."""
    u = np.random.default_rng([seed % 2**63, int(sample_seed) % 2**63]).random(n)
    return np.minimum(u.astype(np.float32), np.float32(1 - 2**-24))


def sample(logprobs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw, one per row: [B, V] processed logprobs, [B] uniforms in [0, 1) ->
    [B] token ids. One batched op per step; the caller owns the random stream, which is what
    makes a sample depend only on its own seed, not on the batch around it. A token outside
    the support (probability 0) can never be returned."""
    probs = logprobs.exp()
    cdf = probs.cumsum(-1)
    total = cdf[:, -1:]
    target = uniforms.to(cdf.dtype).unsqueeze(-1) * total
    # strictly below the total mass, so the first cdf entry above it always exists and
    # belongs to a token whose probability is > 0
    target = torch.minimum(target, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, target, right=True).squeeze(-1)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, params: SamplingParams,
                   allowed: torch.Tensor | None = None) -> torch.Tensor:
    """Processed logprob of `tokens` ([...]) under `logits` ([..., V]): what a trainer
    recomputes for the ratio against the stored behaviour logprobs."""
    return process(logits, params, allowed).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def entropy(logprobs: torch.Tensor) -> torch.Tensor:
    """[..., V] processed logprobs (-inf outside the support) -> [...] entropy in nats of that
    distribution, the one tokens are drawn from. Differentiable without NaNs: entries outside
    the support contribute exactly 0 and get zero gradient (0 * -inf never appears).

    Where every entry is finite (temperature > 0 without top-k / top-p: the default
    decoding) the masks are no-ops, so -sum(p log p) without them gives the same bits and
    gradients at ~1/3 of the cost (the masks are ~2/3 of an [N, V] entropy pass, the
    largest cost of a GRPO step after the matmuls); a row outside full support comes out NaN
    (0 * -inf) there, and only then is the masked form computed."""
    fast = -(logprobs.exp() * logprobs).sum(-1)
    if not torch.isnan(fast).any():
        return fast
    finite = torch.isfinite(logprobs)
    safe = logprobs.masked_fill(~finite, 0.0)
    return -(safe.exp().masked_fill(~finite, 0.0) * safe).sum(-1)
