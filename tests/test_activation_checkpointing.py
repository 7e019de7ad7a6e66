"""Activation checkpointing (issue 37): the GRPO update and the SFT step give the same
gradients with it as without, on the CPU default's tiny policy, on the tiny Qwen3 at the
real vocabulary and on a LoRA model; a model without support is a ConfigError naming the key."""
from __future__ import annotations

import copy

import pytest
import torch

from agentkit import record_grads, synthetic_groups, tiny_policy_dir
from grpokit import SCORING
from rlvr.engines.logprobs import sequence_logprobs
from rlvr.engines.model_dir import load_policy
from rlvr.errors import ConfigError
from rlvr.train import grpo_update
from rlvr.train.backend import BackendParams, build_backend
from rlvr.train.grpo_config import parse_grpo_params
from rlvr.train.lora import RLLoraParams, apply_lora
from rlvr.train.sft_config import SFTParams

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    from rlvr.engines.tiny_model import build_tiny_qwen

    return build_tiny_qwen(tmp_path_factory.mktemp("ckpt") / "tiny-qwen3")


def _grpo_grads(model, groups, checkpointing: bool) -> list[dict]:
    params = parse_grpo_params({"steps": 1, "group_size": 2, "groups_per_step": 2,
                                "tasks_per_draw": 2, "max_draws": 1, "consensus_runs": 1,
                                "learning_rate": 5e-2, "grad_clip": 0.0, "epochs": 2,
                                "activation_checkpointing": checkpointing})
    backend = build_backend(model, BackendParams.of(params), "grpo")
    assert getattr(model, "is_gradient_checkpointing", False) is checkpointing or \
        model.get_base_model().is_gradient_checkpointing is checkpointing
    grads: list = []
    record_grads(model, backend, grads)
    grpo_update.update_policy(model, backend, groups, params, SCORING, None, 0.0, 0)
    return grads


def _same(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b) and a
    for x, y in zip(a, b):
        assert set(x) == set(y)
        for k in x:
            torch.testing.assert_close(y[k], x[k], rtol=1e-5, atol=1e-7, msg=k)
    assert any(float(v.abs().max()) > 0 for v in a[0].values())


@pytest.mark.parametrize("which", ["cpu_default", "qwen3", "lora"])
def test_grpo_update_gradients_are_the_same_with_checkpointing(which, request):
    base_dir = request.getfixturevalue("qwen_dir") if which == "qwen3" else tiny_policy_dir()
    base = load_policy(base_dir).model
    if which == "lora":
        torch.manual_seed(0)
        base = apply_lora(base, RLLoraParams(enabled=True, r=4, alpha=8), "grpo")
        with torch.no_grad():  # B = 0 at init would leave A without gradient
            for k, q in base.named_parameters():
                if "lora_B" in k:
                    q.normal_(0, 0.02)
    base.train()
    groups = synthetic_groups(base, spread=(2, 1))
    _same(_grpo_grads(copy.deepcopy(base), groups, False),
          _grpo_grads(copy.deepcopy(base), groups, True))


def test_sft_loss_gradients_are_the_same_with_checkpointing():
    base = load_policy(tiny_policy_dir()).model
    base.train()
    ids = torch.randint(0, base.config.vocab_size, (2, 40), generator=torch.Generator().manual_seed(0))
    grads, kept = [], []
    for on in (False, True):
        model = copy.deepcopy(base)
        params = SFTParams(activation_checkpointing=on)
        build_backend(model, BackendParams.of(params), "sft")
        saved = [0]   # bytes the forward keeps for the backward

        def pack(t):
            saved[0] += t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = sequence_logprobs(model, ids, None, SCORING).logprobs.sum()
        loss.backward()
        grads.append([{n: q.grad.clone() for n, q in model.named_parameters()}])
        kept.append(saved[0])
    _same(*grads)
    assert kept[1] < kept[0]   # checkpointed: the layers' activations were not kept


def test_a_model_without_support_is_refused_by_name():
    params = SFTParams(activation_checkpointing=True)
    with pytest.raises(ConfigError, match=r"sft\.activation_checkpointing: Linear"):
        build_backend(torch.nn.Linear(2, 2), BackendParams.of(params), "sft")
