"""SPEC §3/§7 loss formulas: ratio, clipped surrogate, k3, masking, aggregation, TIS, the
assembled loss (issue 9, must-show 1)."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.config import parse
from rlvr.errors import ConfigError
from rlvr.rl.advantages import AdvantageConfig, compute_advantages
from rlvr.rl.aggregation import (
    AGGREGATIONS,
    aggregate,
    constant_denominator,
    dr_grpo_denominator,
    seq_mean,
    token_count,
    token_mean,
    turn_mean,
)
from rlvr.rl.importance import logprob_mismatch, truncated_is_weights
from rlvr.rl.kl import k3, uses_reference
from rlvr.rl.loss import GRPOLossConfig, grpo_loss
from rlvr.rl.ratio import log_ratio, sequence_ratio, token_ratio, turn_ratio
from rlvr.rl.surrogate import check_clip_range, clip_fractions, clipped_surrogate

V = 11


def policy(b: int, t: int, seed: int = 0):
    """A toy policy: free logits `[B, T, V]` (the parameters) and sampled token ids `[B, T]`."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, V, generator=gen, dtype=torch.float64).requires_grad_(True)
    tokens = torch.randint(0, V, (b, t), generator=gen)
    return logits, tokens


def logprobs_of(logits, tokens):
    return torch.log_softmax(logits, dim=-1).gather(-1, tokens[..., None]).squeeze(-1)


