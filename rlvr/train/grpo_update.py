"""The SPEC §7 update of one GRPO loop step: `epochs` x `mini_batches` optimizer steps of
`rlvr.rl.loss.grpo_loss` on the accepted groups (`update_policy`), and the training half of a
loop step around it — the behaviour metrics of every drawn row (`train_on`).

The pieces, each in its own helper: the rank layout (which micro-batches this rank runs, how
many backward calls every rank makes: `rank_layout`), π_old and the reference before the
first optimizer step (`_old_and_reference`), the loss over one mini-batch's micro-batches
(`_Update.mini_batch`) with its fixed normalisers (`_normalisers`), the idle backward passes
of a rank whose shard ran out (`_idle_loss`), and the metrics summed over micro-batches
(`_Sums`) and merged over ranks (`_merge_metrics`).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

from rlvr.engines.base import SamplingParams
from rlvr.engines.constraint import TokenGrammar
from rlvr.engines.logprobs import sequence_logprobs
from rlvr.rl.loss import GRPOLossConfig, grpo_loss
from rlvr.train.backend import idle_forwards, is_sharded
from rlvr.train.batching import micro_batches
from rlvr.train.grpo_batch import (Seq, check_scoring, collate, rank_groups, sequences,
                                   split_groups)
from rlvr.train.grpo_behaviour import BehaviourTally, behaviour_tally, same_in_train_mode
from rlvr.train.grpo_config import GRPOParams
from rlvr.train.lora import AdaptersOff, reference_model


def lr_at(optimizer_step: int, params: GRPOParams) -> float:
    """Linear warmup over `warmup_steps` optimizer steps, then constant."""
    if optimizer_step < params.warmup_steps:
        return params.learning_rate * (optimizer_step + 1) / (params.warmup_steps + 1)
    return params.learning_rate


def train_on(model, backend, groups: Sequence[Mapping[str, Any]], params: GRPOParams,
             scoring: SamplingParams, reference, entropy_coef: float, policy_step: int, *,
             grammar: TokenGrammar | None = None,
             call_token: int | None = None) -> dict[str, float]:
    """The training half of a loop step on its drawn groups: the behaviour metrics of every
    drawn rollout at the pre-update weights (`behaviour_metrics`) and, if a group was
    accepted, the update on the accepted ones (`update_policy`; else
    `train/optimizer_steps` = 0). The rows the update trains on are measured inside its
    own first forward, the rest (dropped groups) by a no-grad pass before it, so no row is
    scored twice; a model whose train mode differs from eval mode (dropout) gets the
    separate eval-mode pass over every row instead. With several ranks each scores its share
    of those rows (and trains its groups) and the tallies are joined, so every rank returns
    the metrics of all of them. `grammar`: `scoring.grammar` compiled for the policy's
    tokenizer (rollouts sampled under it are scored under its masks). `call_token`: the
    policy's `<tool_call>` id (`call_token_id`): the entropy is also reported per region."""
    kept = [g for g in groups if g["status"] == "accepted"]
    fused = bool(kept) and same_in_train_mode(model)
    rest = [r for g in groups if not (fused and g["status"] == "accepted") for r in g["rows"]]
    # several ranks: each scores its share of the rows, the tallies are joined below
    tally = behaviour_tally(model, rest[backend.rank::backend.world], scoring, params,
                            grammar=grammar, call_token=call_token, backend=backend)
    if kept:
        out = update_policy(model, backend, kept, params, scoring, reference, entropy_coef,
                            policy_step, tally=tally if fused else None, grammar=grammar)
    else:
        out = {"train/optimizer_steps": 0.0}
    if backend.world > 1:
        tally = BehaviourTally.merged(backend.gather(tally))
    return {**out, **tally.metrics()}


