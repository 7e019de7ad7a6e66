"""Load any local Hugging Face causal-LM directory (weights + tokenizer) — the one format
policies take everywhere.

The CPU-default policy built by `local_policy.build_local_policy` and a real checkpoint on a
GPU box (e.g. a Qwen2.5-Coder directory) go through the same `load_policy`: only params
change, never code. Nothing is ever downloaded (`HF_HUB_OFFLINE=1`, `local_files_only`).
A directory that cannot be a policy is refused with a `ModelDirError` that names the
directory and what is wrong with it, before transformers produces a less helpful error.
A loaded policy runs in `eval_mode` wherever it samples or scores.
"""
from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.errors import ConfigError, RlvrError

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
# Any one of these makes a loadable tokenizer (fast tokenizer json, sentencepiece, BPE files).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
TOKENIZER_EXTRA = ("merges.txt", "tokenizer_config.json", "chat_template.jinja")

DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16"}


class ModelDirError(RlvrError):
    """A directory given as a policy is not a loadable local HF causal-LM directory."""


@dataclass
class Policy:
    """A loaded policy: the causal LM, its tokenizer, where it came from and its version."""

    model: Any  # transformers PreTrainedModel (causal LM), in eval mode
    tokenizer: Any  # transformers PreTrainedTokenizerBase
    model_dir: Path
    version: str


@contextmanager
def eval_mode(model):
    """Run without dropout; give every module back the train/eval flag it had (an engine may
    sample from the trainer's own model, which goes on training afterwards)."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


def validate_model_dir(model_dir: Path | str) -> dict:
    """Check that `model_dir` holds a config, weights and a tokenizer; return its config.

    Raises `ModelDirError` naming the directory and the missing / broken piece.
    """
    d = Path(model_dir)
    if not d.exists():
        raise ModelDirError(f"{d}: policy directory does not exist")
    if not d.is_dir():
        raise ModelDirError(f"{d}: policy path is not a directory")
    cfg_path = d / "config.json"
    if not cfg_path.is_file():
        raise ModelDirError(f"{d}: missing config.json (not a Hugging Face model directory)")
    try:
        config = json.loads(cfg_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelDirError(f"{cfg_path}: not valid JSON: {exc}") from None
    if not isinstance(config, dict) or not config.get("model_type"):
        raise ModelDirError(f"{cfg_path}: no 'model_type' (cannot tell the architecture)")
    weight_files(d)  # raises when there are none
    if not any((d / name).is_file() for name in TOKENIZER_FILES):
        raise ModelDirError(
            f"{d}: missing tokenizer (none of {', '.join(TOKENIZER_FILES)}); a policy directory "
            "carries its tokenizer so token ids mean the same thing everywhere")
    return config


def weight_files(model_dir: Path | str) -> list[Path]:
    """The weight files of a model directory (single file or every shard of an index)."""
    d = Path(model_dir)
    for name in WEIGHT_FILES:
        if (d / name).is_file():
            return [d / name]
    for name in WEIGHT_INDEXES:
        index = d / name
        if index.is_file():
            try:
                shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
                raise ModelDirError(f"{index}: broken weight index: {exc!r}") from None
            missing = [s for s in shards if not (d / s).is_file()]
            if missing:
                raise ModelDirError(f"{d}: weight shard(s) listed in {name} are missing: {missing}")
            return [d / s for s in shards]
    raise ModelDirError(
        f"{d}: missing weights (none of {', '.join(WEIGHT_FILES + WEIGHT_INDEXES)})")


def weights_fingerprint(model_dir: Path | str) -> str:
    """Content hash of config, tokenizer and weights: the default `policy_version` of a
    directory (the tokenizer is part of it: the same weights over other token ids are another
    policy).

    Hashes every byte, so for a multi-GB checkpoint this costs a few seconds at load; pass an
    explicit version string to the engine to skip it.
    """
    d = Path(model_dir)
    h = hashlib.sha256()
    extra = [d / n for n in ("config.json", *TOKENIZER_FILES, *TOKENIZER_EXTRA) if (d / n).is_file()]
    for path in extra + weight_files(d):
        h.update(path.name.encode())
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return "sha256:" + h.hexdigest()[:16]


def torch_dtype(name: str):
    import torch

    try:
        return getattr(torch, DTYPES[name])
    except KeyError:
        raise ModelDirError(f"unknown dtype {name!r} (known: {', '.join(DTYPES)})") from None


def load_tokenizer(model_dir: Path | str):
    """The directory's tokenizer (validating the directory first)."""
    validate_model_dir(model_dir)
    return _load_tokenizer(Path(model_dir))


def _load_tokenizer(d: Path):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(d), local_files_only=True)
    except Exception as exc:  # tokenizers / transformers raise many types for one bad file
        raise ModelDirError(f"{d}: tokenizer does not load: {exc}") from exc


def load_policy(model_dir: Path | str, *, device: str = "cpu", dtype: str = "float32",
                attn_implementation: str | None = None, version: str | None = None) -> Policy:
    """Load the causal LM and tokenizer of a local HF directory, in eval mode.

    fp32 on CPU by default (behaviour logprobs must be recomputable within 1e-4);
    `device` / `dtype` for a GPU box. `version` overrides the weights fingerprint.
    """
    from transformers import AutoModelForCausalLM

    d = Path(model_dir)
    validate_model_dir(d)
    tokenizer = _load_tokenizer(d)
    kwargs: dict[str, Any] = {"local_files_only": True, "dtype": torch_dtype(dtype)}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    try:
        model = AutoModelForCausalLM.from_pretrained(str(d), **kwargs)
    except Exception as exc:  # safetensors, torch and transformers each have their own
        raise ModelDirError(f"{d}: model does not load as a causal LM: {exc}") from exc
    model.to(device)
    model.eval()
    if len(tokenizer) > model.config.vocab_size:
        raise ModelDirError(
            f"{d}: tokenizer has {len(tokenizer)} tokens but the model's vocab_size is "
            f"{model.config.vocab_size}")
    return Policy(model=model, tokenizer=tokenizer, model_dir=d,
                  version=version or weights_fingerprint(d))


def count_parameters(model_dir: Path | str) -> int:
    """Parameter count of a model directory without loading its weights (meta device)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    d = Path(model_dir)
    validate_model_dir(d)
    try:
        config = AutoConfig.from_pretrained(str(d), local_files_only=True)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception as exc:
        raise ModelDirError(f"{d}: config does not describe a causal LM: {exc}") from exc
    return sum(p.numel() for p in model.parameters())


def checkpoint_policy_step(model_dir: Path | str) -> int:
    """The `policy_step` a trainer recorded in the checkpoint's `training.json` (GRPO's update
    passport), 0 for a directory without one (an initial or SFT policy): what the passports
    of rollouts from these weights must record, so that the gate marks a rejected version's
    rollouts by the right step."""
    card = Path(model_dir) / "training.json"
    if not card.is_file():
        return 0
    try:
        step = json.loads(card.read_text()).get("policy_step", 0)
    except (OSError, ValueError, AttributeError) as exc:
        raise ConfigError(f"{card}: unreadable training card ({exc})") from None
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ConfigError(f"{card}: policy_step {step!r} is not an integer >= 0")
    return step