def mask_with(b: int, t: int, n_policy: int, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    flat = torch.zeros(b * t, dtype=torch.bool)
    flat[torch.randperm(b * t, generator=gen)[:n_policy]] = True
    return flat.view(b, t)


# --- first pass: ρ ≡ 1 and the surrogate is the policy gradient -------------------------


def test_ratio_is_exactly_one_on_the_first_pass_and_surrogate_is_the_policy_gradient():
    logits, tokens = policy(4, 9)
    mask = mask_with(4, 9, 20)
    turns = torch.arange(9).repeat(4, 1) // 3
    logp = logprobs_of(logits, tokens)
    old = logp.detach()  # the trainer's own forward pass before the update
    ones = torch.ones(4, 9, dtype=torch.float64)
    assert torch.equal(token_ratio(logp, old, mask), ones)
    assert torch.equal(sequence_ratio(logp, old, mask), torch.ones(4, dtype=torch.float64))
    assert torch.equal(turn_ratio(logp, old, mask, turns), ones)

    adv = torch.tensor([1.5, -0.5, 0.25, -1.25], dtype=torch.float64)
    for eps_low, eps_high in ((0.2, 0.28), (0.0, 0.0)):
        j = clipped_surrogate(token_ratio(logp, old, mask), adv, mask, eps_low, eps_high)
        (g_surr,) = torch.autograd.grad(token_mean(j, mask), logits, retain_graph=True)
        pg = torch.where(mask, adv[:, None] * logp, torch.zeros_like(logp))
        (g_pg,) = torch.autograd.grad(token_mean(pg, mask), logits, retain_graph=True)
        torch.testing.assert_close(g_surr, g_pg)
        assert g_pg.abs().sum() > 0


@pytest.mark.parametrize("level", ["token", "sequence", "turn"])
def test_full_loss_first_pass_reports_ratio_one(level):
    logits, tokens = policy(3, 6)
    mask = mask_with(3, 6, 12)
    logp = logprobs_of(logits, tokens)
    cfg = GRPOLossConfig(ratio_level=level, loss_aggregation="token_mean")
    out = grpo_loss(
        logp,
        logp.detach(),
        torch.tensor([1.0, -1.0, 0.5]),
        mask,
        cfg,
        turn_ids=torch.arange(6).repeat(3, 1) // 2,
    )
    assert out.metrics["ratio_min"] == out.metrics["ratio_max"] == 1.0
    assert out.metrics["clip_frac_pos"] == out.metrics["clip_frac_neg"] == 0.0


# --- an all-equal group gives exactly zero gradient -------------------------------------


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo", "rloo"])
def test_all_equal_group_gives_exactly_zero_gradient_through_the_full_loss(aggregation, estimator):
    g, t = 8, 7
    rewards = torch.full((1, g), 0.3)  # 0.3 is not exactly representable: its mean may round
    adv = compute_advantages(rewards, AdvantageConfig(estimator)).flatten()
    logits, tokens = policy(g, t, seed=3)
    logp = logprobs_of(logits, tokens)
    mask = mask_with(g, t, 30)
    behaviour = logp.detach() + 0.05 * torch.randn(g, t, dtype=torch.float64)
    old = logp.detach() - 0.1  # a later epoch: ρ ≠ 1
    cfg = GRPOLossConfig(advantage=AdvantageConfig(estimator), loss_aggregation=aggregation)
    out = grpo_loss(
        logp,
        old,
        adv,
        mask,
        cfg,
        behaviour_logprobs=behaviour,
        turn_ids=torch.arange(t).repeat(g, 1) // 2,
        denominator=g * t,
    )
    (grad,) = torch.autograd.grad(out.loss, logits)
    assert torch.equal(grad, torch.zeros_like(grad))
    assert out.loss.item() == 0.0


def test_an_informative_group_does_give_gradient():
    rewards = torch.tensor([[1.0, 0, 0, 0, 0, 0, 0, 0]])
    logits, tokens = policy(8, 5)
    logp = logprobs_of(logits, tokens)
    out = grpo_loss(
        logp,
        logp.detach(),
        compute_advantages(rewards).flatten(),
        torch.ones(8, 5, dtype=torch.bool),
        denominator=40,
    )
    (grad,) = torch.autograd.grad(out.loss, logits)
    assert grad.abs().sum() > 0


# --- k3 ----------------------------------------------------------------------------------


def test_k3_is_nonnegative_and_zero_exactly_at_equality():
    gen = torch.Generator().manual_seed(5)
    for scale in (0.01, 1.0, 5.0):
        logp = -torch.rand(6, 40, generator=gen, dtype=torch.float64) * 8
        ref = logp + scale * torch.randn(6, 40, generator=gen, dtype=torch.float64)
        mask = torch.ones(6, 40, dtype=torch.bool)
        kl = k3(logp, ref, mask)
        assert bool((kl >= 0).all()) and kl.sum() > 0
        assert torch.equal(k3(logp, logp.clone(), mask), torch.zeros_like(logp))
    # hand value: u = π_ref/π_θ = e  →  e − 1 − 1
    one = torch.ones(1, 1, dtype=torch.bool)
    hand = k3(
        torch.tensor([[-2.0]], dtype=torch.float64),
        torch.tensor([[-1.0]], dtype=torch.float64),
        one,
    )
    assert math.isclose(float(hand), math.e - 2)


def test_k3_gradient_vanishes_at_the_reference_and_beta_zero_needs_no_reference():
    logits, tokens = policy(2, 5)
    logp = logprobs_of(logits, tokens)
    mask = torch.ones(2, 5, dtype=torch.bool)
    (grad,) = torch.autograd.grad(k3(logp, logp.detach(), mask).sum(), logits)
    assert torch.equal(grad, torch.zeros_like(grad))
    assert uses_reference(0.0) is False and uses_reference(0.01) is True
    assert GRPOLossConfig().uses_reference is False
    assert GRPOLossConfig(beta=0.04).uses_reference is True
    assert GRPOLossConfig().passport()["kl_placement"] == "none"
    with pytest.raises(ValueError, match="ref_logprobs"):
        grpo_loss(
            logp, logp.detach(), torch.ones(2), mask, GRPOLossConfig(beta=0.1), denominator=10
        )
    # β = 0 never touches a reference (None is fine); β > 0 adds the KL term
    base = grpo_loss(logp, logp.detach(), torch.ones(2), mask, denominator=10)
    ref = logp.detach() + 0.3
    with_kl = grpo_loss(
        logp,
        logp.detach(),
        torch.ones(2),
        mask,
        GRPOLossConfig(beta=0.1),
        ref_logprobs=ref,
        denominator=10,
    )
    expected = base.loss + 0.1 * k3(logp, ref, mask).sum() / 10
    torch.testing.assert_close(with_kl.loss, expected)
    assert with_kl.metrics["kl"] > 0


# --- masking: 40 policy tokens of 330 ----------------------------------------------------


def test_forty_policy_tokens_of_330_give_normaliser_40_and_masked_tokens_change_nothing():
    b, t = 3, 110  # 330 positions
    mask = mask_with(b, t, 40, seed=7)
    assert token_count(mask) == 40
    logits, tokens = policy(b, t, seed=8)
    logp = logprobs_of(logits, tokens)
    gen = torch.Generator().manual_seed(9)
    old = logp.detach() + 0.2 * torch.randn(b, t, generator=gen, dtype=torch.float64)
    ref = logp.detach() + 0.2 * torch.randn(b, t, generator=gen, dtype=torch.float64)
    beh = old + 0.1 * torch.randn(b, t, generator=gen, dtype=torch.float64)
    adv = torch.tensor([1.0, -0.5, 0.7], dtype=torch.float64)
    turns = torch.arange(t).repeat(b, 1) // 10

    ones = torch.ones(b, t, dtype=torch.float64)
    assert float(token_mean(ones, mask)) == 1.0  # Σ over 40 tokens / 40
    assert float(token_mean(ones.cumsum(-1), mask)) == float(ones.cumsum(-1)[mask].sum() / 40)

    def everything(logp_, old_, ref_, beh_, level, agg):
        cfg = GRPOLossConfig(ratio_level=level, loss_aggregation=agg, beta=0.05)
        out = grpo_loss(
            logp_,
            old_,
            adv,
            mask,
            cfg,
            ref_logprobs=ref_,
            behaviour_logprobs=beh_,
            turn_ids=turns,
            denominator=400,
        )
        return (
            out.loss,
            token_ratio(logp_, old_, mask),
            sequence_ratio(logp_, old_, mask),
            k3(logp_, ref_, mask),
            out.metrics,
        )

    junk = torch.where(
        mask, torch.zeros_like(old), torch.full_like(old, 1.0)
    )  # placeholder 1 → e⁻¹
    for level in ("token", "sequence", "turn"):
        for agg in AGGREGATIONS:
            before = everything(logp, old, ref, beh, level, agg)
            # perturb every input at the masked positions only, including NaN / ±inf placeholders
            wild = torch.where(mask, torch.zeros_like(old), torch.full_like(old, 40.0))
            nan = torch.where(mask, torch.zeros_like(old), torch.full_like(old, float("nan")))
            logp_p = torch.where(mask, logp, logp - 40.0)
            after = everything(logp_p, old + wild + junk, ref + nan, beh - wild, level, agg)
            for x, y in zip(before[:4], after[:4]):
                assert torch.equal(x, y), (level, agg)
            assert before[4] == after[4]
            assert before[4]["policy_tokens"] == 40.0
            (grad,) = torch.autograd.grad(after[0], logits, retain_graph=True)
            masked_rows = grad[~mask]
            assert torch.equal(masked_rows, torch.zeros_like(masked_rows))
            assert grad[mask].abs().sum() > 0


def test_every_token_function_refuses_a_mask_of_the_wrong_shape():
    x = torch.zeros(2, 3)
    bad = torch.ones(2, 4, dtype=torch.bool)
    for call in (
        lambda: token_ratio(x, x, bad),
        lambda: k3(x, x, bad),
        lambda: clipped_surrogate(x, torch.ones(2), bad, 0.2, 0.2),
        lambda: token_mean(x, bad),
        lambda: seq_mean(x, bad),
    ):
        with pytest.raises(ValueError, match="shape"):
            call()


# --- ratios ------------------------------------------------------------------------------


def test_sequence_and_turn_ratios_by_hand():
    logp = torch.tensor([[-1.0, -2.0, -3.0, -4.0]], dtype=torch.float64)
    old = torch.tensor([[-1.5, -2.0, -2.0, -9.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, False]])
    lr = [0.5, 0.0, -1.0]
    torch.testing.assert_close(
        log_ratio(logp, old, mask), torch.tensor([lr + [0.0]], dtype=torch.float64)
    )
    torch.testing.assert_close(
        sequence_ratio(logp, old, mask), torch.tensor([math.exp(sum(lr) / 3)], dtype=torch.float64)
    )
    turns = torch.tensor([[0, 0, 1, 1]])
    torch.testing.assert_close(
        turn_ratio(logp, old, mask, turns),
        torch.tensor([[math.exp(0.5)] * 2 + [math.exp(-1.0), 1.0]], dtype=torch.float64),
    )


# --- clipped surrogate -------------------------------------------------------------------


def test_clip_range_is_validated():
    check_clip_range(0.2, 0.28)
    check_clip_range(0.2, 0.2)
    with pytest.raises(ConfigError, match="eps_high"):
        check_clip_range(0.3, 0.2)
    with pytest.raises(ConfigError, match="eps_low"):
        check_clip_range(-0.1, 0.2)
    with pytest.raises(ConfigError, match="eps_high"):
        GRPOLossConfig(eps_low=0.3, eps_high=0.2)
    with pytest.raises(ConfigError, match="seq_eps_high"):
        GRPOLossConfig(seq_eps_low=1e-3, seq_eps_high=1e-4)


def test_clipped_surrogate_clips_asymmetrically_and_stops_the_gradient_there():
    ratio = torch.tensor([[1.5, 1.1, 0.5, 0.9, 1.5, 0.5]], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0, -1.0, 1.0]], dtype=torch.float64)
    mask = torch.ones(1, 6, dtype=torch.bool)
    j = clipped_surrogate(ratio, adv, mask, 0.2, 0.28)
    # A>0, ρ above 1+ε_high: clipped to 1.28; A<0, ρ below 1−ε_low: clipped to 0.8 → −0.8;
    # the pessimistic branch keeps the unclipped value elsewhere
    torch.testing.assert_close(
        j, torch.tensor([[1.28, 1.1, -0.8, -0.9, -1.5, 0.5]], dtype=torch.float64)
    )
    (g,) = torch.autograd.grad(j.sum(), ratio)
    torch.testing.assert_close(
        g, torch.tensor([[0.0, 1.0, 0.0, -1.0, -1.0, 1.0]], dtype=torch.float64)
    )
    fr = clip_fractions(ratio.detach(), adv, mask, 0.2, 0.28)
    assert fr == {"clip_frac_pos": 1 / 3, "clip_frac_neg": 1 / 3}


