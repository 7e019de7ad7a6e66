"""Padding-free (packed) batches (issue 37): rows packed into one, position ids restarting per
row, give the padded batches' logprobs, loss and gradients — in `sequence_logprobs`, in the SFT
step and in the GRPO update (SPEC §6/§7 masks and normalisers unchanged), on the CPU default's
tiny policy and on the tiny Qwen3 at the real vocabulary; a model whose attention does not
take packed positions is a ConfigError naming the key, before any training."""
from __future__ import annotations

import copy

import pytest
import torch

from agentkit import record_grads, synthetic_groups, tiny_policy_dir
from grpokit import SCORING
from rlvr.engines.logprobs import pack_rows, packing_error, sequence_logprobs
from rlvr.engines.model_dir import load_policy
from rlvr.errors import ConfigError
from rlvr.train import grpo_update
from rlvr.train.backend import BackendParams, build_backend, require_packing
from rlvr.train.batching import micro_batches
from rlvr.train.grpo_config import parse_grpo_params
from rlvr.train.sft import nll, to_examples
from rlvr.train.sft_config import SFTParams

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    from rlvr.engines.tiny_model import build_tiny_qwen

    return build_tiny_qwen(tmp_path_factory.mktemp("pack") / "tiny-qwen3")


def _rows(vocab: int, lengths=(23, 9, 17)) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    only = torch.zeros(len(lengths), max(lengths) - 1, dtype=torch.bool)
    for r, n in enumerate(lengths):
        ids[r, :n] = torch.randint(1, vocab, (n,), generator=g)
        only[r, n // 3:n - 1] = True
    return ids, only


def test_micro_batches_packed_fill_a_real_token_budget():
    lengths = [50, 10, 30, 30, 45, 5, 29, 28]
    cuts = micro_batches(lengths, range(8), 100, packed=True)
    assert sorted(i for c in cuts for i in c) == list(range(8))
    assert all(sum(lengths[i] for i in c) <= 100 for c in cuts)
    assert cuts[0] == [0, 4]           # 50 + 45; padded, [0, 4] too but 30 breaks 10 %
    assert cuts[1] == [2, 3, 6]        # 30 + 30 + 29 = 89; + 28 would be 117
    assert micro_batches([120, 3], [0, 1], 100, packed=True) == [[0], [1]]  # alone if longer


def test_pack_rows_lays_rows_end_to_end_and_finds_the_selected_positions():
    ids = torch.tensor([[5, 6, 7], [8, 9, 0]])
    sel = torch.tensor([[True, True], [True, False]])
    flat, pos, at = pack_rows(ids, [3, 2], sel)
    assert flat.tolist() == [[5, 6, 7, 8, 9]] and pos.tolist() == [[0, 1, 2, 0, 1]]
    assert at.tolist() == [0, 1, 3]
    with pytest.raises(ValueError, match="past its row's length"):
        pack_rows(ids, [3, 1], sel)


@pytest.mark.parametrize("which", ["cpu_default", "qwen3"])
def test_packed_logprobs_entropy_and_gradients_equal_the_padded_ones(which, request):
    d = request.getfixturevalue("qwen_dir") if which == "qwen3" else tiny_policy_dir()
    model = load_policy(d).model
    assert packing_error(model) is None
    ids, only = _rows(min(model.config.vocab_size, 5000))
    out = []
    for lengths in (None, [23, 9, 17]):
        model.zero_grad(set_to_none=True)
        sc = sequence_logprobs(model, ids, only=only, with_entropy=True, lengths=lengths,
                               params=SCORING)
        (sc.logprobs.sum() + sc.entropy.sum()).backward()
        out.append((sc.logprobs.detach(), sc.entropy.detach(),
                    {k: q.grad.clone() for k, q in model.named_parameters()}))
    (lp0, h0, g0), (lp1, h1, g1) = out
    torch.testing.assert_close(lp1, lp0, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(h1, h0, rtol=1e-5, atol=1e-5)
    for k in g0:
        torch.testing.assert_close(g1[k], g0[k], rtol=1e-4, atol=1e-5, msg=k)


def test_the_sft_loss_and_gradients_are_the_same_packed(policy_dir):
    from sftkit import transcript
    from rlvr.engines.model_dir import load_tokenizer

    tok = load_tokenizer(policy_dir)
    ex = to_examples([transcript(tok, i, turns=1 + i % 4) for i in range(6)])
    n = sum(e.n_policy for e in ex)
    base = load_policy(policy_dir).model
    base.train()
    got = []
    for packed in (False, True):
        model = copy.deepcopy(base)
        p = SFTParams(packed=packed, micro_batch_tokens=300)
        cuts = micro_batches([len(e.ids) for e in ex], range(6), p.micro_batch_tokens,
                             packed=packed)
        loss = sum(float(_backward(nll(model, ex, c, n, p))) for c in cuts)
        got.append((loss, cuts, {k: q.grad for k, q in model.named_parameters()}))
    (l0, cuts0, g0), (l1, cuts1, g1) = got
    assert cuts0 != cuts1 and len(cuts1) < len(cuts0)  # packing fills its budget better
    assert l1 == pytest.approx(l0, rel=1e-6)
    for k in g0:
        torch.testing.assert_close(g1[k], g0[k], rtol=1e-4, atol=1e-7, msg=k)


def _backward(loss: torch.Tensor) -> torch.Tensor:
    loss.backward()
    return loss.detach()


@pytest.mark.parametrize("which", ["cpu_default", "qwen3"])
def test_the_grpo_update_loss_and_gradients_are_the_same_packed(which, request):
    d = request.getfixturevalue("qwen_dir") if which == "qwen3" else tiny_policy_dir()
    base = load_policy(d).model
    base.train()
    groups = synthetic_groups(base, n_groups=3, G=2, seed=5)
    got = []
    for packed in (False, True):
        model = copy.deepcopy(base)
        params = parse_grpo_params({"steps": 1, "group_size": 2, "groups_per_step": 3,
                                    "tasks_per_draw": 3, "max_draws": 1, "consensus_runs": 1,
                                    "learning_rate": 5e-2, "grad_clip": 0.0, "epochs": 2,
                                    "mini_batches": 1, "micro_batch_tokens": 120,
                                    "packed": packed})
        backend = build_backend(model, BackendParams.of(params), "grpo")
        grads: list = []
        record_grads(model, backend, grads)
        out = grpo_update.update_policy(model, backend, groups, params, SCORING, None, 0.0, 0)
        got.append((out, grads))
    (o0, g0), (o1, g1) = got
    assert o1["train/loss_mean"] == pytest.approx(o0["train/loss_mean"], rel=1e-5, abs=1e-7)
    assert len(g0) == len(g1) == 2
    for a, b in zip(g0, g1):
        assert any(float(v.abs().max()) > 0 for v in a.values())
        for k in a:
            torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-5, msg=k)


def test_a_model_whose_attention_ignores_packed_positions_is_named(monkeypatch):
    """An attention without transformers' packed-sequence mask (simulated: the packed-position
    detection switched off) lets one row see the previous one: refused before training."""
    from transformers import masking_utils

    model = load_policy(tiny_policy_dir()).model
    monkeypatch.setattr(masking_utils, "find_packed_sequence_indices", lambda pos: None)
    assert "takes no packed positions" in packing_error(model)
    with pytest.raises(ConfigError, match=r"grpo\.packed: .*Qwen2ForCausalLM"):
        require_packing(model, "grpo")
