"""The GRPO loop's sampler: the token engine its rollouts come from, and how each update's
weights reach it (`grpo.engine`).

* `torch` — an in-process TorchEngine holding its own copy of the weights (as a separate
  engine would); an update is handed over as the trainer's state dict and loaded in place,
  so nothing touches the disk.
* `vllm` — a vLLM server launched on the starting policy directory (`grpo.engine_options`
  are VllmEngineParams fields, as for `rollout.engine_options`). A server reads weights
  from a directory, so an update is first written as an HF directory (weights + the
  tokenizer of the starting policy, temp dir + rename) under `sync_dir/step-<policy_step>`,
  then the server moves to it by its update mode (`server.update`: restart, in-place
  reload or a LoRA adapter). The directory is written by the trainer at the moment of the
  update, so an async producer that loads it a draw later still gets exactly those weights.
  Only the newest `keep` directories stay: the one served and the one being switched to.

Either way the engine keeps the `TokenEngine` protocol and records behaviour logprobs of
the weights it served, which the trainer compares with its own (`train/mismatch/*`).
"""
from __future__ import annotations

import copy
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from rlvr import engines
from rlvr.engines.base import WeightSource
from rlvr.engines.torch_engine import TorchEngine
from rlvr.errors import ConfigError
from rlvr.train.lora import adapter_weights, is_lora
from rlvr.train.policy_dir import save_hf_weights, staged_dir

SAMPLERS = ("torch", "vllm")
SYNC_DIR = "sync"


@dataclass
class Sampler:
    """The loop's acting engine and where its weight directories go (None: in process)."""

    engine: Any
    sync_dir: Path | None
    tokenizer_from: Path
    keep: int = 2

    def source(self, model, policy_step: int) -> WeightSource:
        """What `engine.sync_weights` takes for `model`'s current weights: the state dict
        for the in-process engine, a freshly written policy directory for a server; for a
        LoRA model the adapters alone (`AdapterWeights`, an adapter directory)."""
        if self.sync_dir is None:
            return adapter_weights(model) if is_lora(model) else model.state_dict()
        dest = self.sync_dir / f"step-{policy_step:06d}"
        with staged_dir(dest) as tmp:
            if is_lora(model):  # an adapter directory, hot-loaded (`server.update: lora`)
                model.save_pretrained(tmp)
            else:
                save_hf_weights(tmp, model, self.tokenizer_from)
        written = sorted(p for p in self.sync_dir.iterdir()
                         if p.is_dir() and p.name.startswith("step-"))
        for old in written[:-self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return dest

    def close(self) -> None:
        self.engine.close()


def open_sampler(kind: str, model, tokenizer, start_dir: Path, *, policy_version: str,
                 policy_step: int, options: Mapping[str, Any], sync_dir: Path,
                 where: str = "grpo") -> Sampler:
    """The sampler of kind `kind` serving `model`'s weights, which are those saved in
    `start_dir` (the base policy or the checkpoint a run resumes from). `options` were
    checked with the params (`GRPOParams.check`: none for torch, VllmEngineParams fields
    for vllm)."""
    if kind == "torch":
        engine = TorchEngine.from_model(copy.deepcopy(model), tokenizer,
                                        policy_version=policy_version, policy_step=policy_step)
        return Sampler(engine, None, Path(start_dir))
    if kind == "vllm":
        engine = engines.build_engine("vllm", start_dir, policy_version=policy_version,
                                      policy_step=policy_step, options=options, where=where)
        return Sampler(engine, Path(sync_dir), Path(start_dir))
    raise ConfigError(f"{where}.engine: sampler {kind!r} unknown (known: {', '.join(SAMPLERS)})")