def test_clipped_surrogate_is_a_pessimistic_bound_on_random_inputs():
    gen = torch.Generator().manual_seed(21)
    for _ in range(30):
        ratio = torch.exp(0.5 * torch.randn(5, 12, generator=gen, dtype=torch.float64))
        adv = torch.randn(5, generator=gen, dtype=torch.float64)
        mask = torch.rand(5, 12, generator=gen) < 0.6
        eps_low = float(torch.rand(1, generator=gen)) * 0.5
        eps_high = eps_low + float(torch.rand(1, generator=gen)) * 0.5
        j = clipped_surrogate(ratio, adv, mask, eps_low, eps_high)
        unclipped = torch.where(mask, ratio * adv[:, None], torch.zeros_like(ratio))
        assert bool((j <= unclipped + 1e-12).all())  # never more optimistic than ρA
        inside = mask & (ratio >= 1 - eps_low) & (ratio <= 1 + eps_high)
        assert torch.equal(j[inside], unclipped[inside])  # and exact inside the trust region
        assert torch.equal(j[~mask], torch.zeros_like(j[~mask]))


# --- aggregation -------------------------------------------------------------------------


def test_aggregations_by_hand():
    loss = torch.tensor(
        [[1.0, 1.0, 1.0, 1.0], [4.0, 0.0, 0.0, 0.0], [9.0, 9.0, 9.0, 9.0]], dtype=torch.float64
    )
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    assert float(seq_mean(loss, mask)) == (1.0 + 4.0) / 2  # the empty row is not a sequence
    assert float(token_mean(loss, mask)) == 8.0 / 5
    assert float(token_mean(loss, mask, num_tokens=10)) == 8.0 / 10  # step-wide count
    assert float(constant_denominator(loss, mask, 16)) == 8.0 / 16
    turns = torch.tensor([[0, 0, 1, 1], [0, 0, 0, 0], [0, 1, 2, 3]])
    assert float(turn_mean(loss, mask, turns)) == (1.0 + 1.0 + 4.0) / 3
    assert dr_grpo_denominator(8, 512) == 4096
    with pytest.raises(ValueError, match="denominator"):
        aggregate(loss, mask, "constant")
    with pytest.raises(ConfigError, match="loss_aggregation"):
        aggregate(loss, mask, "sum")


