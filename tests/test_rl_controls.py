"""SPEC §5 overlong penalties (with the γ·(T_max − T_budget) ≥ 1 rule) and the SPEC §7
adaptive entropy controller (issue 9, must-show 1)."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.config import parse
from rlvr.errors import ConfigError
from rlvr.rl.entropy import EntropyController, token_entropy, update_entropy_coef
from rlvr.rl.loss import GRPOLossConfig, grpo_loss
from rlvr.rl.overlong import OverlongParams, dapo_soft_overlong, threshold_overlong

# --- overlong: config validation of γ·(T_max − T_budget) ≥ 1 -----------------------------


def test_threshold_config_enforces_gamma_times_headroom_at_least_one():
    OverlongParams("threshold", gamma=1 / 512, t_budget=3584, t_max=4096)  # exactly 1: allowed
    OverlongParams("threshold", gamma=0.01, t_budget=3584, t_max=4096)  # 5.12
    with pytest.raises(ConfigError, match=r"gamma: γ·\(T_max − T_budget\) = .* < 1"):
        OverlongParams("threshold", gamma=0.001, t_budget=3584, t_max=4096)  # 0.512
    with pytest.raises(ConfigError, match="t_budget"):
        OverlongParams("threshold", gamma=1.0, t_budget=4096, t_max=4096)
    with pytest.raises(ConfigError, match="gamma"):
        OverlongParams("threshold", gamma=0.0, t_budget=10, t_max=20)
    with pytest.raises(ConfigError, match="l_cache"):
        OverlongParams("dapo", l_max=100, l_cache=200)
    with pytest.raises(ConfigError, match="grpo.overlong.budget: unknown key"):
        parse(OverlongParams, {"mode": "threshold", "budget": 10}, "grpo.overlong")
    with pytest.raises(ConfigError, match="gamma"):
        parse(
            OverlongParams,
            {"mode": "threshold", "gamma": 0.001, "t_budget": 100, "t_max": 200},
            "grpo.overlong",
        )
    OverlongParams()  # mode none needs no lengths


def test_valid_threshold_configs_never_let_a_correct_rollout_at_the_budget_beat_zero():
    gen = torch.Generator().manual_seed(0)
    for _ in range(100):
        t_max = int(torch.randint(2, 5000, (1,), generator=gen))
        t_budget = int(torch.randint(0, t_max, (1,), generator=gen))
        gamma = 1 / (t_max - t_budget) * (1 + float(torch.rand(1, generator=gen)))
        p = OverlongParams("threshold", gamma=gamma, t_budget=t_budget, t_max=t_max)
        r = p.apply(torch.tensor([1.0], dtype=torch.float64), torch.tensor([t_max]))
        assert float(r) <= 1e-12


def test_threshold_penalty_by_hand():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    lengths = torch.tensor([100, 120, 150, 90])
    out = threshold_overlong(rewards, lengths, gamma=0.02, t_budget=100)
    torch.testing.assert_close(out, torch.tensor([1.0, 0.6, -1.0, 1.0], dtype=torch.float64))


def test_dapo_soft_overlong_by_hand():
    lengths = torch.tensor([10, 80, 90, 95, 100, 101, 500])
    got = dapo_soft_overlong(lengths, l_max=100, l_cache=20)
    expected = torch.tensor([0.0, 0.0, -0.5, -0.75, -1.0, -1.0, -1.0], dtype=torch.float64)
    torch.testing.assert_close(got, expected)
    p = OverlongParams("dapo", l_max=100, l_cache=20)
    torch.testing.assert_close(p.apply(torch.ones(7, dtype=torch.float64), lengths), 1 + expected)
    assert torch.equal(
        OverlongParams().apply(torch.ones(3), torch.tensor([1, 10**6, 5])), torch.ones(3)
    )


# --- adaptive entropy controller --------------------------------------------------------


def test_entropy_controller_rule_by_hand():
    # α' = clip(α − η(H̄ − (H_min+H_max)/2), α_min, α_max), centre 0.4
    assert math.isclose(update_entropy_coef(0.005, 0.1, 0.01, 0.2, 0.6, 0.0, 0.01), 0.008)
    assert math.isclose(update_entropy_coef(0.005, 0.9, 0.01, 0.2, 0.6, 0.0, 0.01), 0.0)
    assert math.isclose(update_entropy_coef(0.005, 0.4, 0.01, 0.2, 0.6, 0.0, 0.01), 0.005)
    assert update_entropy_coef(0.009, 0.0, 1.0, 0.2, 0.6, 0.0, 0.01) == 0.01  # clipped at α_max


def test_entropy_controller_state_moves_against_the_entropy():
    c = EntropyController(coef=0.002, eta=0.01, h_min=0.2, h_max=0.6, coef_max=0.01)
    history = [c.step(h) for h in (0.05, 0.05, 0.05)]  # collapsing entropy: bonus rises
    assert history == sorted(history) and history[-1] > 0.002
    assert c.coef == history[-1]
    falling = [c.step(h) for h in (2.0, 2.0, 2.0)]  # exploding entropy: bonus falls to α_min
    assert falling[-1] == 0.0
    assert c.enabled and not EntropyController(coef=0.0, eta=0.0).enabled
    with pytest.raises(ConfigError, match="h_max"):
        EntropyController(h_min=0.7, h_max=0.3)
    with pytest.raises(ConfigError, match="coef"):
        EntropyController(coef=0.5, coef_max=0.01)
    with pytest.raises(ConfigError, match="eta"):
        EntropyController(eta=-1.0)


def test_token_entropy_and_its_term_in_the_loss():
    v = 8
    logits = torch.zeros(2, 3, v, dtype=torch.float64)
    logits[1, :, 0] = 50.0  # near-deterministic rows
    mask = torch.tensor([[True, True, False], [True, False, False]])
    h = token_entropy(logits, mask)
    torch.testing.assert_close(h[0, :2], torch.full((2,), math.log(v), dtype=torch.float64))
    assert float(h[1, 0]) < 1e-12 and h[0, 2] == 0 and h[1, 1] == 0

    params = torch.randn(2, 3, v, dtype=torch.float64, requires_grad=True)
    tokens = torch.zeros(2, 3, dtype=torch.long)
    logp = torch.log_softmax(params, -1).gather(-1, tokens[..., None]).squeeze(-1)
    ent = token_entropy(params, mask)
    cfg = GRPOLossConfig(loss_aggregation="token_mean")
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    base = grpo_loss(logp, logp.detach(), adv, mask, cfg, entropy=ent)
    bonus = grpo_loss(logp, logp.detach(), adv, mask, cfg, entropy=ent, entropy_coef=0.01)
    torch.testing.assert_close(bonus.loss, base.loss - 0.01 * ent[mask].mean())
    assert bonus.metrics["entropy"] == pytest.approx(float(ent.detach()[mask].mean()))
