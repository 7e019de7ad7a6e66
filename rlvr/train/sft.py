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

Backends: `torch` (AdamW) and `deepspeed` (the same AdamW under a DeepSpeed engine with ZeRO
`zero_stage`). Started by a launcher with several ranks (`deepspeed --num_gpus N`,
`torchrun --nproc-per-node N`), the deepspeed backend trains data-parallel: every rank draws
the same global batch, takes its share of the rows (`rank_shard`) and divides by the same
global N; its loss is multiplied by the world size because DeepSpeed averages the ranks'
gradients, so the update equals the one-process update of the whole batch. Rank 0 runs the
evaluation callback (broadcast to the others, which must stop alike) and writes the model.
Full fine-tune or LoRA (peft; merged into plain HF weights on save, the adapter kept beside
them).

Output (`out_dir`, written to a temp dir and renamed into place): the model
(`config.json`, `model.safetensors`, generation config), the base model's tokenizer files,
`README.md` and `training.json` (data hash, params, base model hash, metrics). The card holds
no wall-clock numbers, so the same data + params + base give the same directory; timings are
in `SFTResult` for the stage's metrics.
"""
from __future__ import annotations

import atexit
import json
import math
import os
import random
import shutil
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from rlvr.config import as_dict
from rlvr.engines.model_dir import TOKENIZER_EXTRA, TOKENIZER_FILES, load_policy, weights_fingerprint
from rlvr.errors import ConfigError
from rlvr.train.config import SFTParams
from rlvr.train.demos import data_hash
from rlvr.engines.logprobs import sequence_logprobs

LogFn = Callable[[int, dict[str, float]], None]
EvalFn = Callable[[int, Any], dict[str, float]]
# A row joins a micro-batch only if it is at most this much shorter than the longest row in it.
MAX_PADDING = 0.1
TOKENIZER_COPY = (*TOKENIZER_FILES, *TOKENIZER_EXTRA, "special_tokens_map.json", "added_tokens.json")


@dataclass
class Example:
    """One demonstration as tensors: ids [L] long, mask [L] bool (True: token is trained)."""

    ids: torch.Tensor
    mask: torch.Tensor

    @property
    def n_policy(self) -> int:
        return int(self.mask[1:].sum())  # token 0 is never predicted


@dataclass
class SFTResult:
    out_dir: Path
    steps: int
    stop_reason: str                  # max_steps | epochs | val_worsening | format_stable
    train_loss: float                 # mean policy-token NLL of the last step
    val_loss: float | None            # of the written weights (None: no validation split)
    evals: list[dict[str, float]] = field(default_factory=list)
    tokens: int = 0                   # real (unpadded) tokens trained on
    trainable_tokens: int = 0         # loss_mask == 1 tokens trained on
    padded_tokens: int = 0            # tokens through the model, padding included
    seconds: float = 0.0
    model: Any = None                 # the trained model in memory (merged when LoRA), eval mode

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


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


def micro_batches(lengths: Sequence[int], batch: Sequence[int], budget: int,
                  max_padding: float = MAX_PADDING) -> list[list[int]]:
    """Cut one global batch (indices into `lengths`) into micro-batches: longest first; a row
    joins the current micro-batch while the batch stays within `budget` padded tokens (rows x
    longest row) and the row is at most `max_padding` shorter than that longest row (a
    longer single row goes alone). On CPU a forward pass costs ~ its padded tokens, and
    rows of a few hundred tokens already fill the matmuls, so padding is pure waste."""
    order = sorted(batch, key=lambda i: -lengths[i])
    out: list[list[int]] = []
    for i in order:
        if out:
            head = lengths[out[-1][0]]
            if ((len(out[-1]) + 1) * head <= budget
                    and lengths[i] >= (1 - max_padding) * head):
                out[-1].append(i)
                continue
        out.append([i])
    return out


def rank_shard(lengths: Sequence[int], batch: Sequence[int], rank: int, world: int) -> list[int]:
    """This rank's rows of one global batch: dealt longest first, so each rank gets a similar
    number of tokens. Every rank sees the same batch (same seed), so the shards partition it."""
    if world == 1:
        return list(batch)
    if len(batch) < world:
        raise ConfigError(f"sft.batch_size: {len(batch)} rows cannot feed {world} ranks")
    order = sorted(batch, key=lambda i: (-lengths[i], i))
    return order[rank::world]


def collate(examples: Sequence[Example], idx: Sequence[int], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids [b, L] and the next-token policy mask [b, L-1] (False on padding)."""
    L = max(len(examples[i].ids) for i in idx)
    ids = torch.zeros(len(idx), L, dtype=torch.long)
    mask = torch.zeros(len(idx), L, dtype=torch.bool)
    for r, i in enumerate(idx):
        n = len(examples[i].ids)
        ids[r, :n], mask[r, :n] = examples[i].ids, examples[i].mask
    return ids.to(device), mask[:, 1:].to(device)


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
    model = _maybe_lora(policy.model, params)
    backend = _backend(model, params)
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
                                 params.micro_batch_tokens) for r in range(backend.world)]
        micros = layouts[backend.rank]
        # ZeRO >= 2 reduces gradients at every backward, so every rank makes as many backward
        # calls as the busiest one; an extra one back-propagates 0 x a real forward (of the
        # batch's shortest row), so gradients become ready in the same order on every rank
        n_backward = max(map(len, layouts))
        idle = [min(batch, key=lambda i: lengths[i])]
        for k in range(n_backward):
            own = k < len(micros)
            ids, only = collate(train, micros[k] if own else idle, params.device)
            lp = sequence_logprobs(model, ids, None, only=only,
                                   chunk_tokens=params.head_chunk_tokens).logprobs
            loss = masked_nll(lp, only, n_policy) * (1.0 if own else 0.0)
            # ranks' gradients are averaged: x world makes the average their sum
            backend.backward(loss * backend.world, last=k == n_backward - 1)
            if own:
                loss_step += float(loss.detach())
                npad += ids.numel()
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
                            on_eval if backend.rank == 0 else None)
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
    if backend.rank == 0:
        result.model = _write_model(model, policy, base_dir, train_rows, val_rows, params,
                                    result)
    backend.barrier()  # no rank returns before the directory exists
    return result


