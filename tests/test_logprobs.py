"""One behaviour distribution: the trainer's teacher-forced logprobs equal the logprobs the
engine recorded while sampling, over whole multi-turn sequences, and gradients flow."""
from __future__ import annotations

import pytest
import torch
from agentkit import token_ids

from rlvr.engines.base import SamplingParams
from rlvr.engines.sampling import process
from rlvr.engines.logprobs import logprobs_from_logits, sequence_logprobs

TOL = 1e-4
PARAMS = [
    SamplingParams(temperature=0.7, top_p=0.9, top_k=40, max_new_tokens=16),
    SamplingParams(temperature=1.0, max_new_tokens=16),
    SamplingParams(temperature=1.3, top_k=7, max_new_tokens=16),
]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _chat(engine, messages):
    return token_ids(engine.tokenizer.apply_chat_template(messages,
                                                          add_generation_prompt=True))


def _two_turn_episode(engine, params, seed):
    """prompt -> sampled turn 1 -> an observation -> sampled turn 2, as one token sequence with
    its loss mask and the engine's recorded behaviour logprobs (aligned to the tokens)."""
    prompt = _chat(engine, [{"role": "user", "content": "fix clamp(x, lo, hi) please"}])
    s1 = engine.generate([prompt], params, seed=seed)[0]
    obs = engine.tokenizer.encode("\n<|im_start|>tool\nok: 3 passed<|im_end|>\n<|im_start|>assistant\n")
    ctx = prompt + s1.token_ids + obs
    s2 = engine.generate([ctx], params, seed=seed + 1)[0]
    ids = ctx + s2.token_ids
    mask = [0] * len(prompt) + [1] * len(s1.token_ids) + [0] * len(obs) + [1] * len(s2.token_ids)
    lps = [0.0] * len(prompt) + s1.logprobs + [0.0] * len(obs) + s2.logprobs
    return ids, mask, lps


@pytest.mark.parametrize("params", PARAMS)
def test_teacher_forced_logprobs_equal_the_recorded_behaviour_logprobs(engine, params):
    episodes = [_two_turn_episode(engine, params, seed) for seed in (1, 2, 3)]
    T = max(len(e[0]) for e in episodes)
    ids = torch.zeros(3, T, dtype=torch.long)
    mask = torch.zeros(3, T, dtype=torch.long)
    attn = torch.zeros(3, T, dtype=torch.long)
    for i, (tok, m, _) in enumerate(episodes):  # right padding
        ids[i, :len(tok)] = torch.tensor(tok)
        mask[i, :len(tok)] = torch.tensor(m)
        attn[i, :len(tok)] = 1
    with torch.no_grad():
        scores = sequence_logprobs(engine.model, ids, None, params, only=mask[:, 1:].bool(),
                                   aligned=True, with_entropy=True)
    gaps = [abs(float(scores.logprobs[i, t]) - lp)
            for i, (tok, m, lps) in enumerate(episodes) for t, lp in enumerate(lps) if m[t]]
    assert len(gaps) == int(mask.sum()) > 20
    assert max(gaps) < TOL
    assert torch.equal(scores.selected, mask.bool())
    # unselected positions are exactly zero; entropies are non-negative where computed
    assert float(scores.logprobs[~scores.selected].abs().sum()) == 0.0
    assert float(scores.entropy.min()) >= -1e-6
    assert float(scores.entropy[scores.selected].mean()) > 0
    # the default selection (every real next token) agrees where both are computed
    with torch.no_grad():
        full = sequence_logprobs(engine.model, ids, attn, params, aligned=True)
    sel = scores.selected
    assert torch.allclose(full.logprobs[sel], scores.logprobs[sel], atol=1e-5)


