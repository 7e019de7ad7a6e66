"""What the behaviour policy looked like on a step's rollouts (SPEC §7 dashboard): the entropy
of its processed next-token distribution (also split into tool-call and reasoning regions)
and the sampler-vs-trainer logprob mismatch, gathered in running sums (`BehaviourTally`) so
the update's own first forward can measure the rows it trains on and a no-grad pass the rest."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

from rlvr.chat_format import TOOL_CALL
from rlvr.engines.base import SamplingParams
from rlvr.engines.constraint import TokenGrammar
from rlvr.engines.logprobs import sequence_logprobs
from rlvr.rl.importance import logprob_mismatch
from rlvr.train.backend import idle_forwards
from rlvr.train.batching import micro_batches
from rlvr.train.grpo_batch import check_scoring, collate, seq_of
from rlvr.train.grpo_config import GRPOParams


@dataclass
class BehaviourTally:
    """Running sums of the behaviour-policy metrics (`behaviour_metrics`) over the policy
    tokens scored so far, so the rows the update trains on can be measured inside the
    update's own first forward pass (no second forward) and the other drawn rows by a
    no-grad pass; `metrics()` gives the same numbers as one pass over all of them.

    With `call_token` (the policy's `<tool_call>` id) the entropy is also split by region:
    `train/entropy_call` over the tool-call tokens of each turn (`call_region`), and
    `train/entropy_reasoning` over the rest. The reward is decided by the few call tokens
    while the free text around them drifts, so the all-token mean can rise while the actions
    collapse (LEARNING.md, "Where the entropy went")."""

    entropy_sum: float = 0.0
    tokens: float = 0.0
    trainer: list[torch.Tensor] = field(default_factory=list)    # [n] logprobs per batch
    behaviour: list[torch.Tensor] = field(default_factory=list)  # [n] recorded, same tokens
    call_token: int | None = None
    call_entropy_sum: float = 0.0
    call_tokens: float = 0.0

    def add(self, entropy: torch.Tensor, logprobs: torch.Tensor, behaviour: torch.Tensor,
            mask: torch.Tensor, ids: torch.Tensor, turns: torch.Tensor) -> None:
        """One scored batch: [b, T] entropy, trainer and behaviour logprobs, policy mask (the
        `grpo_batch.collate` layout); `ids` [b, T+1] and `turns` [b, T] for the region split."""
        ent = entropy.detach()
        self.entropy_sum += float(ent[mask].sum())
        self.tokens += float(mask.sum())
        self.trainer.append(logprobs.detach()[mask])
        self.behaviour.append(behaviour[mask])
        if self.call_token is not None:
            region = call_region(ids, mask, turns, self.call_token)
            self.call_entropy_sum += float(ent[region].sum())
            self.call_tokens += float(region.sum())

    def add_batch(self, sc, batch: Mapping[str, torch.Tensor]) -> None:
        """`add` for a `sequence_logprobs` result `sc` on a collated batch."""
        self.add(sc.entropy, sc.logprobs, batch["behaviour"], batch["mask"], batch["ids"],
                 batch["turns"])

    @classmethod
    def merged(cls, tallies: Sequence[BehaviourTally]) -> BehaviourTally:
        """One tally of the rows several (ranks') tallies scored."""
        return cls(sum(t.entropy_sum for t in tallies), sum(t.tokens for t in tallies),
                   [x for t in tallies for x in t.trainer],
                   [x for t in tallies for x in t.behaviour],
                   tallies[0].call_token if tallies else None,
                   sum(t.call_entropy_sum for t in tallies), sum(t.call_tokens for t in tallies))

    def metrics(self) -> dict[str, float]:
        if not self.trainer:
            return {}
        t, beh = torch.cat(self.trainer)[None], torch.cat(self.behaviour)[None]
        mm = logprob_mismatch(t, beh, torch.ones_like(t, dtype=torch.bool))
        out = {"train/entropy": self.entropy_sum / self.tokens if self.tokens else 0.0,
               **{f"train/mismatch/{k}": v for k, v in mm.items()}}
        if self.call_token is not None:  # a region without tokens has no mean: no key
            if self.call_tokens:
                out["train/entropy_call"] = self.call_entropy_sum / self.call_tokens
            if self.tokens > self.call_tokens:
                out["train/entropy_reasoning"] = ((self.entropy_sum - self.call_entropy_sum)
                                                  / (self.tokens - self.call_tokens))
        return out


def call_token_id(tokenizer) -> int | None:
    """The id of the chat format's `<tool_call>` token in `tokenizer`, or None where it has
    no such single token (then the entropy is not split by region)."""
    if tokenizer is None:
        return None
    tid = tokenizer.convert_tokens_to_ids(TOOL_CALL)
    if tid is None or tid == tokenizer.unk_token_id:
        return None
    return int(tid)


def call_region(ids: torch.Tensor, mask: torch.Tensor, turns: torch.Tensor,
                call_token: int) -> torch.Tensor:
    """[b, T] bool, `grpo_batch.collate`'s next-token layout (position j = token j+1): the
    policy tokens from their turn's `<tool_call>` on (the call, `</tool_call>`, end of turn).
    ids: [b, T+1]; mask, turns: [b, T]. Only a sampled (policy) `<tool_call>` opens the
    region, so the token in a prompt or an observation never does."""
    is_call = (ids[:, 1:] == call_token) & mask
    pos = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = torch.where(is_call, pos, torch.full_like(pos, -1)).cummax(dim=1).values
    same_turn = turns.gather(1, last.clamp(min=0)) == turns
    return mask & (last >= 0) & same_turn


def same_in_train_mode(model) -> bool:
    """Whether the model computes the same function in train and eval mode (no active
    dropout), so a forward of the update (train mode) can stand in for the behaviour
    policy's (eval mode) in the logged metrics."""
    cfg = getattr(model, "config", None)
    for key in ("attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop",
                "attn_pdrop", "dropout"):
        if float(getattr(cfg, key, 0.0) or 0.0) > 0:
            return False
    return not any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0
                   for m in model.modules())


def behaviour_metrics(model, rows: Sequence[Mapping[str, Any]], scoring: SamplingParams,
                      params: GRPOParams, tally: BehaviourTally | None = None,
                      grammar: TokenGrammar | None = None) -> dict[str, float]:
    """Entropy of the processed next-token distribution on every drawn rollout's policy
    tokens (the behaviour policy: synchronous, so the trainer's weights before the update)
    and the sampler/trainer logprob mismatch over the same tokens (logged, never assumed
    zero). No gradient. `tally`: sums already gathered for other rows (the update's own
    forward, `grpo_update.update_policy`), to which these rows are added."""
    return behaviour_tally(model, rows, scoring, params, tally, grammar).metrics()


def behaviour_tally(model, rows: Sequence[Mapping[str, Any]], scoring: SamplingParams,
                    params: GRPOParams, tally: BehaviourTally | None = None,
                    grammar: TokenGrammar | None = None,
                    call_token: int | None = None, backend=None) -> BehaviourTally:
    """`behaviour_metrics`' no-grad pass (eval mode) over `rows`, into `tally` (or a new one,
    splitting the entropy at `call_token` when given). `backend`: this rank's, whose
    ranks each score their share of the rows (under ZeRO-3 a rank with fewer forwards
    makes idle ones: a forward needs every rank)."""
    check_scoring(scoring, grammar)
    tally = tally if tally is not None else BehaviourTally(call_token=call_token)
    rows = [r for r in rows if r["logprobs_kind"] == "behaviour" and sum(r["loss_mask"]) > 0]
    seqs = [seq_of(r, 0.0, grammar) for r in rows]
    micros = micro_batches([len(s.ids) for s in seqs], range(len(seqs)),
                           params.micro_batch_tokens, packed=params.packed)
    idle = backend.extra_forwards(len(micros)) if backend is not None else 0
    head_calls = backend.head_calls if backend is not None else None
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for micro in micros:
                b = collate(seqs, micro, params.device)
                sc = sequence_logprobs(model, b["ids"], None, scoring, only=b["mask"],
                                       allowed=b["allowed"], with_entropy=True,
                                       chunk_tokens=params.head_chunk_tokens,
                                       head_calls=head_calls,
                                       lengths=b["lengths"] if params.packed else None)
                tally.add_batch(sc, b)
        idle_forwards(model, idle, params.device, head_calls)
    finally:
        model.train(was_training)
    return tally
