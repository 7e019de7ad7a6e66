"""Loss-masked SFT on verified demonstrations (SPEC §6) -> an HF model directory with a card.

The loss is the mean negative log-likelihood of the policy's own tokens:

    loss = - sum_{t : loss_mask[t] = 1} log p(token_t | tokens_<t)  /  N,
    N    = number of loss_mask == 1 tokens in the *global* batch (all micro-batches).

Masked tokens (prompt, template service tokens, observations) enter neither the sum nor N
(SPEC §3): the LM head is not even applied at their positions
(`rlvr.engines.logprobs.sequence_logprobs(..., only=mask)`), so their gradient is exactly 0.
N is counted once per optimizer step before any forward pass and each micro-batch's loss is
divided by it, so the gradient is the same however the batch is cut into micro-batches.

Throughput on CPU (bench/sft.py): a global batch is sorted by length and cut into right-padded
micro-batches of at most `micro_batch_tokens` padded tokens (little padding, no attention
mask needed: causal attention keeps real tokens from seeing the pads after them, which the
loss never selects), and the head runs only on policy positions — most of an agent
transcript is observations.

Backends (rlvr/train/backend.py, shared with GRPO): `torch` (AdamW) and `deepspeed` (the same
AdamW under a DeepSpeed engine with ZeRO `zero_stage`). Started by a launcher with several
ranks (`deepspeed --num_gpus N`, `torchrun --nproc-per-node N`), the deepspeed backend trains
data-parallel: every rank draws the same global batch, takes its share of the rows
(`rank_shard`) and divides by the same global N; its loss is multiplied by the world size
because DeepSpeed averages the ranks' gradients, so the update equals the one-process update
of the whole batch. Rank 0 runs the
evaluation callback (broadcast to the others, which must stop alike) and writes the model.
Full fine-tune or LoRA (peft; merged into plain HF weights on save, the adapter kept beside
them).

Output (`out_dir`, written to a temp dir and renamed into place, `sft_output.py`): the model
(`config.json`, `model.safetensors`, generation config), the base model's tokenizer files,
`README.md` and `training.json` (data hash, params, base model hash, metrics). The card holds
no wall-clock numbers, so the same data + params + base give the same directory; timings are
in `SFTResult` for the stage's metrics.
"""
from __future__ import annotations

import copy
import math
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from tqdm import tqdm

from rlvr.engines.logprobs import sequence_logprobs
from rlvr.engines.model_dir import load_policy
from rlvr.errors import ConfigError
from rlvr.train.backend import (BackendParams, build_backend, launch_rank, require_packing,
                                shards_parameters)
from rlvr.train.batching import micro_batches
from rlvr.train.curves import LogFn
from rlvr.train.lora import apply_lora
from rlvr.train.sft_config import SFTParams
from rlvr.train.sft_output import SFTResult, write_sft_policy

EvalFn = Callable[[int, Any], dict[str, float]]


@dataclass
class Example:
    """One demonstration as tensors: ids [L] long, mask [L] bool (True: token is trained)."""

    ids: torch.Tensor
    mask: torch.Tensor

    @property
    def n_policy(self) -> int:
        return int(self.mask[1:].sum())  # token 0 is never predicted


# ---- pure pieces ----------------------------------------------------------------------------
def to_examples(rows: Sequence[dict[str, Any]]) -> list[Example]:
    out = []
    for r in rows:
        ids, mask = list(r["token_ids"]), list(r["loss_mask"])
        if len(ids) != len(mask) or len(ids) < 2:
            raise ValueError(f"demonstration {r.get('trajectory_id')}: {len(ids)} token ids, "
                             f"{len(mask)} mask entries (need equal lengths >= 2)")
        out.append(Example(torch.tensor(ids, dtype=torch.long), torch.tensor(mask).bool()))
    return out


def masked_nll(logprobs: torch.Tensor, only: torch.Tensor, normaliser: int) -> torch.Tensor:
    """[B, T-1] next-token logprobs, [B, T-1] bool policy mask -> scalar sum of the policy
    tokens' NLL divided by `normaliser` (the global batch's policy-token count)."""
    return -(logprobs * only).sum() / normaliser