def test_chunked_head_and_generic_path_give_the_same_numbers(engine):
    params = PARAMS[0]
    ids, mask, _ = _two_turn_episode(engine, params, 5)
    ids = torch.tensor([ids])
    with torch.no_grad():
        ref = sequence_logprobs(engine.model, ids, params=params, with_entropy=True)
        chunked = sequence_logprobs(engine.model, ids, params=params, with_entropy=True,
                                    chunk_tokens=7)
        logits = engine.model(input_ids=ids).logits[0, :-1]
        lp, ent = logprobs_from_logits(logits, ids[0, 1:], params, with_entropy=True)
    assert torch.allclose(ref.logprobs, chunked.logprobs, atol=1e-6)
    assert torch.allclose(ref.entropy, chunked.entropy, atol=1e-6)
    assert torch.allclose(ref.logprobs[0], lp, atol=1e-5)
    assert torch.allclose(ref.entropy[0], ent, atol=1e-5)


@pytest.mark.parametrize("chunk", [4096, 5])
def test_gradients_flow_to_every_trainable_weight(engine, chunk):
    params = PARAMS[0]
    ids, mask, _ = _two_turn_episode(engine, params, 9)
    ids, mask = torch.tensor([ids]), torch.tensor([mask])
    model = engine.model
    model.zero_grad(set_to_none=True)
    scores = sequence_logprobs(model, ids, params=params, only=mask[:, 1:].bool(),
                               with_entropy=True, chunk_tokens=chunk)
    (-(scores.logprobs.sum()) - 0.1 * scores.entropy.sum()).backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    try:
        assert all(g is not None and torch.isfinite(g).all() for g in grads.values())
        assert all(float(g.abs().sum()) > 0 for n, g in grads.items()), \
            [n for n, g in grads.items() if float(g.abs().sum()) == 0]
    finally:
        model.zero_grad(set_to_none=True)


def test_gradients_of_chunked_and_unchunked_heads_agree(engine):
    params = SamplingParams(temperature=0.8)
    ids, mask, _ = _two_turn_episode(engine, params, 11)
    ids, only = torch.tensor([ids]), torch.tensor([mask])[:, 1:].bool()
    grads = []
    for chunk in (4096, 3):
        engine.model.zero_grad(set_to_none=True)
        sequence_logprobs(engine.model, ids, params=params, only=only,
                          chunk_tokens=chunk).logprobs.sum().backward()
        grads.append(engine.model.model.embed_tokens.weight.grad.clone())
    engine.model.zero_grad(set_to_none=True)
    assert torch.allclose(grads[0], grads[1], rtol=1e-4, atol=1e-5)


def test_entropy_of_a_truncated_distribution_has_no_nan_gradient():
    logits = torch.randn(4, 50, requires_grad=True)
    lp, ent = logprobs_from_logits(logits, torch.tensor([0, 1, 2, 3]),
                                   SamplingParams(temperature=0.5, top_k=3), with_entropy=True)
    (ent.sum() + lp.clamp(min=-30).sum()).backward()
    assert torch.isfinite(logits.grad).all()
    # the entropy is that of the processed (top-3) distribution
    p = process(logits.detach(), SamplingParams(temperature=0.5, top_k=3)).exp()
    assert torch.allclose(ent, -(p * p.clamp_min(1e-30).log()).sum(-1), atol=1e-5)
    assert int((p > 0).sum(-1).max()) == 3


@pytest.mark.parametrize("cut", [False, True])
def test_entropy_fast_path_is_the_masked_form_bit_for_bit(cut):
    """`sampling.entropy` skips its masks on a full-support distribution: values and
    gradients equal the masked form exactly; with entries outside the support (top-k) it
    takes the masked form (no NaN)."""
    from rlvr.engines.sampling import entropy

    def masked(lp):
        finite = torch.isfinite(lp)
        safe = lp.masked_fill(~finite, 0.0)
        return -(safe.exp().masked_fill(~finite, 0.0) * safe).sum(-1)

    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(0)) * 3
    params = SamplingParams(temperature=0.7, top_k=5 if cut else 0)
    x1, x2 = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    fast, ref = entropy(process(x1, params)), masked(process(x2, params))
    assert torch.equal(fast, ref) and bool(torch.isfinite(fast).all())
    (fast * torch.arange(6.0)).sum().backward()
    (ref * torch.arange(6.0)).sum().backward()
    assert torch.equal(x1.grad, x2.grad)