def test_constant_denominator_does_not_depend_on_the_micro_batch_split():
    logits, tokens = policy(6, 8, seed=11)
    mask = mask_with(6, 8, 25, seed=12)
    logp = logprobs_of(logits, tokens)
    per_token = -logp
    whole = constant_denominator(per_token, mask, 96)
    halves = constant_denominator(per_token[:3], mask[:3], 96) + constant_denominator(
        per_token[3:], mask[3:], 96
    )
    torch.testing.assert_close(whole, halves)
    step_tokens = int(token_count(mask))
    split = token_mean(per_token[:2], mask[:2], step_tokens) + token_mean(
        per_token[2:], mask[2:], step_tokens
    )
    torch.testing.assert_close(token_mean(per_token, mask), split)


def test_loss_config_denominator_and_passport():
    cfg = GRPOLossConfig()
    assert cfg.loss_aggregation == "constant"
    assert cfg.denominator(num_sequences=16, max_response_tokens=256) == 4096
    assert GRPOLossConfig(loss_denominator=1000.0).denominator(16, 256) == 1000.0
    assert GRPOLossConfig(loss_aggregation="token_mean").denominator(16, 256) is None
    p = GRPOLossConfig(ratio_level="sequence").passport()
    assert (p["advantage_method"], p["reward_scaling"], p["clip_low"], p["clip_high"]) == (
        "grpo",
        "group",
        3e-4,
        4e-4,
    )
    parsed = parse(
        GRPOLossConfig,
        {"advantage": {"estimator": "dr_grpo"}, "beta": 0.0, "loss_aggregation": "token_mean"},
        "grpo.loss",
    )
    assert parsed.advantage.scale == "none"
    with pytest.raises(ConfigError, match="grpo.loss.epsilon: unknown key"):
        parse(GRPOLossConfig, {"epsilon": 0.2}, "grpo.loss")
    with pytest.raises(ValueError, match="denominator"):
        x = torch.zeros(1, 2, requires_grad=True)
        grpo_loss(x, x.detach(), torch.ones(1), torch.ones(1, 2, dtype=torch.bool))