def update_policy(model, backend, groups: Sequence[Mapping[str, Any]], params: GRPOParams,
                  scoring: SamplingParams, reference, entropy_coef: float,
                  policy_step: int, *, tally: BehaviourTally | None = None,
                  grammar: TokenGrammar | None = None) -> dict[str, float]:
    """`epochs` x `mini_batches` optimizer steps of the SPEC §7 loss on the accepted groups.

    π_old (the weights before this update) costs no forward of its own where it need not:
    the first mini-batch's gradient forward of epoch 0 runs at exactly those weights, so its
    detached logprobs are π_old (ρ ≡ 1 bit for bit on that pass) and are reused by later
    epochs; only mini-batches after the first (whose epoch-0 forward comes after an
    optimizer step) get a no-grad π_old forward, before the first step. So with one
    mini-batch every optimizer step is one forward + backward per micro-batch.

    The entropy enters the graph only when its coefficient is non-zero; at 0 it is not
    computed here at all (unless `tally` asks for the behaviour metrics, then without a
    graph). `tally`: receives the entropy and trainer-vs-behaviour logprobs of every trained
    token at the pre-update weights (from the forwards above), so the loop needs no extra
    behaviour pass over these rows (valid when `same_in_train_mode(model)`).

    Normalisers are the mini-batch's and fixed before its first micro-batch: `constant`
    uses C = loss.loss_denominator or G·L (sequences × max policy tokens of the
    mini-batch), `token_mean` the mini-batch's policy tokens; `seq_mean` / `turn_mean`
    micro-batch means are weighted by their share of sequences / turns. So the update does
    not depend on `micro_batch_tokens`.

    Data-parallel (`backend.world` > 1, the deepspeed backend under a launcher): every rank
    is handed the same `groups`, forwards and back-propagates only its whole groups of each
    mini-batch (`rank_groups`), and divides by the normalisers above, which it counts over
    the whole mini-batch it holds (the global G·L, token and sequence counts: no count
    needs a collective). DeepSpeed averages the ranks' gradients, so each rank's loss is
    multiplied by the world size: the reduced gradient, its pre-clip norm and the step are
    the one-process ones on the whole batch. The logged metrics are merged over the ranks;
    `tally` gets this rank's rows only (`BehaviourTally.merged` joins them)."""
    check_scoring(scoring, grammar)
    seqs = sequences(groups, params, grammar)
    layout = rank_layout(seqs, len(groups), params, backend.rank, backend.world)
    score = _Scorer(scoring, entropy_coef, params.head_chunk_tokens, params.packed,
                    backend.head_calls)
    old, ref = _old_and_reference(model, backend, reference, seqs, layout, params.device,
                                  score, tally)
    up = _Update(model=model, backend=backend, seqs=seqs, params=params, score=score, old=old,
                 ref=ref, tally=tally)
    steps, losses, norms = 0, [], []
    for epoch in range(params.epochs):
        for j in range(len(layout.minis)):
            loss_step = up.mini_batch(layout, j, fresh=epoch == 0 and j == 0,
                                      first_step=epoch == 0 and steps == 0)
            lr = lr_at(policy_step + steps, params)
            norms.append(backend.step(lr))
            losses.append(backend.all_sum(loss_step))
            steps += 1
    sums, weights, first_dev = up.acc.sums, up.acc.weights, up.acc.first_dev
    if backend.world > 1:  # the global batch's metrics, not this rank's share
        sums, weights, first_dev = _merge_metrics(backend.gather((sums, weights, first_dev)))
    out_metrics = {f"train/{k}": (v / weights[k] if k in weights and weights[k] else v)
                   for k, v in sums.items()}
    out_metrics.update({
        "train/loss_mean": statistics.fmean(losses),
        "train/grad_norm": statistics.fmean(norms),
        "train/lr": lr_at(policy_step + steps - 1, params),
        "train/optimizer_steps": float(steps),
        "train/batch_sequences": float(len(seqs)),
        "train/batch_policy_tokens": float(sum(s.n_policy for s in seqs)),
        "train/first_pass_ratio_dev": float(first_dev) if first_dev is not None else 0.0,
    })
    if up.denominators:
        out_metrics["train/loss_denominator"] = float(up.denominators[-1])
    return out_metrics


# ---- rank layout ------------------------------------------------------------------------------
@dataclass
class Layout:
    """One update's mini-batches and this rank's cut of them."""

    minis: list[list[int]]         # sequence indices of each mini-batch (all ranks' rows)
    micros: list[list[list[int]]]  # this rank's micro-batches of each mini-batch
    n_backward: list[int]          # backward calls every rank makes per mini-batch


def rank_layout(seqs: Sequence[Seq], n_groups: int, params: GRPOParams, rank: int,
                world: int) -> Layout:
    """The groups cut into `mini_batches` (whole groups), each rank's whole groups of each
    (`rank_groups`) cut into micro-batches, and the backward calls per mini-batch: ZeRO >= 2
    reduces gradients at every backward, so every rank makes as many backward calls per
    optimizer step as the busiest one (the extra ones back-propagate 0, `_idle_loss`)."""
    G = params.group_size
    lengths = [len(s.ids) for s in seqs]
    parts = split_groups(n_groups, params.mini_batches)
    minis = [[gi * G + k for gi in part for k in range(G)] for part in parts]

    def shard_layout(r: int) -> list[list[list[int]]]:
        return [micro_batches(lengths, [gi * G + k for gi in rank_groups(part, r, world)
                                        for k in range(G)], params.micro_batch_tokens,
                              packed=params.packed)
                for part in parts]

    layouts = [shard_layout(r) for r in range(world)]
    n_backward = [max(len(lay[j]) for lay in layouts) for j in range(len(parts))]
    return Layout(minis, layouts[rank], n_backward)


