"""Decoding math: temperature, top-k, minimal top-p nucleus, greedy, inverse-CDF draws."""
from __future__ import annotations

import math

import pytest
import torch

from rlvr.config import parse
from rlvr.engines.base import Decoding, SamplingParams
from rlvr.engines.sampling import check_params, process_logits, sample, token_logprobs
from rlvr.errors import ConfigError


def _logits_of(probs):
    return torch.tensor([math.log(p) for p in probs])[None]


def test_temperature_scales_logits_before_softmax():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    for temp in (0.3, 0.7, 1.0, 2.5):
        expected = torch.log_softmax(logits / temp, -1)
        assert torch.allclose(process_logits(logits, temp), expected, atol=1e-6)


def test_top_k_keeps_the_k_largest_and_renormalises():
    logits = torch.randn(4, 40, generator=torch.Generator().manual_seed(1))
    out = process_logits(logits, 1.0, top_k=5)
    for row, lp in zip(logits, out):
        kept = torch.isfinite(lp)
        assert int(kept.sum()) == 5
        assert set(torch.nonzero(kept).squeeze(1).tolist()) == set(row.topk(5).indices.tolist())
        assert torch.allclose(lp[kept], torch.log_softmax(row[kept], -1), atol=1e-6)
        assert math.isclose(lp.exp().sum().item(), 1.0, abs_tol=1e-5)


def test_top_p_keeps_the_minimal_nucleus_example():
    probs = [0.05, 0.5, 0.15, 0.3]  # sorted: 0.5 (id1), 0.3 (id3), 0.15 (id2), 0.05 (id0)
    def kept(p):
        return set(torch.nonzero(torch.isfinite(process_logits(_logits_of(probs), 1.0, top_p=p)[0]))
                   .squeeze(1).tolist())
    assert kept(0.4) == {1}              # the top token alone already reaches 0.4
    assert kept(0.75) == {1, 3}          # 0.5 < 0.75 <= 0.8
    assert kept(0.9) == {1, 3, 2}        # 0.8 < 0.9 <= 0.95
    assert kept(0.99) == {0, 1, 2, 3}
    lp = process_logits(_logits_of(probs), 1.0, top_p=0.75)[0]
    assert math.isclose(lp[1].exp().item(), 0.5 / 0.8, rel_tol=1e-5)
    assert math.isclose(lp[3].exp().item(), 0.3 / 0.8, rel_tol=1e-5)


@pytest.mark.parametrize("top_p", [0.1, 0.5, 0.8, 0.93])
def test_top_p_matches_a_brute_force_minimal_nucleus(top_p):
    logits = torch.randn(8, 30, generator=torch.Generator().manual_seed(2)) * 2
    out = process_logits(logits, 1.0, top_p=top_p)
    for row, lp in zip(logits, out):
        probs = torch.softmax(row, -1).tolist()
        order = sorted(range(len(probs)), key=lambda i: -probs[i])
        mass, nucleus = 0.0, set()
        for i in order:
            nucleus.add(i)
            mass += probs[i]
            if mass >= top_p:
                break
        assert set(torch.nonzero(torch.isfinite(lp)).squeeze(1).tolist()) == nucleus


def test_ties_at_the_top_p_and_top_k_boundary_are_all_kept():
    logits = _logits_of([0.4, 0.2, 0.2, 0.2])
    assert torch.isfinite(process_logits(logits, 1.0, top_p=0.5)).tolist() == [[True] * 4]
    assert torch.isfinite(process_logits(logits, 1.0, top_k=2)).tolist() == [[True] * 4]


def test_processing_is_differentiable_for_a_trainer():
    logits = torch.randn(2, 30, generator=torch.Generator().manual_seed(5)).requires_grad_()
    tokens = logits.detach().argmax(-1)
    lp = token_logprobs(logits, tokens, SamplingParams(temperature=0.8, top_k=20, top_p=0.99))
    lp.sum().backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()


def test_processing_order_is_temperature_then_top_k_then_top_p():
    logits = torch.randn(2, 25, generator=torch.Generator().manual_seed(3))
    out = process_logits(logits, 0.5, top_k=10, top_p=0.6)
    x = logits / 0.5
    x = x.masked_fill(x < x.topk(10, -1).values[:, -1:], float("-inf"))
    expected = process_logits(x, 1.0, top_p=0.6)
    assert torch.equal(torch.isfinite(out), torch.isfinite(expected))
    assert torch.allclose(out[torch.isfinite(out)], expected[torch.isfinite(expected)], atol=1e-6)


