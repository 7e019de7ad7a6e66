"""Pretraining corpus of the CPU default: synthetic repair episodes built from training-family
code, tokenized as episodes are, whose line-addressed fix really undoes the injected bug."""
from __future__ import annotations

import json
import re

import pytest

from agentkit import tiny_policy_dir
from rlvr.agent.executor import edit_line
from rlvr.agent.tools import parse_action
from rlvr.agent.transcript import ChatCodec
from rlvr.train.pretrain import (PretrainParams, pretrain_policy, pretrain_rows,
                                 synthetic_episodes)

SOURCE = '''def clamp(x, lo, hi):
    """Clamp x into [lo, hi]."""
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def total(values):
    s = 0
    for v in values:
        s = s + v
    return s
'''


@pytest.fixture(scope="module")
def codec():
    return ChatCodec.from_model_dir(tiny_policy_dir())


def _turns(text: str) -> list[tuple[str, str]]:
    """(role, content) of every chat message in a rendered transcript."""
    return re.findall(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", text, re.S)


def test_episodes_show_the_bug_line_and_their_edit_undoes_the_bug(codec):
    episodes = synthetic_episodes({"pkg/core.py": SOURCE}, 20, codec, seed=0)
    assert len(episodes) == 20 and len({tuple(e) for e in episodes}) > 5
    for ids in episodes:
        msgs = _turns(codec.decode(ids))
        assert [r for r, _ in msgs][:3] == ["system", "user", "assistant"]
        actions = [parse_action(c) for r, c in msgs if r == "assistant"]
        assert all(a.valid for a in actions)
        assert [a.call.name for a in actions] == ["run_tests", "edit", "run_tests", "submit"]
        args = actions[1].call.args
        observation = msgs[3][1]
        flagged = re.findall(r"^pkg/core\.py:(\d+): (.*)  \[", observation, re.M)
        shown = dict((int(n), text) for n, text in flagged)
        assert args["line"] in shown and args["old"] in shown[args["line"]]
        # rebuild the mutated file from the flagged line: the edit restores the original
        lines = SOURCE.split("\n")
        mutated = "\n".join(shown[args["line"]] if i + 1 == args["line"] and
                            lines[i].strip() != shown[args["line"]] else
                            lines[i] for i in range(len(lines)))
        indent = re.match(r"\s*", lines[args["line"] - 1]).group(0)
        mutated = mutated.replace("\n" + shown[args["line"]] + "\n",
                                  "\n" + indent + shown[args["line"]] + "\n")
        fixed, error = edit_line(mutated, args["line"], args["old"], args["new"])
        assert error == "" and fixed == SOURCE, json.dumps(args)


def test_rows_train_every_token_and_pretraining_writes_a_policy(codec, tmp_path):
    p = PretrainParams(steps=2, episodes=6, batch_size=4, code_chunk_tokens=32)
    rows = pretrain_rows({"pkg/core.py": SOURCE}, codec, p)
    assert len(rows) > 6 and all(set(r["loss_mask"]) == {1} for r in rows)
    result, n = pretrain_policy(tiny_policy_dir(), tmp_path / "pt", {"pkg/core.py": SOURCE}, p)
    assert n == len(rows) and result.steps == 2
    assert (tmp_path / "pt" / "config.json").is_file()
    assert (tmp_path / "pt" / "tokenizer.json").read_bytes() == (
        tiny_policy_dir() / "tokenizer.json").read_bytes()