# ---- forwards ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Scorer:
    """The update's teacher-forced forward: logprobs under the scoring distribution (and its
    grammar masks), the entropy when asked, in the graph only when `grad` and the entropy
    bonus is on."""

    scoring: SamplingParams
    entropy_coef: float
    chunk_tokens: int
    packed: bool = False
    head_calls: Any = None  # the backend's (ZeRO-3): for the trained model's forwards only

    def __call__(self, m, batch, grad: bool, entropy: bool = False):
        with torch.set_grad_enabled(grad):
            return sequence_logprobs(m, batch["ids"], None, self.scoring, only=batch["mask"],
                                     allowed=batch["allowed"], with_entropy=entropy,
                                     entropy_grad=grad and bool(self.entropy_coef),
                                     chunk_tokens=self.chunk_tokens,
                                     lengths=batch["lengths"] if self.packed else None,
                                     head_calls=self.head_calls if is_sharded(m) else None)


def _old_and_reference(model, backend, reference, seqs: Sequence[Seq], layout: Layout,
                       device, score: _Scorer, tally: BehaviourTally | None
                       ) -> tuple[dict[tuple, torch.Tensor], dict[tuple, torch.Tensor]]:
    """Before the first optimizer step, per micro-batch: π_old of the mini-batches after the
    first (a no-grad forward; the first one's comes from its own epoch-0 forward) and the
    frozen reference's logprobs (when the loss has a KL term). Under ZeRO-3 a rank with
    fewer of these forwards of the trained model makes idle ones (`extra_forwards`)."""
    old, ref = {}, {}
    per_micro = 1 if isinstance(reference, AdaptersOff) else 0  # (the trained model's forward)
    mine = sum(len(m) * ((j > 0) + per_micro) for j, m in enumerate(layout.micros))
    idle = backend.extra_forwards(mine)
    for j, micros in enumerate(layout.micros):
        for micro in micros:
            batch = collate(seqs, micro, device)
            if j > 0:  # π_old of a mini-batch trained after the first optimizer step
                sc = score(model, batch, False, entropy=tally is not None)
                old[tuple(micro)] = sc.logprobs
                if tally is not None:
                    tally.add_batch(sc, batch)
            if reference is not None:
                with reference_model(reference) as m:
                    ref[tuple(micro)] = score(m, batch, False).logprobs.detach()
    idle_forwards(model, idle, device, backend.head_calls)
    return old, ref


def _idle_loss(model, seqs: Sequence[Seq], mb: Sequence[int], device,
               score: _Scorer) -> torch.Tensor:
    """0 x the loss of the mini-batch's shortest sequence: the backward a rank whose
    shard ran out of micro-batches still makes. A real forward, so the parameters'
    gradients become ready in the order of every other backward — ZeRO-2 fills its
    reduce buckets in that order and would pair mismatched gradients otherwise."""
    i = min((i for i in mb if seqs[i].n_policy > 0), key=lambda i: len(seqs[i].ids))
    batch = collate(seqs, [i], device)
    return score(model, batch, True).logprobs.sum() * 0.0


# ---- the loss over one mini-batch -------------------------------------------------------------
@dataclass(frozen=True)
class _Norms:
    """A mini-batch's loss normalisers, counted over all of it before its first micro-batch."""

    n_seq: int        # sequences with >= 1 policy token
    n_tok: int        # policy tokens
    n_turns: int      # turns with >= 1 policy token
    denom: float | None


def _normalisers(seqs: Sequence[Seq], mb: Sequence[int], cfg: GRPOLossConfig) -> _Norms:
    n_seq = sum(seqs[i].n_policy > 0 for i in mb)
    n_tok = sum(seqs[i].n_policy for i in mb)
    n_turns = sum(seqs[i].n_turns for i in mb)
    max_resp = max(seqs[i].n_policy for i in mb)
    return _Norms(n_seq, n_tok, n_turns, cfg.denominator(n_seq, max_resp))


def _share(seqs: Sequence[Seq], micro: Sequence[int], cfg: GRPOLossConfig,
           norms: _Norms) -> float:
    """A micro-batch's weight in its mini-batch: `seq_mean` / `turn_mean` losses are means
    over the micro-batch, weighted by its share of sequences / turns; the others are already
    divided by the mini-batch's normaliser."""
    share = 1.0
    if cfg.loss_aggregation == "seq_mean":
        share = sum(seqs[i].n_policy > 0 for i in micro) / max(1, norms.n_seq)
    elif cfg.loss_aggregation == "turn_mean":
        share = sum(seqs[i].n_turns for i in micro) / max(1, norms.n_turns)
    return share