def test_temperature_zero_is_greedy_with_logprob_zero():
    logits = torch.tensor([[0.1, 2.0, 2.0, -1.0], [3.0, 0.0, 1.0, 2.9]])
    lp = process_logits(logits, 0.0, top_k=3, top_p=0.5)
    assert lp[0].tolist() == [float("-inf"), 0.0, float("-inf"), float("-inf")]  # first of a tie
    assert lp[1].tolist() == [0.0, float("-inf"), float("-inf"), float("-inf")]
    for u in (0.0, 0.5, 0.999999):
        assert sample(lp, torch.tensor([u, u])).tolist() == [1, 0]


def test_inverse_cdf_draw_follows_the_distribution_exactly_on_a_uniform_grid():
    probs = [0.1, 0.0, 0.25, 0.6, 0.05]
    lp = torch.log(torch.tensor([probs]))
    n = 10_000
    u = (torch.arange(n) + 0.5) / n
    draws = sample(lp.expand(n, -1), u)
    counts = torch.bincount(draws, minlength=5).tolist()
    assert counts[1] == 0
    for c, p in zip(counts, probs):
        assert abs(c / n - p) <= 1.5 / n


def test_draw_never_leaves_the_support_even_at_u_close_to_one():
    lp = process_logits(torch.tensor([[5.0, 1.0, 0.5, -2.0, 4.0]]), 1.0, top_k=2)
    for u in (0.0, 1e-9, 0.5, 1 - 1e-7, 1 - 2**-24):
        assert sample(lp, torch.tensor([u])).item() in (0, 4)


def test_token_logprobs_reads_the_processed_distribution():
    logits = torch.randn(2, 3, 20, generator=torch.Generator().manual_seed(4))
    params = SamplingParams(temperature=0.7, top_k=8, top_p=0.9)
    tokens = process_logits(logits, 0.7, 8, 0.9).argmax(-1)
    got = token_logprobs(logits, tokens, params)
    expected = process_logits(logits, 0.7, 8, 0.9).gather(-1, tokens[..., None]).squeeze(-1)
    assert torch.equal(got, expected)


@pytest.mark.parametrize("field,kwargs", [
    ("decoding.temperature", {"temperature": -0.1}),
    ("decoding.temperature", {"temperature": float("nan")}),
    ("decoding.top_p", {"top_p": 0.0}),
    ("decoding.top_p", {"top_p": 1.5}),
    ("decoding.top_k", {"top_k": -1}),
    ("sampling.max_new_tokens", {"max_new_tokens": -5}),
    ("sampling.stop_token_ids", {"stop_token_ids": (3, 999)}),
])
def test_bad_sampling_params_are_refused_by_name(field, kwargs):
    with pytest.raises(ConfigError, match=field):
        check_params(SamplingParams(**kwargs), vocab_size=100)


def test_the_knobs_are_validated_once_for_params_files_and_calls():
    """`rollout.decoding` and every call's SamplingParams are the same dataclass fields, with
    the same checks: a bad knob in params.yaml is refused when the params are read, naming
    it, not at the first generate."""
    with pytest.raises(ConfigError, match="decoding.top_p"):
        parse(Decoding, {"top_p": 0.0}, "rollout.decoding")
    with pytest.raises(ConfigError, match="rollout.decoding.max_new_tokens: unknown key"):
        parse(Decoding, {"max_new_tokens": 4}, "rollout.decoding")
    decoding = parse(Decoding, {"temperature": 0.7, "top_k": 5}, "rollout.decoding")
    params = SamplingParams.of(decoding, max_new_tokens=9, stop_token_ids=[2, 0])
    assert params == SamplingParams(temperature=0.7, top_p=1.0, top_k=5, max_new_tokens=9,
                                    stop_token_ids=(2, 0))
    assert params.knobs() == decoding.knobs() == {"temperature": 0.7, "top_p": 1.0, "top_k": 5,
                                                  "grammar": ""}
    with pytest.raises(ConfigError, match="rollout.decoding.grammar|decoding.grammar"):
        parse(Decoding, {"grammar": "yaml"}, "rollout.decoding")
