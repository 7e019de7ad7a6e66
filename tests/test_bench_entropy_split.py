"""bench/entropy_split.py on a tiny policy: the per-region entropies it reports weigh back to
the all-token entropy, and both regions are really present in a transcript with a call."""
from __future__ import annotations

import pytest
import torch

from agentkit import tiny_policy_dir
from rlvr.engines.base import SamplingParams
from rlvr.engines.model_dir import load_policy
from rlvr.train.grpo_behaviour import call_token_id
from scriptkit import load_script


def test_region_entropies_weigh_back_to_the_all_token_entropy():
    policy = load_policy(tiny_policy_dir())
    call = call_token_id(policy.tokenizer)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, policy.model.config.vocab_size, (40,), generator=g)
    ids[[14, 33]] = call  # one call per turn
    mask = [False] * 8 + [True] * 12 + [False] * 6 + [True] * 14
    turns = [-1] * 8 + [0] * 18 + [1] * 14
    row = {"token_ids": ids.tolist(), "loss_mask": mask, "turn_ids": turns}
    out = load_script("bench/entropy_split.py").region_entropy(
        policy.model, [row], SamplingParams(temperature=1.0), None, call)
    assert out["call_tokens"] == (20 - 14) + (40 - 33) and out["reasoning_tokens"] == 26 - 13
    mixed = (out["call_entropy"] * out["call_tokens"]
             + out["reasoning_entropy"] * out["reasoning_tokens"]) / 26
    assert mixed == pytest.approx(out["all_entropy"], abs=2e-4)  # the report rounds to 1e-4