@dataclass
class _Sums:
    """The loss's metrics summed over an update's micro-batches, weighted by their policy
    tokens (ratio extremes kept as extremes), and the first pass's ratio deviation from 1."""

    sums: dict[str, float] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    first_dev: float | None = None

    def add(self, metrics: Mapping[str, float], first_step: bool) -> None:
        sums, weights = self.sums, self.weights
        w = metrics.get("policy_tokens", 0.0)
        for key, v in metrics.items():
            if key in ("policy_tokens", "loss_denominator", "entropy"):
                continue
            if key in ("ratio_min", "ratio_max"):
                pick = min if key == "ratio_min" else max
                sums[key] = pick(sums.get(key, v), v)
                continue
            sums[key] = sums.get(key, 0.0) + v * w
            weights[key] = weights.get(key, 0.0) + w
        if first_step and "ratio_min" in metrics:
            dev = max(abs(metrics["ratio_max"] - 1), abs(metrics["ratio_min"] - 1))
            self.first_dev = dev if self.first_dev is None else max(self.first_dev, dev)


@dataclass(kw_only=True)
class _Update:
    """What every mini-batch of one update reads: the model and backend, the sequences, the
    forward, π_old and reference logprobs per micro-batch, the tally; and what it adds to."""

    model: Any
    backend: Any
    seqs: Sequence[Seq]
    params: GRPOParams
    score: _Scorer
    old: dict[tuple, torch.Tensor]
    ref: dict[tuple, torch.Tensor]
    tally: BehaviourTally | None
    acc: _Sums = field(default_factory=_Sums)
    denominators: list[float] = field(default_factory=list)

    def mini_batch(self, layout: Layout, j: int, *, fresh: bool, first_step: bool) -> float:
        """Forward and backward every micro-batch this rank holds of mini-batch `j` (then
        the idle backward calls), the gradients accumulated for one optimizer step; this
        rank's share of the mini-batch loss. `fresh`: at the pre-update weights, so this
        forward is π_old."""
        mb, micros, n_backward = layout.minis[j], layout.micros[j], layout.n_backward[j]
        cfg, tally, world = self.params.loss, self.tally, self.backend.world
        coef = self.score.entropy_coef
        norms = _normalisers(self.seqs, mb, cfg)
        if norms.denom is not None:
            self.denominators.append(norms.denom)
        loss_step = 0.0
        for k, micro in enumerate(micros):
            batch = collate(self.seqs, micro, self.params.device)
            sc = self.score(self.model, batch, True,
                            entropy=bool(coef) or (fresh and tally is not None))
            if fresh:
                self.old[tuple(micro)] = sc.logprobs.detach()
                if tally is not None:
                    tally.add_batch(sc, batch)
            out = grpo_loss(sc.logprobs, self.old[tuple(micro)], batch["adv"], batch["mask"],
                            cfg, ref_logprobs=self.ref.get(tuple(micro)),
                            behaviour_logprobs=batch["behaviour"],
                            entropy=sc.entropy if coef else None,
                            entropy_coef=coef, turn_ids=batch["turns"],
                            denominator=norms.denom, num_tokens=norms.n_tok)
            loss = out.loss * _share(self.seqs, micro, cfg, norms)
            # ranks' gradients are averaged: x world makes the average their sum
            self.backend.backward(loss * world, last=k == len(micros) - 1
                                  and n_backward == len(micros))
            loss_step += float(loss.detach())
            self.acc.add(out.metrics, first_step)
        for k in range(len(micros), n_backward):  # this rank's shard ran out
            self.backend.backward(_idle_loss(self.model, self.seqs, mb, self.params.device,
                                             self.score), last=k == n_backward - 1)
        return loss_step


def _merge_metrics(per_rank: Sequence[tuple[dict, dict, float | None]]
                   ) -> tuple[dict[str, float], dict[str, float], float | None]:
    """The ranks' token-weighted metric sums added, ratio extremes and first-pass ratio
    deviation taken over all of them: the numbers one process would log for the batch."""
    sums: dict[str, float] = {}
    weights: dict[str, float] = {}
    devs = [d for _, _, d in per_rank if d is not None]
    for s, w, _ in per_rank:
        for key, v in s.items():
            if key in ("ratio_min", "ratio_max"):
                pick = min if key == "ratio_min" else max
                sums[key] = pick(sums.get(key, v), v)
            else:
                sums[key] = sums.get(key, 0.0) + v
        for key, v in w.items():
            weights[key] = weights.get(key, 0.0) + v
    return sums, weights, (max(devs) if devs else None)
