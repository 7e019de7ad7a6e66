"""Stage `init_policy`: the initial policy directory `models/policy-init/` (a DVC out).

`policy.kind: local` builds the CPU-default policy (BPE tokenizer trained on the repo's code
+ synthetic tool-call transcripts, seeded random Qwen2/Llama-style LM); `policy.kind: path`
copies an existing HF causal-LM directory (e.g. a Qwen2.5-Coder checkpoint on a GPU box)
after checking it loads and speaks the shared chat format. Either way the output is an
ordinary HF directory that every later stage loads with `rlvr.engines.model_dir.load_policy`.

Run: `python -m stages.init_policy [--params params.yaml]`.
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection, Literal

from rlvr.config import load_section
from rlvr.engines.local_policy import (SPECIAL_TOKENS, replace_dir, build_local_policy,
                                       policy_corpus)
from rlvr.engines.model_dir import (ModelDirError, count_parameters, load_tokenizer,
                                    weights_fingerprint)
from rlvr.errors import exit_on_error
from rlvr.tasks.splits import SplitParams
from rlvr.tracking.stage import stage_run
from rlvr.train.pretrain import PretrainParams, pretrain_policy, training_code

OUT_DIR = Path("models/policy-init")
METRICS = Path("metrics/init_policy.json")


@dataclass(frozen=True)
class PolicyParams:
    kind: Literal["local", "path"] = "local"
    path: str = ""  # kind=path: an existing local HF causal-LM directory
    seed: int = 0
    arch: Literal["qwen2", "llama"] = "qwen2"
    vocab_size: int = 4096
    hidden_size: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate_size: int = 512
    max_position_embeddings: int = 8192
    synthetic_samples: int = 200
    # next-token pretraining on the training families' code and synthetic repair episodes
    # (rlvr.train.pretrain): teaches the random-init default to copy from its context
    pretrain: PretrainParams = field(default_factory=PretrainParams)


def run(params: PolicyParams, out_dir: Path = OUT_DIR, metrics_path: Path = METRICS,
        root: Path = Path("."), evaluation_families: Collection[str] = (),
        params_file: Path | str = "params.yaml") -> dict:
    """`evaluation_families` (held-out + regression) never reach the tokenizer corpus."""
    inputs = {"seed_repos": root / "data/seed_repos", "tasks": root / "data/tasks",
              "import": Path(params.path) if params.kind == "path" else None}
    with stage_run("init_policy", params, sections=("policy", "split"),
                   params_file=params_file, inputs=inputs, outputs={"policy": out_dir},
                   metrics_path=metrics_path) as run_:
        if params.kind == "local":
            texts, corpus = policy_corpus(root, seed=params.seed,
                                          synthetic_samples=params.synthetic_samples,
                                          exclude_families=evaluation_families)
            built = out_dir.with_name(f".{out_dir.name}.random") if params.pretrain.steps \
                else out_dir
            report = build_local_policy(
                built, texts, seed=params.seed, vocab_size=params.vocab_size,
                hidden_size=params.hidden_size, layers=params.layers, heads=params.heads,
                kv_heads=params.kv_heads, intermediate_size=params.intermediate_size,
                max_position_embeddings=params.max_position_embeddings, arch=params.arch)
            metrics = {**corpus, "corpus_tokens": report.corpus_tokens,
                       "chars_per_token": report.chars_per_token}
            if params.pretrain.steps:
                code = training_code(root, evaluation_families)
                result, n_seq = pretrain_policy(built, out_dir, code, params.pretrain,
                                                log=run_.log_step)
                shutil.rmtree(built, ignore_errors=True)
                metrics["pretrain"] = {"sequences": n_seq, "steps": result.steps,
                                       "tokens": result.tokens,
                                       "final_loss": round(result.train_loss, 4)}
        else:
            if not params.path:
                raise ModelDirError("policy.path: required when policy.kind is 'path'")
            _check_chat_tokens(Path(params.path))
            _copy_dir(Path(params.path), out_dir)
            metrics = {}
        tokenizer = load_tokenizer(out_dir)
        metrics.update({
            "kind": params.kind, "param_count": count_parameters(out_dir),
            "vocab_size": len(tokenizer), "policy_version": weights_fingerprint(out_dir)})
        run_.log_metrics(metrics)
    return metrics


def _check_chat_tokens(model_dir: Path) -> None:
    """The harness speaks one chat format; its markers must be single tokens."""
    tok = load_tokenizer(model_dir)
    vocab = tok.get_vocab()
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise ModelDirError(f"{model_dir}: tokenizer lacks {missing} as single tokens; the shared "
                            "chat / tool-call format (CONTRIBUTING.md) needs them")


def _copy_dir(src: Path, dest: Path) -> None:
    """Copy (resolving symlinks, e.g. HF cache snapshots) beside dest, then swap it in."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        shutil.copytree(src, tmp, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".git", ".cache", "*.lock"))
        replace_dir(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


@exit_on_error
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Build or import the initial policy directory.")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default=str(OUT_DIR))
    ap.add_argument("--metrics", default=str(METRICS))
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    params = load_section(PolicyParams, "policy", args.params)
    split = load_section(SplitParams, "split", args.params)
    metrics = run(params, Path(args.out), Path(args.metrics),
                  evaluation_families={*split.heldout_families, *split.regression_families},
                  params_file=args.params)
    print(f"init_policy: {params.kind} policy -> {args.out} ({metrics['param_count']} params, "
          f"vocab {metrics['vocab_size']}, {metrics['policy_version']})")


if __name__ == "__main__":
    main()
