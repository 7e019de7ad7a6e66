"""LoRA (peft) as SFT and GRPO use it: the params, the adapters put on a model, the KL
reference of a LoRA run, and the adapters' weights alone (what a sync or a checkpoint moves).

Why one module: both trainers adapt the same matrices the same way (SPEC §6: every major
matrix, the MLP included; lr ~10x full fine-tuning), and GRPO relies on what LoRA leaves
untouched: the base weights never change, so the KL reference (β > 0) is the trained model
with its adapters disabled rather than a second copy of the model, and each update moves
only the adapters to the sampler (`AdapterWeights` to the in-process engine, an adapter
directory for vLLM to hot-load).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from rlvr.engines.base import AdapterWeights
from rlvr.errors import ConfigError

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ADAPTER_DIR = "adapter"  # an adapter beside (or instead of) a directory's full weights


@dataclass(frozen=True)
class LoraParams:
    """LoRA via peft (SPEC §6: all major matrices incl. the MLP; lr ~10x the full-FT rate;
    rank 64-256 for SFT, 8-32 for RL: `RLLoraParams`)."""

    enabled: bool = False
    r: int = 64               # adapter rank
    alpha: int = 128          # scaling = alpha / r
    dropout: float = 0.0      # dropout on the adapter input
    target_modules: tuple[str, ...] = LORA_TARGETS
    # The output directory always holds merged weights (a plain HF causal LM); with this,
    # the adapter alone is written too, under `adapter/` (a few MB).
    save_adapter: bool = True

    def check(self, bad: Callable[[str, str, Any], None]) -> None:
        """`bad(key, why, value)` raises, the key relative to the section (`lora.r`)."""
        if self.enabled:
            if self.r < 1:
                bad("lora.r", "must be >= 1", self.r)
            if self.alpha <= 0:
                bad("lora.alpha", "must be > 0", self.alpha)
            if not self.target_modules:
                bad("lora.target_modules", "must name at least one module", self.target_modules)
        if not 0.0 <= self.dropout < 1.0:
            bad("lora.dropout", "must be in [0, 1)", self.dropout)


@dataclass(frozen=True)
class RLLoraParams(LoraParams):
    """GRPO's LoRA: the same knobs at RL's rank (SPEC §6: 8-32)."""

    r: int = 16
    alpha: int = 32


def apply_lora(model, p: LoraParams, where: str):
    """`model` with fresh adapters on `p.target_modules` (only they train); the modules the
    model lacks are a ConfigError naming `<where>.lora.target_modules`. Adapter init draws
    from torch's RNG: seed it first for a reproducible run."""
    from peft import LoraConfig, get_peft_model

    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    missing = [m for m in p.target_modules if m not in present]
    if missing:
        raise ConfigError(f"{where}.lora.target_modules: {missing} not in the model "
                          f"(it has e.g. {sorted(present - {''})[:12]})")
    cfg = LoraConfig(r=p.r, lora_alpha=p.alpha, lora_dropout=p.dropout,
                     target_modules=list(p.target_modules), bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, cfg)


def is_lora(model) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


def adapter_weights(model) -> AdapterWeights:
    """The adapters' tensors by `model.state_dict()` names (copies: the trainer goes on
    updating its own), what the in-process sampler loads over its adapters."""
    names = {n for n, q in model.named_parameters() if q.requires_grad}
    return AdapterWeights({n: t.detach().clone() for n, t in model.state_dict().items()
                           if n in names})


def load_adapter(model, adapter_dir: Path) -> None:
    """The adapter weights saved in `adapter_dir` (`save_pretrained`) into `model`'s adapters."""
    from peft.utils import set_peft_model_state_dict
    from safetensors.torch import load_file

    result = set_peft_model_state_dict(model, load_file(str(Path(adapter_dir) / "adapter_model.safetensors")))
    if getattr(result, "unexpected_keys", None):
        raise ConfigError(f"{adapter_dir}: adapter weights the model has no place for: "
                          f"{result.unexpected_keys[:4]}")


@dataclass(frozen=True)
class AdaptersOff:
    """The KL reference of a LoRA run: the trained model with its adapters disabled, i.e.
    the base weights LoRA never changes (no second copy of the model in memory)."""

    model: Any


@contextmanager
def reference_model(reference) -> Iterator[Any]:
    """The model that scores the KL reference: `reference` itself (a frozen copy of the
    initial policy), or for `AdaptersOff` the trained model with its adapters disabled for
    the duration of the block."""
    if isinstance(reference, AdaptersOff):
        with reference.model.disable_adapter(), torch.no_grad():
            yield reference.model
    else:
        yield reference


__all__ = ["ADAPTER_DIR", "AdaptersOff", "LORA_TARGETS", "LoraParams", "RLLoraParams", "adapter_weights",
           "apply_lora", "is_lora", "load_adapter", "reference_model"]
