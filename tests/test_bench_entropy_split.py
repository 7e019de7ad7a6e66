"""bench/entropy_split.py's region split: a token is in its turn's tool call from the
`<tool_call>` token on, and only in that turn (the prompt, turn -1, never is)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("entropy_split", REPO / "bench" / "entropy_split.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("entropy_split", module)
    spec.loader.exec_module(module)
    return module


def test_call_region_starts_at_the_call_token_of_each_turn():
    CALL = 7
    ids = torch.tensor([1, 7, 2, 3, 7, 4, 5, 6, 7, 8])
    turns = torch.tensor([-1, -1, 0, 0, 0, 0, 1, 1, 1, 1])
    got = _bench().call_region(ids, turns, CALL).tolist()
    assert got == [False, False, False, False, True, True, False, False, True, True]
