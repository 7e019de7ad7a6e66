"""The behaviour distribution, teacher-forced: one code path for "log π(token | prefix)".

`sequence_logprobs` scores every next token of whole (multi-turn) sequences with one forward
pass, under exactly the processed distribution the engines sample from
(`rlvr.engines.sampling.process`: grammar mask, temperature, top-k, top-p, in fp32). The SFT loss,
`TorchEngine.score` and the RL ratio all call it, so "the behaviour logprob" is defined once.

Alignment: position j of the result ([B, T-1]) is log π(input_ids[:, j+1] | input_ids[:, :j+1]),
the logprob of token j+1; `aligned=True` prepends a zero column so index t is token t's
logprob, the layout of the passport's `logprobs` column (0 on the first, never-predicted
token).

Cost: the decoder runs once over all positions; the LM head (a [N, V] matmul, the largest
activation) runs only on the selected positions (`only`, e.g. the loss mask: policy tokens
are a minority of an agent transcript) and, in chunks of `chunk_tokens` rows, so peak memory
is one chunk of logits. With gradients on, each chunk is checkpointed: its logits are
recomputed in backward instead of being stored for the whole batch.

Packed (padding-free) rows: given the rows' real `lengths`, the decoder runs once over the rows
concatenated into a single row, positions restarting at 0 at each (transformers turns such
position ids into a block-diagonal causal mask, `masking_utils.find_packed_sequence_indices`),
so no layer computes a pad. What is selected and returned is laid out as for the padded rows,
so a loss reads the same tensors either way. Eager/SDPA attention still forms the whole
block-masked [S, S] score matrix of the packed row (flash-attention's varlen kernel would not);
every other layer's work and activation memory falls from rows x longest row to the real
tokens.

Entropy is optional and, when asked for, can be computed without a graph
(`entropy_grad=False`): a trainer that only *logs* the entropy (bonus coefficient 0) then pays
one no-grad pass over the processed distribution instead of keeping its [N, V]
intermediates alive for a backward that never uses them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch.utils.checkpoint import checkpoint

from rlvr.engines.base import SamplingParams
from rlvr.engines.sampling import entropy as processed_entropy
from rlvr.engines.sampling import process

# Architectures whose causal-LM forward is `lm_head(decoder(x))` with nothing in between
# (no logit soft-capping / scaling), so the head may be applied to selected positions only.
HEAD_SPLIT_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")
# Rows of logits per head chunk: 4096 x a 152k vocabulary in fp32 is ~2.5 GB.
DEFAULT_CHUNK_TOKENS = 4096


@dataclass
class TokenScores:
    """Teacher-forced scores of the next tokens; 0 where not selected.

    logprobs: [B, T-1] (or [B, T] with `aligned`) fp32, processed-distribution logprobs.
    entropy:  same shape, entropy (nats) of the processed next-token distribution, or None.
    selected: same shape, bool: the positions that were computed.
    """

    logprobs: torch.Tensor
    entropy: torch.Tensor | None
    selected: torch.Tensor


def logprobs_from_logits(logits: torch.Tensor, targets: torch.Tensor,
                         params: SamplingParams | None = None, *, with_entropy: bool = False,
                         entropy_grad: bool = True, allowed: torch.Tensor | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """[N, V] logits, [N] target ids -> ([N] processed logprob of each target, [N] entropy or
    None). The pure math under `sequence_logprobs` (and what the loss-mask tests probe).
    `entropy_grad=False`: the entropy is computed under no_grad (same values, no graph).
    `allowed`: [N, W] int32 grammar bitmasks (`params.grammar`), applied before the knobs."""
    params = params or SamplingParams()
    lp = process(logits, params, allowed)
    tok = lp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if not with_entropy:
        return tok, None
    if entropy_grad:
        return tok, processed_entropy(lp)
    with torch.no_grad():
        return tok, processed_entropy(lp.detach())


def sequence_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                      params: SamplingParams | None = None, *,
                      position_ids: torch.Tensor | None = None,
                      only: torch.Tensor | None = None, with_entropy: bool = False,
                      entropy_grad: bool = True, aligned: bool = False,
                      chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
                      allowed: torch.Tensor | None = None,
                      lengths: Sequence[int] | None = None,
                      head_calls: Callable[[int], int] | None = None) -> TokenScores:
    """Teacher-forced processed logprobs (and entropies) of every next token.

    * `input_ids` [B, T] long; `attention_mask` [B, T] (1 = real token; any padding side) or
      None (no padding, or right padding whose pads are never selected: causal attention
      keeps real tokens from seeing later pads); `position_ids` [B, T] when left-padded.
    * `params`: the sampling params whose processed distribution is scored (None: the raw
      softmax, temperature 1 — what SFT trains).
    * `only` [B, T-1] bool: score just these next-token positions (default: every position
      whose token and predicting token are both real).
    * `with_entropy`: also the entropy of each processed next-token distribution;
      `entropy_grad=False` computes it without a graph (a logged metric, not a loss term).
    * `allowed`: [N, W] int32 grammar bitmasks of the N selected positions in row-major
      order (`only.nonzero()`'s), for samples drawn under `params.grammar`
      (`rlvr.engines.constraint.TokenGrammar.replay` recomputes them from the tokens).
    * `lengths`: the real length of each right-padded row: the forward runs on the rows
      packed into one (module docstring); needs `attention_mask` and `position_ids` None and
      a model that takes packed positions (`packing_error`).
    * `head_calls`: for a model whose head gathers its weights from other processes at each
      call (DeepSpeed ZeRO-3, a collective): given this forward's chunk count, the count every
      process uses; the selected rows are cut into exactly that many chunks, some maybe empty.

    Gradient-enabled unless the caller runs it under no_grad / inference_mode.
    """
    B, T = input_ids.shape
    if only is None:
        sel = torch.ones(B, T - 1, dtype=torch.bool, device=input_ids.device)
        if attention_mask is not None:
            real = attention_mask.bool()
            sel = real[:, 1:] & real[:, :-1]
    else:
        if tuple(only.shape) != (B, T - 1):
            raise ValueError(f"only: shape {tuple(only.shape)}, expected {(B, T - 1)}")
        sel = only.bool()
    rows, cols = sel.nonzero(as_tuple=True)
    targets = input_ids[:, 1:][rows, cols]  # [N]
    if allowed is not None and allowed.shape[0] != targets.shape[0]:
        raise ValueError(f"allowed: {allowed.shape[0]} grammar masks for {targets.shape[0]} "
                         "selected positions")
    at = (rows, cols)  # where the selected positions' features are in the forward's output
    extra = {}
    if lengths is not None:
        if attention_mask is not None or position_ids is not None:
            raise ValueError("lengths (packed rows) take no attention_mask or position_ids")
        input_ids, position_ids, flat = pack_rows(input_ids, lengths, sel)
        at, extra = (torch.zeros_like(flat), flat), {"use_cache": False}
    if _head_split_ok(model):
        hidden = model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask,
                                     position_ids=position_ids, **extra).last_hidden_state
        feats, head = hidden[at], model.get_output_embeddings()  # [N, H]
    else:  # generic causal LM: its own forward computes every logit
        logits = model(input_ids=input_ids, attention_mask=attention_mask,
                       position_ids=position_ids, **extra).logits
        feats, head = logits[at], None  # [N, V]
    lp, ent = _chunked_scores(feats, targets, head, params, with_entropy, chunk_tokens,
                              entropy_grad, allowed, head_calls)
    out_lp = torch.zeros(B, T - 1, dtype=torch.float32, device=input_ids.device)
    out_lp = out_lp.index_put((rows, cols), lp)
    out_ent = None
    if with_entropy:
        out_ent = torch.zeros_like(out_lp).index_put((rows, cols), ent)
    if aligned:
        pad = lambda x: torch.cat([x.new_zeros(B, 1), x], 1) if x is not None else None  # noqa: E731
        out_lp, out_ent = pad(out_lp), pad(out_ent)
        sel = torch.cat([sel.new_zeros(B, 1), sel], 1)
    return TokenScores(logprobs=out_lp, entropy=out_ent, selected=sel)


def pack_rows(input_ids: torch.Tensor, lengths: Sequence[int], sel: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded rows [B, T] with real `lengths` -> the packed row [1, S] (S = sum of
    lengths), its position ids [1, S] (0 at each row's start) and, for each selected
    next-token position of `sel` [B, T-1] (row-major), its index in the packed row."""
    B, T = input_ids.shape
    if len(lengths) != B or not all(1 <= n <= T for n in lengths):
        raise ValueError(f"lengths: {list(lengths)} for {B} rows of {T} tokens")
    n = torch.as_tensor(list(lengths), device=input_ids.device)
    real = torch.arange(T, device=input_ids.device)[None, :] < n[:, None]  # [B, T]
    if bool((sel & ~real[:, 1:]).any()):
        raise ValueError("only: a selected position lies past its row's length")
    where = real.flatten().cumsum(0).view(B, T) - 1  # packed index of each real token
    return (input_ids[real][None], (real.cumsum(1) - 1)[real][None],
            where[:, :-1][sel])


def packing_error(model) -> str | None:
    """Why `model` cannot take packed rows (`sequence_logprobs(lengths=...)`), or None: two
    short rows scored packed and apart must agree. A model whose attention ignores
    position-derived packing (an implementation without transformers' packed-sequence mask)
    lets the second row attend to the first, and the scores differ."""
    ids = torch.tensor([[3, 5, 7, 9], [4, 6, 8, 0]], device=next(model.parameters()).device)
    ids = ids % int(model.config.vocab_size)
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            apart = sequence_logprobs(model, ids[1:, :3], chunk_tokens=8).logprobs
            only = torch.tensor([[True] * 3, [True, True, False]], device=ids.device)
            packed = sequence_logprobs(model, ids, only=only, lengths=[4, 3],
                                       chunk_tokens=8).logprobs
    except Exception as e:  # noqa: BLE001 - any failure is the reason to report
        return f"{type(model).__name__} failed on packed rows: {type(e).__name__}: {e}"
    finally:
        model.train(was)
    if not torch.allclose(packed[1, :2], apart[0], atol=1e-4, rtol=1e-4):
        return (f"{type(model).__name__} ({model.config.model_type}, attention "
                f"{getattr(model.config, '_attn_implementation', '?')}) lets packed rows see "
                "each other: its attention takes no packed positions")
    return None


def _head_split_ok(model) -> bool:
    cfg = getattr(model, "config", None)
    if getattr(cfg, "model_type", None) not in HEAD_SPLIT_MODEL_TYPES:
        return False
    if getattr(cfg, "final_logit_softcapping", None) or getattr(cfg, "logit_scale", None):
        return False
    try:
        return model.get_decoder() is not None and model.get_output_embeddings() is not None
    except (AttributeError, NotImplementedError):
        return False


def _chunked_scores(feats, targets, head, params, with_entropy, chunk_tokens,
                    entropy_grad=True, allowed=None, head_calls=None):
    """Head (if any) + processing over row chunks of feats [N, H or V] (and of the grammar
    bitmasks `allowed` [N, W]); -> [N], [N] | None. With gradients on and more than one
    chunk, each chunk is checkpointed. `head_calls`: see `sequence_logprobs`."""
    def score(f, t, a=None):
        logits = head(f) if head is not None else f
        lp, ent = logprobs_from_logits(logits, t, params, with_entropy=with_entropy,
                                       entropy_grad=entropy_grad, allowed=a)
        return (lp, ent) if with_entropy else (lp,)

    N = feats.shape[0]
    k = max(1, -(-N // chunk_tokens))  # chunks
    size = chunk_tokens                # rows per chunk
    if head_calls is not None:         # as many chunks as the busiest process: spread evenly
        k = head_calls(k)
        size = max(1, -(-N // k))
    cut = lambda x, s: None if x is None else x[s:s + size]  # noqa: E731
    if k == 1:
        parts = [score(feats, targets, allowed)]
    else:
        grad = torch.is_grad_enabled() and feats.requires_grad
        parts = [checkpoint(score, cut(feats, s), cut(targets, s), cut(allowed, s),
                            use_reentrant=False) if grad
                 else score(cut(feats, s), cut(targets, s), cut(allowed, s))
                 for s in range(0, k * size, size)]
    lp = torch.cat([p[0] for p in parts])
    ent = torch.cat([p[1] for p in parts]) if with_entropy else None
    return lp, ent