# --- truncated importance weights and the mismatch metric --------------------------------


def test_truncated_importance_weights_and_mismatch_metric():
    old = torch.tensor([[-1.0, -1.0, -1.0, -1.0]], dtype=torch.float64, requires_grad=True)
    beh = torch.tensor([[-1.0, -2.0, -0.5, -9.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, False]])
    w = truncated_is_weights(old, beh, mask, cap=2.0)
    assert not w.requires_grad
    torch.testing.assert_close(
        w, torch.tensor([[1.0, 2.0, math.exp(-0.5), 1.0]], dtype=torch.float64)
    )
    m = logprob_mismatch(old, beh, mask)
    assert m["logprob_abs_diff_max"] == 1.0
    assert math.isclose(m["logprob_abs_diff_mean"], 0.5)
    assert m["ratio_outside_10pct"] == pytest.approx(2 / 3)
    assert m["mismatch_kl"] > 0
    same = logprob_mismatch(beh, beh.clone(), mask)
    assert same == {
        "logprob_abs_diff_mean": 0.0,
        "logprob_abs_diff_max": 0.0,
        "mismatch_kl": 0.0,
        "ratio_outside_10pct": 0.0,
    }
    with pytest.raises(ValueError, match="cap"):
        truncated_is_weights(old, beh, mask, cap=0.0)


def test_tis_weights_scale_the_surrogate_in_the_full_loss():
    logits, tokens = policy(2, 4, seed=13)
    logp = logprobs_of(logits, tokens)
    mask = torch.ones(2, 4, dtype=torch.bool)
    beh = logp.detach() - 0.3  # the sampler thought these tokens less likely: w = e^0.3
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    plain = grpo_loss(
        logp,
        logp.detach(),
        adv,
        mask,
        GRPOLossConfig(tis_cap=None),
        behaviour_logprobs=beh,
        denominator=8,
    )
    tis = grpo_loss(logp, logp.detach(), adv, mask, behaviour_logprobs=beh, denominator=8)
    torch.testing.assert_close(tis.loss, plain.loss * math.exp(0.3))
    assert tis.metrics["tis_weight_mean"] == pytest.approx(math.exp(0.3))
