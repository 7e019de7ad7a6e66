"""The `sft:` section of params.yaml (SPEC §6): demonstration selection + the SFT trainer.

Names follow TRL / HF `TrainingArguments` where one exists (learning_rate, warmup_steps,
lr_scheduler_type, num_train_epochs -> epochs, max_steps, max_grad_norm -> grad_clip,
weight_decay, eval_steps -> eval_every, early_stopping_patience -> early_stop.patience), so
a reader who knows TRL reads these without a glossary. Every key is typed (rlvr.config:
an unknown or mistyped key is a ConfigError naming it) and `SFTParams.check` refuses values
without meaning, naming the dotted key.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rlvr.config import DEFAULT_PARAMS, load_section, parse
from rlvr.errors import ConfigError
from rlvr.train.backend import check_adamw, check_backend
from rlvr.train.lora import LoraParams

# All major weight matrices of a Llama/Qwen-style block, MLP included (SPEC §6).


@dataclass(frozen=True)
class DemoParams:
    """Which verified rollouts become demonstrations (rlvr.train.demos)."""

    # Kept demonstrations per task after dedup (a seeded choice among the clean ones);
    # 0 = no cap. Caps stop easy tasks (solved by every sample) from dominating the data.
    max_per_task: int = 4
    # Share of *tasks* (not demonstrations) held out for the validation loss, chosen with
    # `sft.seed`; a task's demonstrations are all in one part. 0 = no validation split.
    val_fraction: float = 0.1


@dataclass(frozen=True)
class EarlyStopParams:
    """When to stop before max_steps / epochs (SPEC §6: over-trained SFT hurts RL)."""

    # Stop after this many consecutive evaluations whose validation loss is worse than the
    # best by more than `min_delta` while the train loss kept falling; 0 = off.
    patience: int = 3
    min_delta: float = 0.0
    # Stop once the `on_eval` callback reports `parse_error_rate` <= this (the tool-call
    # format is stable; SPEC §6 says "well under 20%") for `parse_error_evals` consecutive
    # evaluations. null = never stop on it (the rate is still logged).
    parse_error_stop: float | None = 0.05
    parse_error_evals: int = 1
    # No early stop before this many optimizer steps.
    min_steps: int = 0
    # On an early stop for worsening validation, write the weights of the best-validation
    # evaluation instead of the last ones (a CPU copy of the trainable weights).
    restore_best: bool = True


@dataclass(frozen=True)
class SFTParams:
    """Loss-masked SFT on policy tokens (rlvr.train.sft.train_sft)."""

    seed: int = 0                     # data order, validation split, init of LoRA adapters
    learning_rate: float = 1e-3       # peak; ~1e-5 for a real pretrained checkpoint
    lr_scheduler_type: Literal["cosine", "linear", "constant"] = "cosine"
    warmup_steps: int = 10            # linear warmup from 0 to the peak
    min_lr_ratio: float = 0.1         # cosine/linear decay floor, as a share of the peak
    epochs: int = 3                   # passes over the train demonstrations
    max_steps: int = 0                # optimizer steps; 0 = as many as `epochs` give
    batch_size: int = 16              # demonstrations per optimizer step (global batch)
    # Padded tokens per forward/backward pass: the memory knob. Micro-batches are
    # length-sorted and right-padded; the loss and its gradient do not depend on it.
    micro_batch_tokens: int = 16384
    # Padding-free micro-batches: each one's rows run packed into one row (position ids
    # restart per row; rlvr/engines/logprobs.py), filled up to `micro_batch_tokens` real
    # tokens whatever their lengths. Same loss and gradients; the model must take packed
    # positions (checked at load: a ConfigError naming this key otherwise).
    packed: bool = False
    # Longest demonstration (tokens) trained on; longer ones are dropped at selection with
    # reason `too_long` — a transcript is never truncated (it would end mid-turn).
    max_seq_len: int = 8192
    grad_clip: float = 1.0            # max global grad norm; 0 = off
    weight_decay: float = 0.0         # AdamW decay on matrices (never norms / biases)
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_eps: float = 1e-8
    eval_every: int = 50              # steps between validation evaluations; 0 = at the end only
    # Train tasks the model is rolled out on (one sampled episode each, no verification) at
    # every evaluation: the parse-error rate of *sampled* tool calls, SPEC §6's stop signal
    # (`early_stop.parse_error_stop`). 0 = no probe.
    probe_tasks: int = 8
    dtype: Literal["float32", "bfloat16"] = "float32"   # weights and compute
    device: str = "cpu"
    # torch: plain AdamW. deepspeed: the same AdamW under a DeepSpeed engine with ZeRO
    # `zero_stage` (0-3; gloo on CPU, nccl on GPUs): 1-2 shard optimizer state and gradients,
    # 3 the parameters too (gathered per layer inside each forward);
    # data-parallel over the ranks a launcher starts (rlvr/train/backend.py).
    backend: Literal["torch", "deepspeed"] = "torch"
    zero_stage: int = 0
    # Recompute each decoder layer's activations in the backward instead of keeping them
    # (HF gradient checkpointing): activation memory ~one layer's, ~30% more compute, the
    # same gradients (rlvr/train/backend.py).
    activation_checkpointing: bool = False
    # Rows of logits per LM-head chunk (peak memory of the head; results do not change).
    head_chunk_tokens: int = 4096
    lora: LoraParams = field(default_factory=LoraParams)
    demos: DemoParams = field(default_factory=DemoParams)
    early_stop: EarlyStopParams = field(default_factory=EarlyStopParams)

    @classmethod
    def next_token(cls, *, seed: int, learning_rate: float, steps: int, batch_size: int,
                   eval_every: int = 0) -> "SFTParams":
        """The SFT run that next-token pretraining is (rlvr.train.pretrain): `steps` optimizer
        steps after a linear warmup over the first min(20, steps), every row trained (no
        validation split), no rollout probe, no early stop."""
        return cls(seed=seed, learning_rate=learning_rate, max_steps=steps, epochs=0,
                   batch_size=batch_size, warmup_steps=min(20, steps), eval_every=eval_every,
                   probe_tasks=0, demos=DemoParams(val_fraction=0.0),
                   early_stop=EarlyStopParams(patience=0, parse_error_stop=None))

    def check(self, where: str = "sft") -> "SFTParams":
        """Refuse values without meaning, naming the key; returns self."""
        def bad(key: str, why: str, value: Any) -> None:
            raise ConfigError(f"{where}.{key}: {why}, got {value!r}")

        if not self.learning_rate > 0:
            bad("learning_rate", "must be > 0", self.learning_rate)
        for key in ("warmup_steps", "epochs", "max_steps", "eval_every", "probe_tasks"):
            if getattr(self, key) < 0:
                bad(key, "must be >= 0", getattr(self, key))
        if self.epochs == 0 and self.max_steps == 0:
            bad("max_steps", "epochs and max_steps are both 0: nothing to train", 0)
        for key in ("batch_size", "micro_batch_tokens", "max_seq_len", "head_chunk_tokens"):
            if getattr(self, key) < 1:
                bad(key, "must be >= 1", getattr(self, key))
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            bad("min_lr_ratio", "must be in [0, 1]", self.min_lr_ratio)
        check_adamw(self, bad)
        check_backend(self, bad)
        demos, es = self.demos, self.early_stop
        self.lora.check(bad)
        if demos.max_per_task < 0:
            bad("demos.max_per_task", "must be >= 0 (0 = no cap)", demos.max_per_task)
        if not 0.0 <= demos.val_fraction < 1.0:
            bad("demos.val_fraction", "must be in [0, 1)", demos.val_fraction)
        if es.patience < 0 or es.min_steps < 0:
            bad("early_stop.patience" if es.patience < 0 else "early_stop.min_steps",
                "must be >= 0", min(es.patience, es.min_steps))
        if es.min_delta < 0:
            bad("early_stop.min_delta", "must be >= 0", es.min_delta)
        if es.parse_error_stop is not None and not 0.0 <= es.parse_error_stop <= 1.0:
            bad("early_stop.parse_error_stop", "must be in [0, 1] or null", es.parse_error_stop)
        if es.parse_error_evals < 1:
            bad("early_stop.parse_error_evals", "must be >= 1", es.parse_error_evals)
        return self


def parse_sft_params(value: dict, where: str = "sft") -> SFTParams:
    """A mapping (the YAML section) -> checked SFTParams."""
    return parse(SFTParams, value, where).check(where)


def load_sft_params(path: Path | str = DEFAULT_PARAMS, section: str = "sft") -> SFTParams:
    return load_section(SFTParams, section, path).check(section)