def _evaluate(model, val, params, step, train_loss, on_eval) -> dict[str, float]:
    """Validation loss (policy-token NLL over all val demonstrations) + the callback's numbers."""
    rec: dict[str, float] = {"step": step, "train/loss_mean": train_loss}  # since last eval
    model.eval()
    with torch.no_grad():
        if val:
            nll, n = 0.0, sum(e.n_policy for e in val)
            for micro in micro_batches([len(e.ids) for e in val], range(len(val)),
                                       params.micro_batch_tokens):
                ids, only = collate(val, micro, params.device)
                lp = sequence_logprobs(model, ids, None, only=only,
                                       chunk_tokens=params.head_chunk_tokens).logprobs
                nll += float(masked_nll(lp, only, n))
            rec["val/loss"] = nll
        if on_eval is not None:
            extra = on_eval(step, model) or {}
            rec.update({f"eval/{k}": float(v) for k, v in extra.items()})
    model.train()
    return rec


# ---- model, optimizer, backends -------------------------------------------------------------
def _maybe_lora(model, p: SFTParams):
    if not p.lora.enabled:
        return model
    from peft import LoraConfig, get_peft_model

    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    missing = [m for m in p.lora.target_modules if m not in present]
    if missing:
        raise ConfigError(f"sft.lora.target_modules: {missing} not in the model "
                          f"(it has e.g. {sorted(present - {''})[:12]})")
    cfg = LoraConfig(r=p.lora.r, lora_alpha=p.lora.alpha, lora_dropout=p.lora.dropout,
                     target_modules=list(p.lora.target_modules), bias="none",
                     task_type="CAUSAL_LM")
    return get_peft_model(model, cfg)


