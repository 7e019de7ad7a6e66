"""Shared pieces of the SFT tests (test_sft*.py): synthetic multi-turn agent transcripts as
SFT_DATA rows, and the module-scoped `rows` fixture of ten of them (import it into a test
module to use it: `from sftkit import rows  # noqa: F401`)."""
from __future__ import annotations

import random

import pytest

from agentkit import token_ids
from rlvr.engines.model_dir import load_tokenizer


def transcript(tok, i: int, turns: int = 3) -> dict:
    """A synthetic multi-turn agent transcript as an SFT_DATA row: prompt and observations
    masked out, each action + <|im_end|> trained."""
    rng = random.Random(i)
    ids = token_ids(tok.apply_chat_template([{"role": "user", "content": f"fix task {i}"}],
                                            add_generation_prompt=True))
    mask = [0] * len(ids)
    for t in range(turns):
        act = tok.encode(f'<tool_call>{{"name": "view", "args": {{"path": "pkg/m{i % 3}.py"}}}}'
                         "</tool_call>") + [tok.convert_tokens_to_ids("<|im_end|>")]
        obs = tok.encode(f"\n<|im_start|>tool\ndef f{t}(x):\n    return x + {rng.randint(0, 9)}"
                         "\n<|im_end|>\n<|im_start|>assistant\n")
        ids += act + obs
        mask += [1] * len(act) + [0] * len(obs)
    return {"trajectory_id": f"tr-{i}", "task_id": f"task-{i % 5}", "part": "train",
            "token_ids": ids, "loss_mask": mask, "token_hash": f"h{i}", "n_tokens": len(ids),
            "n_trainable_tokens": sum(mask)}


@pytest.fixture(scope="module")
def rows(policy_dir):
    tok = load_tokenizer(policy_dir)
    return [transcript(tok, i) for i in range(10)]
