"""The initial policy directory: build the CPU-default LM (and pretrain it) or import a real
checkpoint. The `init_policy` stage and the learning sweep (bench/learning_sweep.py) both
build through here, so a sweep point is the pipeline's policy with only the swept knob changed.

`kind: local` builds the CPU-default policy (BPE tokenizer trained on the repo's code +
synthetic tool-call transcripts, seeded random Qwen2/Llama-style LM), then optionally
pretrains it (`rlvr.train.pretrain`); `kind: path` copies an existing HF causal-LM directory
(e.g. a Qwen2.5-Coder checkpoint on a GPU box) after checking it speaks the shared chat
format. Either way the output is an ordinary HF directory that every later stage loads with
`rlvr.engines.model_dir.load_policy`.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable, Collection, Literal, Sequence

from rlvr.artifacts.io import replace_dir, temp_dir_beside
from rlvr.agent.codecs import ChatSetup, load_codec, resolve_chat, write_chat_card
from rlvr.engines.local_policy import BuildReport, PolicySize, build_local_policy, policy_corpus
from rlvr.engines.model_dir import (ModelDirError, count_parameters, load_tokenizer,
                                    weights_fingerprint)
from rlvr.train.pretrain import PretrainParams, pretrain_policy, training_code


@dataclass(frozen=True)
class PolicyParams(PolicySize):
    """`policy` in params.yaml: the architecture (`PolicySize`: arch, vocab_size, hidden_size,
    layers, heads, kv_heads, intermediate_size, max_position_embeddings, rope_theta) and how
    the policy is made."""

    kind: Literal["local", "path"] = "local"
    path: str = ""  # kind=path: an existing local HF causal-LM directory
    seed: int = 0   # tokenizer corpus sampling and weight init
    synthetic_samples: int = 200  # synthetic tool-call transcripts in the tokenizer corpus
    # kind=path: how the model calls tools. "auto": what its chat template declares
    # (hermes for Qwen2.5/Qwen3, llama3_json for Llama 3.x); or a registered format
    # (rlvr.toolcalls: rlvr | hermes | llama3_json). Recorded in the directory's chat card.
    tool_call_format: str = "auto"
    # kind=path: the template's thinking mode (`enable_thinking`, Qwen3): sampled <think>
    # text is the policy's action (trained, rewarded by outcome only); off = the template's
    # empty think block is prompt context
    thinking: bool = False
    # next-token pretraining on the training families' code and synthetic repair episodes
    # (rlvr.train.pretrain): teaches the random-init default to copy from its context
    pretrain: PretrainParams = field(default_factory=PretrainParams)


def build_random_policy(params: PolicyParams, out_dir: Path, texts: Sequence[str]) -> BuildReport:
    """The seeded random LM + tokenizer trained on `texts`, sized by `params`."""
    size = {f.name: getattr(params, f.name) for f in fields(PolicySize)}
    return build_local_policy(out_dir, texts, seed=params.seed, **size)


def init_policy(params: PolicyParams, out_dir: Path, root: Path = Path("."),
                evaluation_families: Collection[str] = (),
                log: Callable[[int, dict], None] | None = None) -> dict:
    """Write the initial policy to `out_dir`; its metrics. `evaluation_families` (held-out +
    regression) never reach the tokenizer corpus nor the pretraining code."""
    if params.kind == "local":
        texts, corpus = policy_corpus(root, seed=params.seed,
                                      synthetic_samples=params.synthetic_samples,
                                      exclude_families=evaluation_families)
        built = out_dir.with_name(f".{out_dir.name}.random") if params.pretrain.steps \
            else out_dir
        report = build_random_policy(params, built, texts)
        metrics = {**corpus, "corpus_tokens": report.corpus_tokens,
                   "chars_per_token": report.chars_per_token}
        if params.pretrain.steps:
            code = training_code(root, evaluation_families)
            result, n_seq = pretrain_policy(built, out_dir, code, params.pretrain, log=log)
            shutil.rmtree(built, ignore_errors=True)
            metrics["pretrain"] = {"sequences": n_seq, "steps": result.steps,
                                   "tokens": result.tokens,
                                   "final_loss": round(result.train_loss, 4)}
    else:
        if not params.path:
            raise ModelDirError("policy.path: required when policy.kind is 'path'")
        setup = import_chat(Path(params.path), params.tool_call_format, params.thinking)
        copy_model_dir(Path(params.path), out_dir)
        write_chat_card(out_dir, setup)
        metrics = {"tool_call_format": setup.tool_call_format, "thinking": setup.thinking,
                   "chat_template": setup.template_hash}
    tokenizer = load_tokenizer(out_dir)
    metrics.update({"kind": params.kind, "param_count": count_parameters(out_dir),
                    "vocab_size": len(tokenizer), "policy_version": weights_fingerprint(out_dir)})
    return metrics


def import_chat(model_dir: Path, tool_call_format: str, thinking: bool) -> ChatSetup:
    """How an imported directory is spoken to, checked by building its codec (a missing
    template, special token or format is a named error before anything is copied)."""
    setup = resolve_chat(model_dir, tool_call_format, thinking=thinking)
    load_codec(model_dir, setup)
    return setup


def copy_model_dir(src: Path, dest: Path) -> None:
    """Copy (resolving symlinks, e.g. HF cache snapshots) beside dest, then swap it in."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_dir_beside(dest)
    try:
        shutil.copytree(src, tmp, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".git", ".cache", "*.lock"))
        replace_dir(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
