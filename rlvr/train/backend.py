"""The optimizer backend every trainer here shares (SFT, GRPO, next-token pretraining through
the SFT loop): one AdamW, stepped either alone (`torch`) or under a DeepSpeed engine with ZeRO
`zero_stage` (`deepspeed`), so a new knob or a fix lands in one place.

A trainer hands its params over as `BackendParams.of(params)`: the knobs below carry the same
names in `SFTParams` and `GRPOParams`, and nothing else of either reaches the backend.

Started by a launcher with several ranks (`deepspeed --num_gpus N`, `torchrun
--nproc-per-node N`), the deepspeed backend is data-parallel: the trainer shards each step's
batch over `rank` / `world` and multiplies its loss by the world size (DeepSpeed averages the
ranks' gradients), so the update equals the one-process update of the whole batch.
"""
from __future__ import annotations

import atexit
import contextlib
import importlib
import math
import os
import socket
import sys
from dataclasses import dataclass, fields
from typing import Any, Callable

import torch
import torch.distributed as dist

from rlvr.engines.logprobs import packing_error, sequence_logprobs
from rlvr.errors import ConfigError
from rlvr.train.lora import is_lora

Bad = Callable[[str, str, Any], None]

# DeepSpeed `zero_optimization` options a ZeRO-3 run adds to its stage (DeepSpeed's defaults
# otherwise: parameters under 1e5 elements stay whole on every rank, "persistent"). The
# multi-rank tests set the threshold to 0, so every parameter of their tiny model is sharded
# and each forward really needs every rank.
ZERO3_OPTIONS: dict[str, Any] = {}


@dataclass(frozen=True)
class BackendParams:
    """The optimizer and backend knobs (documented where the trainers' params declare them)."""

    learning_rate: float
    grad_clip: float
    weight_decay: float
    adam_beta1: float
    adam_beta2: float
    adam_eps: float
    dtype: str
    device: str
    backend: str
    zero_stage: int
    activation_checkpointing: bool

    @classmethod
    def of(cls, params: Any) -> "BackendParams":
        """The knobs of a trainer's params (any object with these attributes)."""
        return cls(**{f.name: getattr(params, f.name) for f in fields(cls)})


def check_adamw(p: Any, bad: Bad) -> None:
    """The AdamW knobs SFT and GRPO params share: `bad(key, why, value)` raises."""
    for key in ("grad_clip", "weight_decay", "adam_eps"):
        if getattr(p, key) < 0:
            bad(key, "must be >= 0", getattr(p, key))
    for key in ("adam_beta1", "adam_beta2"):
        if not 0.0 <= getattr(p, key) < 1.0:
            bad(key, "must be in [0, 1)", getattr(p, key))


def check_backend(p: Any, bad: Bad) -> None:
    """The backend / ZeRO knobs SFT and GRPO params share: `bad(key, why, value)` raises."""
    if p.zero_stage not in (0, 1, 2, 3):
        bad("zero_stage", "must be 0, 1, 2 or 3", p.zero_stage)
    if p.zero_stage and p.backend != "deepspeed":
        bad("zero_stage", "ZeRO needs backend: deepspeed (the torch backend cannot shard)",
            p.zero_stage)
    if p.zero_stage == 3 and p.lora.enabled:
        bad("zero_stage", "ZeRO-3 with lora is not supported: over a sharded frozen base "
            "the LM head's checkpointed chunks fail their recomputation (measured, "
            "deepspeed 0.19.8); use zero_stage 2 (the frozen base replicated)", p.zero_stage)


def shards_parameters(p: Any) -> bool:
    """Whether the trainer's parameters live in shards across the ranks (ZeRO-3): a forward
    then needs every rank, and whole weights must be gathered (`full_weights`) before one
    rank alone may read them. Known from the params before any rank starts."""
    return p.backend == "deepspeed" and p.zero_stage == 3


def is_sharded(model) -> bool:
    """Whether DeepSpeed ZeRO-3 holds `model`'s parameters in shards (its forwards then need
    every rank; a frozen reference copy beside it is whole)."""
    return any(hasattr(q, "ds_id") for q in model.parameters())


def idle_forwards(model, n: int, device, head_calls=None) -> None:
    """`n` no-grad forwards of a two-token row: what a rank adds after its own forwards so
    that it makes as many as the busiest rank (`n` from `TorchBackend.extra_forwards`, asked
    before the first forward: asking is a collective too, and must not meet a forward's)."""
    for _ in range(n):
        with torch.no_grad():
            sequence_logprobs(model, torch.zeros(1, 2, dtype=torch.long, device=device),
                              head_calls=head_calls)


def launch_rank() -> int:
    """This process's rank as its launcher set it (0 without one), before the process group
    exists: what a trainer needs to decide, before `build_backend`, whether it is rank 0."""
    return int(os.environ.get("RANK", "0"))


