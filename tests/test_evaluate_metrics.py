"""pass@k, pass^k, pass-rate intervals and the paired comparison (SPEC §6, §8)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from rlvr.evaluate.metrics import (PairingError, paired_difference, pass_at_k, pass_at_k_closed,
                                   pass_hat_k, pass_hat_k_closed, pass_rate_interval,
                                   tier_pass_at_k, tier_pass_hat_k)


def test_closed_form_values_of_spec_6():
    assert pass_at_k_closed(0.18, 8) == pytest.approx(0.796, abs=5e-4)
    assert pass_at_k_closed(0.18, 16) == pytest.approx(0.958, abs=5e-4)
    assert pass_at_k_closed(0.0, 8) == 0.0 and pass_at_k_closed(1.0, 1) == 1.0
    assert pass_hat_k_closed(0.5, 3) == 0.125


@pytest.mark.parametrize("n,c,k", [(10, 3, 1), (10, 3, 4), (16, 5, 8), (20, 0, 5), (20, 20, 7),
                                   (200, 37, 50), (8, 7, 2)])
def test_unbiased_estimators_equal_the_binomial_ratios(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k),
                                               rel=1e-12, abs=1e-12)
    assert pass_hat_k(n, c, k) == pytest.approx(math.comb(c, k) / math.comb(n, k),
                                                rel=1e-12, abs=1e-12)


def test_pass_at_1_is_the_success_share_and_bounds_are_checked():
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)
    assert pass_hat_k(8, 3, 1) == pytest.approx(3 / 8)
    assert pass_at_k(8, 3, 8) == 1.0 and pass_hat_k(8, 7, 8) == 0.0
    assert pass_hat_k(8, 8, 8) == 1.0 and pass_at_k(8, 0, 8) == 0.0
    for bad in [(4, 5, 1), (4, 2, 0), (4, 2, 5), (4, -1, 1)]:
        with pytest.raises(ValueError):
            pass_at_k(*bad)


def test_product_form_is_stable_where_binomials_overflow_floats():
    # C(2000, 1000) has ~600 digits; the ratio form in floats overflows.
    assert pass_at_k(2000, 1, 1000) == pytest.approx(0.5)
    assert 0.0 < pass_hat_k(2000, 1500, 200) < 1.0


@pytest.mark.parametrize("p,n,k", [(0.18, 16, 8), (0.18, 16, 16), (0.05, 10, 3), (0.7, 12, 5)])
def test_estimators_equal_the_closed_form_in_expectation(p, n, k):
    """Exact expectation over c ~ Binomial(n, p), then a seeded simulation."""
    pmf = [math.comb(n, c) * p ** c * (1 - p) ** (n - c) for c in range(n + 1)]
    assert sum(w * pass_at_k(n, c, k) for c, w in enumerate(pmf)) == \
        pytest.approx(pass_at_k_closed(p, k), abs=1e-12)
    assert sum(w * pass_hat_k(n, c, k) for c, w in enumerate(pmf)) == \
        pytest.approx(pass_hat_k_closed(p, k), abs=1e-12)
    rng = np.random.default_rng(7)
    cs = rng.binomial(n, p, size=20000)
    est, used = tier_pass_at_k([(n, int(c)) for c in cs], k)
    assert used == len(cs)
    assert est == pytest.approx(pass_at_k_closed(p, k), abs=0.01)
    est_hat, _ = tier_pass_hat_k([(n, int(c)) for c in cs], k)
    assert est_hat == pytest.approx(pass_hat_k_closed(p, k), abs=0.01)


def test_tier_estimators_leave_out_tasks_with_too_few_graded_samples():
    est, used = tier_pass_at_k([(4, 1), (2, 2), (4, 0)], 3)
    assert used == 2 and est == pytest.approx(np.mean([pass_at_k(4, 1, 3), 0.0]))
    assert math.isnan(tier_pass_at_k([(2, 1)], 3)[0])


def _coverage(tasks: int, n: int, a: float, b: float, experiments: int = 400,
              seed: int = 0) -> float:
    """Share of simulated experiments whose interval holds the population pass rate: task
    success probabilities drawn from Beta(a, b), n samples per task."""
    rng = np.random.default_rng(seed)
    truth = a / (a + b)
    hits = 0
    for _ in range(experiments):
        c = rng.binomial(n, rng.beta(a, b, size=tasks))
        iv = pass_rate_interval([(n, int(x)) for x in c])
        hits += iv.low <= truth <= iv.high
    return hits / experiments


@pytest.mark.parametrize("tasks,n,a,b", [(40, 4, 1.0, 1.0), (30, 8, 0.6, 1.4), (20, 16, 2.0, 2.0),
                                         (100, 1, 1.0, 4.0)])
def test_interval_coverage_is_near_95_percent(tasks, n, a, b):
    assert 0.92 <= _coverage(tasks, n, a, b) <= 0.98


def test_interval_accounts_for_clustering_by_task():
    # 20 tasks x 8 samples, every task all-or-nothing: 20 independent draws, not 160.
    clustered = pass_rate_interval([(8, 8)] * 10 + [(8, 0)] * 10)
    # Same successes spread evenly: the samples really are closer to independent.
    spread = pass_rate_interval([(8, 4)] * 20)
    assert clustered.estimate == spread.estimate == 0.5
    assert clustered.high - clustered.low > 2 * (spread.high - spread.low)
    # One sample per task: the plain Wilson interval (7/20).
    wilson = pass_rate_interval([(1, 1)] * 7 + [(1, 0)] * 13)
    z = 1.959963984540054
    p, n = 7 / 20, 20
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert (wilson.low, wilson.high) == pytest.approx((centre - half, centre + half))


def test_interval_of_a_policy_that_solves_nothing_has_an_upper_bound():
    iv = pass_rate_interval([(4, 0)] * 30)
    assert iv.estimate == 0.0 and iv.low == 0.0
    assert 0.05 < iv.high < 0.2  # Wilson on the 30 tasks, not a zero-width [0, 0]
    assert iv.n_tasks == 30 and iv.n_samples == 120
    # Tasks with no graded sample (all infra errors) are not in the denominator.
    assert pass_rate_interval([(4, 0)] * 30 + [(0, 0)] * 5).n_tasks == 30


def _rows(probs, rng, *, samples=4, run=0, infra=0.0):
    return [{"task_id": f"t{t}", "sample_seed": 1000 + s, "run": run,
             "success": None if rng.random() < infra else bool(rng.random() < p)}
            for t, p in enumerate(probs) for s in range(samples)]


def test_paired_interval_excludes_zero_for_a_real_difference():
    rng = np.random.default_rng(1)
    p = rng.beta(1, 2, size=60)
    a = _rows(p, rng)
    b = _rows(np.clip(p + 0.2, 0, 1), rng)
    cmp = paired_difference(a, b, seed=3)
    assert cmp.difference.low > 0
    assert cmp.difference.estimate == pytest.approx(cmp.mean_b - cmp.mean_a)
    # Seeded: the same call gives the same interval.
    assert paired_difference(a, b, seed=3) == cmp


def test_paired_interval_covers_zero_when_there_is_no_difference():
    rng = np.random.default_rng(2)
    p = rng.beta(1, 2, size=60)
    a, b = _rows(p, rng), _rows(p, rng)
    assert not paired_difference(a, b, seed=0).difference.excludes(0.0)


def test_paired_comparison_pools_training_seeds_and_drops_infra_pairs():
    rng = np.random.default_rng(4)
    p = rng.beta(1, 2, size=40)
    a = _rows(p, rng)
    b = [r for run in range(3) for r in _rows(np.clip(p + 0.25, 0, 1), rng, run=run, infra=0.03)]
    cmp = paired_difference(a, b, seed=0)
    assert (cmp.runs_a, cmp.runs_b) == (1, 3)
    infra_keys = {(r["task_id"], r["sample_seed"]) for r in b if r["success"] is None}
    assert cmp.n_excluded_infra == len(infra_keys) > 0
    assert cmp.n_pairs == 40 * 4 - len(infra_keys)
    assert cmp.difference.low > 0
    # Resampling runs adds only seed-to-seed variance: three identical copies of one run
    # give the interval of that run alone.
    b0 = _rows(np.clip(p + 0.25, 0, 1), rng)
    same = [dict(r, run=k) for k in range(3) for r in b0]
    one = paired_difference(a, b0, seed=0).difference
    three = paired_difference(a, same, seed=0).difference
    assert (three.low, three.high) == pytest.approx((one.low, one.high), abs=0.02)


def test_pairing_refuses_different_task_or_seed_sets():
    rng = np.random.default_rng(5)
    a = _rows([0.5] * 5, rng)
    b = [dict(r, sample_seed=r["sample_seed"] + 1) if r["task_id"] == "t0" else r
         for r in _rows([0.5] * 5, rng)]
    with pytest.raises(PairingError, match="sample seed"):
        paired_difference(a, b)
    with pytest.raises(PairingError, match="twice"):
        paired_difference(a, a + a[:1])