def rank_shard(lengths: Sequence[int], batch: Sequence[int], rank: int, world: int) -> list[int]:
    """This rank's rows of one global batch: dealt longest first, so each rank gets a similar
    number of tokens. Every rank sees the same batch (same seed), so the shards partition it."""
    if world == 1:
        return list(batch)
    if len(batch) < world:
        raise ConfigError(f"sft.batch_size: {len(batch)} rows cannot feed {world} ranks")
    order = sorted(batch, key=lambda i: (-lengths[i], i))
    return order[rank::world]


def collate(examples: Sequence[Example], idx: Sequence[int],
            device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids [b, L] and the next-token policy mask [b, L-1] (False on padding)."""
    L = max(len(examples[i].ids) for i in idx)
    ids = torch.zeros(len(idx), L, dtype=torch.long)
    mask = torch.zeros(len(idx), L, dtype=torch.bool)
    for r, i in enumerate(idx):
        n = len(examples[i].ids)
        ids[r, :n], mask[r, :n] = examples[i].ids, examples[i].mask
    return ids.to(device), mask[:, 1:].to(device)


def nll(model, examples: Sequence[Example], idx: Sequence[int], normaliser: int,
        p: SFTParams, head_calls=None) -> torch.Tensor:
    """The policy-token NLL of rows `idx` / `normaliser`, one forward (packed with `p.packed`;
    `head_calls`: the backend's, `sequence_logprobs`)."""
    ids, only = collate(examples, idx, p.device)
    lengths = [len(examples[i].ids) for i in idx] if p.packed else None
    lp = sequence_logprobs(model, ids, None, only=only, chunk_tokens=p.head_chunk_tokens,
                           lengths=lengths, head_calls=head_calls).logprobs
    return masked_nll(lp, only, normaliser)


def lr_at(step: int, total: int, p: SFTParams) -> float:
    """Learning rate of optimizer step `step` (0-based): linear warmup, then the schedule
    from the peak down to min_lr_ratio x peak at the last step."""
    if step < p.warmup_steps:
        return p.learning_rate * (step + 1) / (p.warmup_steps + 1)
    if p.lr_scheduler_type == "constant":
        return p.learning_rate
    frac = (step - p.warmup_steps) / max(1, total - 1 - p.warmup_steps)
    frac = min(1.0, frac)
    shape = 0.5 * (1 + math.cos(math.pi * frac)) if p.lr_scheduler_type == "cosine" else 1 - frac
    return p.learning_rate * (p.min_lr_ratio + (1 - p.min_lr_ratio) * shape)


def batch_plan(n: int, p: SFTParams) -> tuple[int, Callable[[], list[int]]]:
    """(total optimizer steps, next_batch()): seeded reshuffle every epoch, batches of
    `batch_size` demonstrations (the last one of an epoch may be smaller)."""
    per_epoch = math.ceil(n / p.batch_size)
    total = p.max_steps or p.epochs * per_epoch
    rng = random.Random(p.seed)
    queue: list[list[int]] = []

    def next_batch() -> list[int]:
        if not queue:
            order = list(range(n))
            rng.shuffle(order)
            queue.extend(order[s:s + p.batch_size] for s in range(0, n, p.batch_size))
        return queue.pop(0)

    return total, next_batch


class EarlyStopper:
    """SPEC §6 stop rules over evaluation results (thresholds from `sft.early_stop`):
    * `format_stable`: the callback's parse_error_rate <= parse_error_stop for
      parse_error_evals consecutive evaluations;
    * `val_worsening`: val loss worse than the best by > min_delta for `patience` consecutive
      evaluations while the train loss kept falling (it is below its value at the best)."""

    def __init__(self, p: SFTParams):
        self.p = p.early_stop
        self.best_val = math.inf
        self.best_train = math.inf
        self.best_step = 0
        self.bad = 0
        self.format_ok = 0

    def update(self, step: int, train_loss: float, val_loss: float | None,
               parse_error_rate: float | None) -> str | None:
        """Record one evaluation; the stop reason, or None to go on. Sets `improved`."""
        p = self.p
        self.improved = val_loss is not None and val_loss < self.best_val - p.min_delta
        if self.improved:
            self.best_val, self.best_train, self.best_step, self.bad = val_loss, train_loss, step, 0
        elif val_loss is not None and val_loss > self.best_val + p.min_delta:
            self.bad = self.bad + 1 if train_loss < self.best_train else 0
        if p.parse_error_stop is not None and parse_error_rate is not None:
            self.format_ok = self.format_ok + 1 if parse_error_rate <= p.parse_error_stop else 0
        if step < p.min_steps:
            return None
        if p.parse_error_stop is not None and self.format_ok >= p.parse_error_evals:
            return "format_stable"
        if p.patience and self.bad >= p.patience:
            return "val_worsening"
        return None


# ---- the loop ---------------------------------------------------------------------------------
def train_sft(base_dir: Path | str, train_rows: Sequence[dict[str, Any]],
              val_rows: Sequence[dict[str, Any]], params: SFTParams, out_dir: Path | str, *,
              log: LogFn | None = None, on_eval: EvalFn | None = None) -> SFTResult:
    """Train `base_dir` on `train_rows` (schemas.SFT_DATA rows), validate on `val_rows`,
    write the model directory to `out_dir`. `log(step, metrics)` gets every step's and every
    evaluation's metrics; `on_eval(step, model) -> {"parse_error_rate": ...}` may add numbers
    at each evaluation (the model is in eval mode then) — `parse_error_rate` feeds the stop
    rule, everything is logged."""
    params.check()
    if not train_rows:
        raise ConfigError("sft: no train demonstrations to train on (see the drop log)")
    log = log or (lambda step, metrics: None)
    torch.manual_seed(params.seed)
    policy = load_policy(base_dir, device=params.device, dtype=params.dtype)
    model = apply_lora(policy.model, params.lora, "sft") if params.lora.enabled else policy.model
    if params.packed:
        require_packing(model, "sft")
    # under ZeRO-3 a forward needs every rank, so rank 0's probe samples from a whole copy
    probe = (copy.deepcopy(model) if on_eval is not None and shards_parameters(params)
             and launch_rank() == 0 else None)
    backend = build_backend(model, BackendParams.of(params), "sft")
    train, val = to_examples(train_rows), to_examples(val_rows)
    lengths = [len(e.ids) for e in train]
    total, next_batch = batch_plan(len(train), params)
    stopper, best_state, evals = EarlyStopper(params), None, []
    tok = ntok = npad = 0
    window: list[float] = []  # train losses since the previous evaluation
    stop, loss_step = ("max_steps" if params.max_steps else "epochs"), float("nan")
    t0 = time.perf_counter()
    bar = _progress(total)
    model.train()
    for step in range(1, total + 1):
        batch = next_batch()
        n_policy = sum(train[i].n_policy for i in batch)  # the normaliser, once per step
        loss_step = 0.0
        layouts = [micro_batches(lengths, rank_shard(lengths, batch, r, backend.world),
                                 params.micro_batch_tokens, packed=params.packed)
                   for r in range(backend.world)]
        micros = layouts[backend.rank]
        # ZeRO >= 2 reduces gradients at every backward, so every rank makes as many backward
        # calls as the busiest one; an extra one back-propagates 0 x a real forward (of the
        # batch's shortest row), so gradients become ready in the same order on every rank
        n_backward = max(map(len, layouts))
        idle = [min(batch, key=lambda i: lengths[i])]
        for k in range(n_backward):
            own = k < len(micros)
            rows = micros[k] if own else idle
            loss = nll(model, train, rows, n_policy, params, backend.head_calls) * (
                1.0 if own else 0.0)
            # ranks' gradients are averaged: x world makes the average their sum
            backend.backward(loss * backend.world, last=k == n_backward - 1)
            if own:
                loss_step += float(loss.detach())
                npad += (sum(lengths[i] for i in rows) if params.packed
                         else len(rows) * max(lengths[i] for i in rows))
        loss_step = backend.all_sum(loss_step)
        grad_norm = backend.step(lr_at(step - 1, total, params))
        tok += sum(lengths[i] for i in batch)
        ntok += n_policy
        window.append(loss_step)
        log(step, {"train/loss": loss_step, "train/lr": lr_at(step - 1, total, params),
                   "train/grad_norm": grad_norm, "train/trainable_tokens": float(ntok),
                   "train/tokens": float(tok)})
        bar.update(1)
        bar.set_postfix(loss=f"{loss_step:.3f}")
        if step == total or (params.eval_every and step % params.eval_every == 0):
            rec = _evaluate(model, val, params, step, sum(window) / len(window),
                            _probe_callback(on_eval, probe, model, backend, params),
                            backend.head_calls)
            rec = backend.from_rank0(rec)  # the probe's numbers, so every rank stops alike
            window.clear()
            evals.append(rec)
            log(step, {k: v for k, v in rec.items() if k != "step"})
            why = stopper.update(step, rec["train/loss_mean"], rec.get("val/loss"),
                                 rec.get("eval/parse_error_rate"))
            if stopper.improved and params.early_stop.restore_best and params.early_stop.patience:
                best_state = backend.snapshot()
            if why:
                stop = why
                break
    bar.close()
    seconds = time.perf_counter() - t0
    final_val = evals[-1].get("val/loss") if evals else None
    if stop == "val_worsening" and best_state is not None:
        backend.restore(best_state)
        final_val = stopper.best_val
    result = SFTResult(out_dir=Path(out_dir), steps=step, stop_reason=stop, train_loss=loss_step,
                       val_loss=final_val, evals=evals, tokens=tok, trainable_tokens=ntok,
                       padded_tokens=int(backend.all_sum(npad)), seconds=seconds)
    with backend.full_weights():  # (ZeRO-3: gathered on every rank, written by rank 0)
        if backend.rank == 0:
            result.model = write_sft_policy(model, policy, base_dir, train_rows, val_rows,
                                            params, result)
    backend.finish()  # no rank returns before the directory exists
    return result


def _evaluate(model, val, params, step, train_loss, on_eval,
              head_calls=None) -> dict[str, float]:
    """Validation loss (policy-token NLL over all val demonstrations) + the callback's numbers."""
    rec: dict[str, float] = {"step": step, "train/loss_mean": train_loss}  # since last eval
    model.eval()
    with torch.no_grad():
        if val:
            n = sum(e.n_policy for e in val)
            total = 0.0
            for micro in micro_batches([len(e.ids) for e in val], range(len(val)),
                                       params.micro_batch_tokens, packed=params.packed):
                total += float(nll(model, val, micro, n, params, head_calls))
            rec["val/loss"] = total
        if on_eval is not None:
            extra = on_eval(step, model) or {}
            rec.update({f"eval/{k}": float(v) for k, v in extra.items()})
    model.train()
    return rec


def _probe_callback(on_eval: EvalFn | None, probe, model, backend,
                    params: SFTParams) -> EvalFn | None:
    """What this rank calls at an evaluation: rank 0 the callback, the others nothing (they
    get rank 0's numbers). Under ZeRO-3 a forward needs every rank, so rank 0 probes a whole
    copy (`probe`) instead: every rank gathers the weights (a collective) and rank 0 loads
    them into the copy first."""
    if on_eval is None or (backend.rank != 0 and not shards_parameters(params)):
        return None
    if not shards_parameters(params):
        return on_eval

    def call(step: int, _model) -> dict[str, float]:
        with backend.full_weights():
            if probe is not None:
                probe.load_state_dict(model.state_dict())
        if probe is None:
            return {}
        probe.eval()
        return on_eval(step, probe)
    return call


# ---- model ------------------------------------------------------------------------------------
def _progress(total: int):
    return tqdm(total=total, desc="sft", unit="step", dynamic_ncols=True,
                disable=os.environ.get("RLVR_PROGRESS", "1") == "0")
