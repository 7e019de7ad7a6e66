"""The policy directory every trainer here writes (the SFT and GRPO outputs, GRPO's
checkpoints and the directories its server sampler loads): an HF causal-LM directory holding
the weights and the tokenizer files of the policy it started from, built in a temp dir beside
its destination and renamed into place, so a kill never leaves half a policy behind."""
from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from rlvr.artifacts.io import replace_dir, temp_dir_beside
from rlvr.engines.model_dir import TOKENIZER_EXTRA, TOKENIZER_FILES

# + the chat card (rlvr.agent.codecs.CHAT_CARD): how the policy is spoken to travels with
# every directory trained from it
TOKENIZER_COPY = (*TOKENIZER_FILES, *TOKENIZER_EXTRA, "special_tokens_map.json",
                  "added_tokens.json", "rlvr_chat.json")


def save_hf_weights(dest: Path, model, tokenizer_from: Path) -> None:
    """`model`'s weights (saved in eval mode, its train/eval state restored) and the
    tokenizer files of the policy directory `tokenizer_from` into the existing directory
    `dest`: what every policy directory this package writes holds besides its card."""
    was = model.training
    model.eval()
    model.save_pretrained(dest)
    model.train(was)
    for name in TOKENIZER_COPY:
        if (Path(tokenizer_from) / name).is_file():
            shutil.copy2(Path(tokenizer_from) / name, Path(dest) / name)


@contextmanager
def staged_dir(dest: Path | str) -> Iterator[Path]:
    """A fresh temp dir beside `dest` to build it in; renamed onto `dest` when the block
    completes, removed if it raises."""
    tmp = temp_dir_beside(dest)
    try:
        yield tmp
        replace_dir(tmp, Path(dest))
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