def adamw(model, p: BackendParams) -> torch.optim.Optimizer:
    """AdamW; weight decay on matrices only (not norms / biases)."""
    trainable = [q for q in model.parameters() if q.requires_grad]
    groups = [{"params": [q for q in trainable if q.ndim >= 2], "weight_decay": p.weight_decay},
              {"params": [q for q in trainable if q.ndim < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=p.learning_rate,
                             betas=(p.adam_beta1, p.adam_beta2), eps=p.adam_eps,
                             foreach=True)


def build_backend(model, p: BackendParams, where: str = "train") -> "TorchBackend":
    """The optimizer backend `p.backend` for `model`'s trainable parameters (with
    `activation_checkpointing`, the model recomputes its layers' activations in backward)."""
    if p.activation_checkpointing:
        enable_activation_checkpointing(model, where)
    return DeepSpeedBackend(model, p) if p.backend == "deepspeed" else TorchBackend(model, p)


def enable_activation_checkpointing(model, where: str) -> None:
    """Keep only each decoder layer's input in the forward and recompute the layer in the
    backward (HF's gradient checkpointing, non-reentrant: it also differentiates a LoRA
    model's adapters when the frozen embeddings' output needs no grad). Activation memory
    falls from ~layers x per-layer activations to ~one layer's; the gradients are the same
    up to float reordering. A model without HF support is a ConfigError naming the key."""
    base = model.get_base_model() if is_lora(model) else model
    if not getattr(base, "supports_gradient_checkpointing", False) or \
            not hasattr(base, "gradient_checkpointing_enable"):
        raise ConfigError(f"{where}.activation_checkpointing: {type(base).__name__} does not "
                          "support gradient checkpointing (transformers' "
                          "supports_gradient_checkpointing)")
    base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def require_packing(model, where: str) -> None:
    """A ConfigError naming `{where}.packed` unless `model` takes packed rows (two rows scored
    packed and apart agree, `rlvr.engines.logprobs.packing_error`): before any training."""
    why = packing_error(model)
    if why is not None:
        raise ConfigError(f"{where}.packed: {why}; set packed: false")


class TorchBackend:
    """Plain AdamW in one process."""

    rank, world = 0, 1

    def full_weights(self, modify: bool = False):
        """A block in which this rank reads (`modify`: writes) the model's whole parameters.
        Under ZeRO-3 each parameter is gathered from its shards on entry and re-partitioned
        on exit (rank 0's writes kept), a collective: every rank enters the block, in the
        same order, whatever it reads inside. Elsewhere the weights are whole already."""
        return contextlib.nullcontext()

    def extra_forwards(self, mine: int) -> int:
        """How many more forwards of the trained model this rank must make so that it makes
        as many as the busiest rank (`mine` its own count): under ZeRO-3 each layer gathers
        its shards inside its forward, a collective, so a rank that stopped early would
        leave the others waiting. 0 wherever a forward needs no other rank."""
        return 0

    head_calls = None
    """For `sequence_logprobs(head_calls=)` on the trained model: None, or (ZeRO-3 on several
    ranks) the agreement on how many times a forward calls the LM head — each call gathers
    the head's shards, so every rank calls it as often as the one with the most chunks."""

    def __init__(self, model, p: BackendParams):
        self.model, self.p = model, p
        self.opt = adamw(model, p)
        self.params = [q for q in model.parameters() if q.requires_grad]

    def all_sum(self, x: float) -> float:
        return x

    def from_rank0(self, obj):
        return obj

    def gather(self, obj) -> list:
        """`obj` of every rank, in rank order."""
        return [obj]

    def barrier(self) -> None:
        pass

    def finish(self) -> None:
        """The end of training: then `barrier`, so no rank returns before the others."""
        self.barrier()

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

    def optimizer_state(self) -> dict[str, Any]:
        """This rank's optimizer state (ZeRO: its partition), tensors and plain values only,
        what a checkpoint keeps and `load_optimizer_state` takes back."""
        return self.opt.state_dict()

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        self.opt.load_state_dict(state)

    def snapshot(self) -> dict[str, torch.Tensor]:
        return {n: q.detach().to("cpu", copy=True)
                for n, q in self.model.named_parameters() if q.requires_grad}

    def restore(self, state: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for n, q in self.model.named_parameters():
                if n in state:
                    q.copy_(state[n].to(q.device))


class DeepSpeedBackend(TorchBackend):
    """The same AdamW under `deepspeed.initialize` (ZeRO `zero_stage`). A step may hold any
    number of micro-batches: each backward tells the engine whether it is the last one of the
    step (`set_gradient_accumulation_boundary`), so gradients accumulate locally until then
    and `step` reduces, clips and updates once. The loss is already divided by the global
    normaliser, so DeepSpeed must not rescale it (`scale_wrt_gas=False`)."""

    def __init__(self, model, p: BackendParams):
        import deepspeed  # lazy: an optional dependency that costs seconds to import

        super().__init__(model, p)
        self.rank, self.world = init_distributed(p.device)
        config = {
            "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
            "gradient_clipping": p.grad_clip,
            "zero_optimization": {"stage": p.zero_stage,
                                  **(ZERO3_OPTIONS if p.zero_stage == 3 else {})},
            "bf16": {"enabled": p.dtype == "bfloat16"}, "steps_per_print": 2**31 - 1,
        }
        self.engine, _, _, _ = deepspeed.initialize(model=model, optimizer=self.opt,
                                                    config=config)

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        # what `engine.forward` does first, which the trainers bypass (they call the module,
        # or its decoder and head apart): without it ZeRO-3 never advances its micro-step
        # count, so each micro-batch's gradient partition overwrote the previous one's
        # instead of adding to it (the update differed from the torch step). Nothing touches
        # the optimizer between a forward and its backward, so calling it here is the same.
        if hasattr(self.engine.optimizer, "clear_backward_seen_flag"):
            self.engine.optimizer.clear_backward_seen_flag()
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

    def full_weights(self, modify: bool = False):
        if self.p.zero_stage != 3:
            return contextlib.nullcontext()
        import deepspeed

        return deepspeed.zero.GatheredParameters(list(self.model.parameters()),
                                                 modifier_rank=0 if modify else None)

    def extra_forwards(self, mine: int) -> int:
        if self.p.zero_stage != 3 or self.world == 1:
            return 0
        return max(self.gather(mine)) - mine

    @property
    def head_calls(self):
        if self.p.zero_stage != 3 or self.world == 1:
            return None
        return lambda chunks: max(self.gather(chunks))

    def optimizer_state(self) -> dict[str, Any]:
        """ZeRO-3 keeps AdamW's state keyed by its flat fp32 partitions, not by the module's
        parameters (the client optimizer's own state_dict cannot name them): its optimizer's
        state and those partitions, from DeepSpeed's own ZeRO-3 state dict."""
        if self.p.zero_stage != 3:
            return super().optimizer_state()
        from deepspeed.checkpoint.constants import FP32_FLAT_GROUPS, OPTIMIZER_STATE_DICT

        state = self.engine.optimizer.state_dict()
        return {OPTIMIZER_STATE_DICT: state[OPTIMIZER_STATE_DICT],
                FP32_FLAT_GROUPS: [t.detach().clone() for t in state[FP32_FLAT_GROUPS]]}

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        """(ZeRO-3: through DeepSpeed's loader, which also restores the weights' partitions
        from the fp32 ones; its loss-scaler fields, unused in fp32/bf16, are the current.)"""
        if self.p.zero_stage != 3:
            return super().load_optimizer_state(state)
        from deepspeed.checkpoint.constants import LOSS_SCALER

        zero = self.engine.optimizer
        full = {LOSS_SCALER: zero.loss_scaler, "dynamic_loss_scale": zero.dynamic_loss_scale,
                "overflow": zero.overflow, **state}
        zero.load_state_dict([full] * self.world)  # (it reads its own rank's entry)

    def snapshot(self) -> dict[str, torch.Tensor]:
        with self.full_weights():
            return super().snapshot()

    def restore(self, state: dict[str, torch.Tensor]) -> None:
        with self.full_weights(modify=True):
            super().restore(state)

    def all_sum(self, x: float) -> float:
        if self.world == 1:
            return x
        t = torch.tensor([float(x)], dtype=torch.float64)
        dist.all_reduce(t)
        return float(t.item())

    def from_rank0(self, obj):
        if self.world == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj) -> list:
        if self.world == 1:
            return [obj]
        out: list = [None] * dist.get_world_size()
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def finish(self) -> None:
        """ZeRO-3 gathers the next layers' shards ahead of their forward (prefetch): after the
        last forward some gathers are still in flight, and a process group torn down under
        them aborts the rank at exit (\"terminate called without an active exception\",
        seen on 2 CPU ranks). They are waited for and the weights released first."""
        if self.p.zero_stage == 3:
            self.engine.empty_partition_cache()
        self.barrier()


def init_distributed(device: str) -> tuple[int, int]:
    """torch.distributed for DeepSpeed; (rank, world size). Launched by a launcher
    (`deepspeed`, `torchrun`: WORLD_SIZE > 1 and the rendezvous variables set), this process
    joins its ranks; else it is world size 1, with the rendezvous variables set here where
    missing. DeepSpeed's CPU backend would compile a shared-memory all-reduce op (40-50 s,
    ENVIRONMENT.md): its builder is replaced by "no op", so DeepSpeed uses plain
    torch.distributed (gloo on CPU, nccl on GPUs)."""
    import deepspeed  # lazy: an optional dependency that costs seconds to import

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
    opened = not dist.is_initialized()
    deepspeed.init_distributed(dist_backend="gloo" if device == "cpu" else "nccl")
    if opened:
        atexit.register(_close_group)
    return int(os.environ["RANK"]), world


def _close_group() -> None:
    """At interpreter exit, destroy the process group `init_distributed` opened: gloo's
    threads still running at teardown can abort a rank (\"terminate called without an active
    exception\", seen in CI after the rank's work was written), failing a run that succeeded.
    Not sooner: DeepSpeed caches the world group (deepspeed.utils.groups), so a group
    destroyed and opened again in one process breaks the next `deepspeed.initialize`. A group
    the caller opened is the caller's to close."""
    if dist.is_initialized():
        dist.destroy_process_group()
