"""bench/entropy_split.py's region split: a token is in its turn's tool call from the
`<tool_call>` token on, and only in that turn (the prompt, turn -1, never is)."""
from __future__ import annotations

import torch

from scriptkit import load_script


def _bench():
    return load_script("bench/entropy_split.py")


def test_call_region_starts_at_the_call_token_of_each_turn():
    CALL = 7
    ids = torch.tensor([1, 7, 2, 3, 7, 4, 5, 6, 7, 8])
    turns = torch.tensor([-1, -1, 0, 0, 0, 0, 1, 1, 1, 1])
    got = _bench().call_region(ids, turns, CALL).tolist()
    assert got == [False, False, False, False, True, True, False, False, True, True]
