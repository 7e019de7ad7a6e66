"""SPEC §1/§7 numbers for group statistics and the advantage registry (issue 9, must-show 1)."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.config import parse
from rlvr.errors import ConfigError
from rlvr.rl import advantages as adv_mod
from rlvr.rl.advantages import AdvantageConfig, available, compute_advantages, get, register
from rlvr.rl.groups import expected_draws, informative_groups, mean_p_info, p_info


def test_p_info_reproduces_the_spec_numbers():
    assert round(p_info(0.01, 8), 4) == 0.0773
    assert round(p_info(0.5, 8), 4) == 0.9922
    # E[N_draw] = B / P_info: ≈ 12.94 groups per informative one at p = 0.01, G = 8.
    assert round(expected_draws(1, p_info(0.01, 8)), 2) == 12.94
    assert expected_draws(4, 0.0) == math.inf


def test_p_info_is_averaged_per_task_never_from_the_pooled_rate():
    per_task = mean_p_info(torch.tensor([0.01, 0.99], dtype=torch.float64), 8)
    assert round(float(per_task), 4) == 0.0773  # both tasks are nearly always uninformative
    assert p_info(0.5, 8) > 10 * float(per_task)  # the pooled rate would claim 0.9922


def test_p_info_properties_on_a_grid():
    for g in (1, 2, 4, 8, 16, 64):
        for p in torch.linspace(0, 1, 21, dtype=torch.float64):
            v = p_info(p, g)
            assert 0 <= float(v) <= 1
            assert torch.isclose(v, p_info(1 - p, g))  # symmetric in success / failure
        assert p_info(0.0, g) == 0 and p_info(1.0, g) == 0
    # a larger G helps a hard-but-nonzero task
    assert p_info(0.05, 16) > p_info(0.05, 8) > p_info(0.05, 4)


@pytest.mark.parametrize("g", [2, 4, 8, 16])
def test_one_success_binary_group_gives_sqrt_g_minus_1(g):
    rewards = torch.zeros(1, g, dtype=torch.float64)
    rewards[0, 3 % g] = 1.0
    a = compute_advantages(rewards, AdvantageConfig("grpo", eps=0.0))[0]
    assert torch.isclose(
        a[3 % g], torch.tensor(math.sqrt(g - 1), dtype=torch.float64), rtol=0, atol=1e-12
    )
    others = torch.cat([a[: 3 % g], a[3 % g + 1 :]])
    assert torch.allclose(
        others, torch.full_like(others, -1 / math.sqrt(g - 1)), rtol=0, atol=1e-12
    )
    # that is the population std's number; the sample std (G − 1) would give a smaller one
    sample = (rewards - rewards.mean()) / rewards.std(correction=1)
    assert not torch.isclose(sample[0, 3 % g], a[3 % g])
    # with the default ε the numbers hold to ε's order
    a_eps = compute_advantages(rewards)[0]
    assert abs(float(a_eps[3 % g]) - math.sqrt(g - 1)) < 1e-4


def test_one_success_under_dr_grpo_and_rloo():
    g = 8
    rewards = torch.tensor([[1.0] + [0.0] * (g - 1)], dtype=torch.float64)
    dr = compute_advantages(rewards, AdvantageConfig("dr_grpo"))[0]
    assert torch.allclose(dr, torch.tensor([1 - 1 / g] + [-1 / g] * (g - 1), dtype=torch.float64))
    loo = compute_advantages(rewards, AdvantageConfig("rloo"))[0]
    assert torch.allclose(loo, torch.tensor([1.0] + [-1 / (g - 1)] * (g - 1), dtype=torch.float64))


def test_std_scaling_makes_a_group_and_its_tenth_identical_dr_grpo_does_not():
    rewards = torch.tensor([[0.9, 0.1, 0.4, 1.0, 0.0, 0.05, 0.95, 0.3]], dtype=torch.float64)
    small = rewards * 0.1
    for cfg in (AdvantageConfig("grpo", eps=0.0), AdvantageConfig("grpo", "batch", eps=0.0)):
        torch.testing.assert_close(compute_advantages(rewards, cfg), compute_advantages(small, cfg))
    dr = AdvantageConfig("dr_grpo")
    a, a_small = compute_advantages(rewards, dr), compute_advantages(small, dr)
    assert not torch.allclose(a, a_small)
    torch.testing.assert_close(a_small, 0.1 * a)


def test_all_equal_groups_get_exactly_zero_under_every_estimator():
    rewards = torch.tensor(
        [[0.3] * 7, [1.0] * 7, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]], dtype=torch.float32
    )
    assert informative_groups(rewards).tolist() == [False, False, True]
    for name in available():
        for scale in get(name).scales:
            a = compute_advantages(rewards, AdvantageConfig(name, scale))
            assert torch.equal(a[:2], torch.zeros_like(a[:2])), (name, scale)
            assert a[2].abs().sum() > 0


def test_advantages_properties_on_random_groups():
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        n, g = (
            int(torch.randint(1, 6, (1,), generator=gen)),
            int(torch.randint(2, 17, (1,), generator=gen)),
        )
        rewards = torch.rand(n, g, generator=gen, dtype=torch.float64)
        for name in available():
            a = compute_advantages(rewards, AdvantageConfig(name))
            # every estimator here is centred: each group's advantages sum to 0
            assert torch.allclose(a.sum(dim=-1), torch.zeros(n, dtype=torch.float64), atol=1e-9)
            # order-preserving within a group
            order = rewards.argsort(dim=-1)
            assert bool((a.gather(1, order).diff(dim=-1) >= -1e-12).all())
        # GRPO is invariant under a positive affine change of reward units
        scale, shift = (
            float(torch.rand(1, generator=gen)) * 10 + 0.1,
            float(torch.randn(1, generator=gen)),
        )
        cfg = AdvantageConfig("grpo", eps=0.0)
        torch.testing.assert_close(
            compute_advantages(rewards, cfg), compute_advantages(scale * rewards + shift, cfg)
        )


def test_registry_register_get_and_config_validation():
    assert {"grpo", "dr_grpo", "rloo"} <= set(available())
    assert AdvantageConfig().scale == "group"
    assert AdvantageConfig("dr_grpo").scale == "none"
    with pytest.raises(ConfigError, match="unknown"):
        AdvantageConfig("ppo_gae")
    with pytest.raises(ConfigError, match="scale_rewards"):
        AdvantageConfig("dr_grpo", "group")  # Dr.GRPO with std scaling is GRPO
    with pytest.raises(ConfigError, match="eps"):
        AdvantageConfig(eps=-1.0)
    with pytest.raises(ValueError, match="twice"):
        register("grpo", default_scale="group")(lambda r: r)

    name = "test_max_baseline"
    try:

        @register(name, default_scale="none")
        def max_baseline(rewards):
            return rewards - rewards.amax(dim=-1, keepdim=True)

        a = compute_advantages(torch.tensor([[0.0, 1.0, 0.5]]), AdvantageConfig(name))
        assert a.tolist() == [[-1.0, 0.0, -0.5]]
    finally:
        adv_mod._REGISTRY.pop(name, None)


def test_advantage_config_parses_from_params_with_unknown_keys_named():
    cfg = parse(AdvantageConfig, {"estimator": "rloo", "scale_rewards": "batch"}, "grpo.advantage")
    assert cfg == AdvantageConfig("rloo", "batch")
    with pytest.raises(ConfigError, match="grpo.advantage.scale: unknown key"):
        parse(AdvantageConfig, {"scale": "group"}, "grpo.advantage")
    with pytest.raises(ConfigError, match="grpo.advantage.scale_rewards"):
        parse(AdvantageConfig, {"scale_rewards": "global"}, "grpo.advantage")