def _optimizer(model, p: SFTParams) -> torch.optim.Optimizer:
    """AdamW; weight decay on matrices only (not norms / biases)."""
    trainable = [q for q in model.parameters() if q.requires_grad]
    groups = [{"params": [q for q in trainable if q.ndim >= 2], "weight_decay": p.weight_decay},
              {"params": [q for q in trainable if q.ndim < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=p.learning_rate,
                             betas=(p.adam_beta1, p.adam_beta2), eps=p.adam_eps,
                             foreach=True)


def _backend(model, p: SFTParams):
    """The optimizer backend. Under a launcher the deepspeed one is data-parallel: its user
    (SFT here, GRPO in rlvr/train/grpo.py) shards each step's batch over `rank` / `world`."""
    return _DeepSpeedBackend(model, p) if p.backend == "deepspeed" else _TorchBackend(model, p)


class _TorchBackend:
    rank, world = 0, 1  # one process

    def __init__(self, model, p: SFTParams):
        self.model, self.p = model, p
        self.opt = _optimizer(model, p)
        self.params = [q for q in model.parameters() if q.requires_grad]

    def all_sum(self, x: float) -> float:
        return x

    def from_rank0(self, obj):
        return obj

    def barrier(self) -> None:
        pass

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        loss.backward()

    def step(self, lr: float) -> float:
        for g in self.opt.param_groups:
            g["lr"] = lr
        clip = self.p.grad_clip if self.p.grad_clip > 0 else math.inf
        norm = float(torch.nn.utils.clip_grad_norm_(self.params, clip, foreach=True))
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return norm

    def snapshot(self) -> dict[str, torch.Tensor]:
        return {n: q.detach().to("cpu", copy=True)
                for n, q in self.model.named_parameters() if q.requires_grad}

    def restore(self, state: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for n, q in self.model.named_parameters():
                if n in state:
                    q.copy_(state[n].to(q.device))


class _DeepSpeedBackend(_TorchBackend):
    """The same AdamW under `deepspeed.initialize` (ZeRO `zero_stage`). A step may hold any
    number of micro-batches: each backward tells the engine whether it is the last one of the
    step (`set_gradient_accumulation_boundary`), so gradients accumulate locally until then
    and `step` reduces, clips and updates once. The loss is already divided by the global
    normaliser, so DeepSpeed must not rescale it (`scale_wrt_gas=False`)."""

    def __init__(self, model, p: SFTParams):
        import deepspeed

        super().__init__(model, p)
        self.rank, self.world = _init_distributed(p.device)
        config = {
            "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
            "gradient_clipping": p.grad_clip, "zero_optimization": {"stage": p.zero_stage},
            "bf16": {"enabled": p.dtype == "bfloat16"}, "steps_per_print": 2**31 - 1,
        }
        self.engine, _, _, _ = deepspeed.initialize(model=model, optimizer=self.opt,
                                                    config=config)

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        self.engine.set_gradient_accumulation_boundary(last)
        self.engine.backward(loss, scale_wrt_gas=False)

    def step(self, lr: float) -> float:
        for g in self.opt.param_groups:  # the client optimizer ZeRO wraps
            g["lr"] = lr
        unsharded = None
        if self.p.zero_stage == 0:  # the engine reports no norm; the reduced grads are here
            unsharded = float(torch.nn.utils.clip_grad_norm_(self.params, math.inf, foreach=True))
        self.engine.step()
        norm = self.engine.get_global_grad_norm() if unsharded is None else unsharded
        return float(norm) if norm is not None else float("nan")

    def all_sum(self, x: float) -> float:
        if self.world == 1:
            return x
        import torch.distributed as dist

        t = torch.tensor([float(x)], dtype=torch.float64)
        dist.all_reduce(t)
        return float(t.item())

    def from_rank0(self, obj):
        if self.world == 1:
            return obj
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()


def _init_distributed(device: str) -> tuple[int, int]:
    """torch.distributed for DeepSpeed; (rank, world size). Launched by a launcher
    (`deepspeed`, `torchrun`: WORLD_SIZE > 1 and the rendezvous variables set), this process
    joins its ranks; else it is world size 1, with the rendezvous variables set here where
    missing. DeepSpeed's CPU backend would compile a shared-memory all-reduce op (40-50 s,
    ENVIRONMENT.md): its builder is replaced by "no op", so DeepSpeed uses plain
    torch.distributed (gloo on CPU, nccl on GPUs)."""
    import importlib

    import deepspeed

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
        if missing:
            raise ConfigError(f"backend: deepspeed: WORLD_SIZE={world} but {missing} unset "
                              "(start the ranks with the deepspeed or torchrun launcher)")
    else:
        for k, v in {"MASTER_ADDR": "127.0.0.1", "RANK": "0", "LOCAL_RANK": "0",
                     "WORLD_SIZE": "1"}.items():
            os.environ.setdefault(k, v)
        if "MASTER_PORT" not in os.environ:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    importlib.import_module("deepspeed.comm.torch")
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None
    import torch.distributed as dist

    opened = not dist.is_initialized()
    deepspeed.init_distributed(dist_backend="gloo" if device == "cpu" else "nccl")
    if opened:
        atexit.register(_close_group)
    return int(os.environ["RANK"]), world


def _close_group() -> None:
    """At interpreter exit, destroy the process group `_init_distributed` opened: gloo's
    threads still running at teardown can abort a rank (\"terminate called without an active
    exception\", seen in CI after the rank's work was written), failing a run that succeeded.
    Not sooner: DeepSpeed caches the world group (deepspeed.utils.groups), so a group
    destroyed and opened again in one process breaks the next `deepspeed.initialize`. A group
    the caller opened is the caller's to close."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def _progress(total: int):
    from tqdm import tqdm

    return tqdm(total=total, desc="sft", unit="step", dynamic_ncols=True,
                disable=os.environ.get("RLVR_PROGRESS", "1") == "0")


# ---- output -------------------------------------------------------------------------------------
def _write_model(model, policy, base_dir, train_rows, val_rows, p: SFTParams,
                 result: SFTResult):
    """Save (merged) weights + tokenizer + card to a temp dir beside out_dir, then rename it
    into place. Returns the in-memory model that was saved (eval mode)."""
    from rlvr.artifacts.io import replace_dir, temp_dir_beside
    from rlvr.train.sampler import save_hf_weights

    out_dir, base_dir = Path(result.out_dir), Path(base_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_dir_beside(out_dir)
    try:
        if p.lora.enabled:
            if p.lora.save_adapter:
                model.save_pretrained(tmp / "adapter")
            model = model.merge_and_unload()
        model.eval()
        save_hf_weights(tmp, model, base_dir)
        card = _card(policy, base_dir, train_rows, val_rows, p, result)
        (tmp / "training.json").write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")
        (tmp / "README.md").write_text(_readme(card))
        replace_dir(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return model


def _card(policy, base_dir, train_rows, val_rows, p: SFTParams, r: SFTResult) -> dict[str, Any]:
    def rounded(x):
        return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else round(x, 6)

    return {
        "trainer": "rlvr.train.sft",
        "base_model": str(base_dir),
        "base_model_hash": weights_fingerprint(base_dir),
        "data_hash": data_hash(list(train_rows) + list(val_rows)),
        "demonstrations": {"train": len(train_rows), "val": len(val_rows),
                           "train_tasks": len({d["task_id"] for d in train_rows}),
                           "val_tasks": len({d["task_id"] for d in val_rows})},
        "params": as_dict(p),
        "lora_merged": p.lora.enabled,
        "metrics": {"steps": r.steps, "stop_reason": r.stop_reason,
                    "train_loss": rounded(r.train_loss), "val_loss": rounded(r.val_loss),
                    "tokens": r.tokens, "trainable_tokens": r.trainable_tokens,
                    "evals": [{k: rounded(v) if isinstance(v, float) else v for k, v in e.items()}
                              for e in r.evals]},
    }


def _readme(card: dict[str, Any]) -> str:
    m, d = card["metrics"], card["demonstrations"]
    kind = (f"LoRA r={card['params']['lora.r']} (merged)" if card["lora_merged"]
            else "full fine-tune")
    return (
        "# SFT policy\n\n"
        f"Rejection-sampling SFT ({kind}) of `{card['base_model']}` "
        f"(`{card['base_model_hash']}`) on {d['train']} verified demonstrations of "
        f"{d['train_tasks']} tasks; validation: {d['val']} demonstrations of {d['val_tasks']} "
        f"held-out tasks.\n\n"
        "Loss: mean NLL of policy-sampled tokens only (loss_mask = 1); prompt, template and "
        "observation tokens enter neither the loss nor its normaliser.\n\n"
        f"- data hash: `{card['data_hash']}`\n"
        f"- steps: {m['steps']} (stopped: {m['stop_reason']})\n"
        f"- train loss (last step): {m['train_loss']}\n"
        f"- validation loss: {m['val_loss']}\n"
        f"- tokens: {m['tokens']} ({m['trainable_tokens']} trained)\n\n"
        "Params, evaluations and hashes: `training.json`. Load with "
        "`AutoModelForCausalLM.from_pretrained` (plain HF weights"
        + ("; the LoRA adapter alone is under `adapter/`" if card["lora_merged"]
           and card["params"]["lora.save_adapter"] else "") + ").\n")


def write_loss_csv(path: Path | str, rows: Sequence[dict[str, Any]],
                   columns: Sequence[str] = ("step", "train/loss", "val/loss"),
                   png: Path | str | None = None, title: str = "") -> None:
    """A DVC plots CSV of loss curves (one row per logged step; empty cell = not measured at
    that step), written atomically, and optionally the same curves as a PNG (renders offline,
    `rlvr.artifacts.plots`). `rows`: dicts with a `step` key, e.g. collected from the `log`
    callback with `LossCurves`."""
    import csv
    import io

    from rlvr.artifacts.io import write_text

    by_step: dict[int, dict[str, Any]] = {}
    for r in rows:
        by_step.setdefault(int(r["step"]), {}).update(r)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([c.replace("/", "_") for c in columns])
    for step in sorted(by_step):
        r = by_step[step]
        w.writerow([step if c == "step" else
                    ("" if r.get(c) is None else f"{float(r[c]):.6g}") for c in columns])
    write_text(path, buf.getvalue())
    if png is not None:
        from rlvr.artifacts.plots import curves_png

        curves_png(list(csv.DictReader(io.StringIO(buf.getvalue()))), png, title=title)


class LossCurves:
    """A `log` callback that remembers every step's metrics (and forwards them to `then`),
    for `write_loss_csv` at the end."""

    def __init__(self, then: LogFn | None = None):
        self.rows: list[dict[str, Any]] = []
        self.then = then

    def __call__(self, step: int, metrics: dict[str, float]) -> None:
        self.rows.append({"step": step, **metrics})
        if self.then is not None:
            self.then(step, metrics)
