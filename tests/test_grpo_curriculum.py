"""The difficulty-band sampler (SPEC §1 difficulty, §7 dynamic sampling) and the pathology
detectors (SPEC §7 pathologies): pure functions over counts and curves."""
from __future__ import annotations

from collections import Counter

import pytest

from rlvr.errors import ConfigError
from rlvr.rl.groups import p_info
from rlvr.train import pathology
from rlvr.train.curriculum import Curriculum, CurriculumParams
from rlvr.train.pathology import PathologyParams


def _curriculum(n: int = 10, **kw) -> Curriculum:
    return Curriculum([f"t{i}" for i in range(n)], CurriculumParams(**kw), group_size=8, seed=0)


def test_p_hat_comes_with_its_count_and_a_window():
    c = _curriculum(window=4)
    assert c.stats["t0"].p_hat is None and c.stats["t0"].count == 0
    c.update("t0", [1.0, 0.0, 0.0, None])         # an infra error is not an outcome
    assert (c.stats["t0"].p_hat, c.stats["t0"].count) == (pytest.approx(1 / 3), 3)
    c.update("t0", [0.0, 0.0, 0.0])                # only the last 4 outcomes count
    assert (c.stats["t0"].p_hat, c.stats["t0"].count) == (0.0, 4)
    assert c.band("t0") == "hard" and c.band("t1") == "unseen"


def test_p_info_is_averaged_per_task_never_from_the_pooled_rate():
    c = _curriculum(2, window=100)
    c.update("t0", [1.0] + [0.0] * 99)            # p = 0.01
    c.update("t1", [1.0] * 99 + [0.0])            # p = 0.99: the pooled rate is 0.5
    per_task = (p_info(0.01, 8) + p_info(0.99, 8)) / 2
    assert c.p_info_mean() == pytest.approx(per_task)
    assert c.p_info_mean() == pytest.approx(0.0773, abs=1e-4)
    assert abs(c.p_info_mean() - p_info(0.5, 8)) > 0.9   # 0.9922 would be the pooled answer
    report = c.report()
    assert report["p_info_mean"] == pytest.approx(per_task)
    assert report["expected_draws_per_informative_group"] == pytest.approx(1 / per_task)
    assert {r["task_id"]: r["count"] for r in report["per_task"]} == {"t0": 100, "t1": 100}


def test_a_task_that_failed_one_group_is_never_dropped():
    """Every task fails its first group (a policy that solves nothing): all are hard, and
    every one of them is drawn again; none disappears from the selection."""
    c = _curriculum(10)
    for t in c.stats:
        c.update(t, [0.0] * 8)
    seen = Counter()
    for draw in range(60):
        for t in c.select(3, draw):
            seen[t] += 1
    assert set(seen) == set(c.stats)
    assert c.report()["selected_by_band"]["hard"] == 180


def test_shares_of_easy_and_hard_tasks_are_kept_beside_the_band():
    c = _curriculum(30, easy_share=0.1, hard_share=0.2)
    for i in range(30):
        outcome = [1.0] * 8 if i < 10 else ([0.0] * 8 if i < 20 else [1.0] * 4 + [0.0] * 4)
        c.update(f"t{i}", outcome)
    assert c.report()["tasks_by_band"] == {"unseen": 0, "band": 10, "hard": 10, "easy": 10}
    for draw in range(400):
        c.select(5, draw)
    by_band = c.report()["selected_by_band"]
    total = sum(by_band.values())
    assert total == 2000
    assert by_band["hard"] / total == pytest.approx(0.2, abs=0.04)
    assert by_band["easy"] / total == pytest.approx(0.1, abs=0.03)
    assert by_band["band"] / total == pytest.approx(0.7, abs=0.05)
    # every hard and every easy task keeps being visited
    assert all(r["selected"] > 0 for r in c.report()["per_task"])


def test_band_tasks_are_weighted_by_their_p_info():
    c = _curriculum(2, easy_share=0.0, hard_share=0.01, p_low=0.01, p_high=0.99, window=20)
    c.update("t0", [1.0] * 10 + [0.0] * 10)          # p = 0.5:  P_info(0.5, 8) ≈ 0.99
    c.update("t1", [1.0] * 1 + [0.0] * 19)           # p = 0.05: P_info(0.05, 8) ≈ 0.34
    first = Counter(c.select(1, d)[0] for d in range(2000))
    ratio = first["t0"] / first["t1"]
    assert ratio == pytest.approx(p_info(0.5, 8) / p_info(0.05, 8), rel=0.2)


def test_unseen_tasks_are_explored_first():
    c = _curriculum(8)
    chosen = c.select(4, 0)
    assert len(set(chosen)) == 4
    for t in chosen:
        c.update(t, [0.0] * 8)
    # the band share goes to the four tasks never tried; hard slots revisit the failures
    nxt = Counter(c.band(t) for d in range(1, 50) for t in c.select(2, d))
    assert nxt["unseen"] > nxt["hard"] > 0


def test_selection_is_a_function_of_state_and_draw_index():
    a, b = _curriculum(12), _curriculum(12)
    for t in ("t1", "t5"):
        a.update(t, [0.0] * 8)
    b.load_state(a.state())
    assert a.select(4, 7) == b.select(4, 7)
    assert a.state() == b.state()
    with pytest.raises(ConfigError):
        _curriculum(3).load_state(a.state())


@pytest.mark.parametrize("kw, key", [({"hard_share": 0.0}, "hard_share"),
                                     ({"easy_share": 0.5, "hard_share": 0.5}, "easy_share"),
                                     ({"p_low": 0.9, "p_high": 0.5}, "p_low"),
                                     ({"window": 0}, "window")])
def test_curriculum_params_refuse_meaningless_values(kw, key):
    with pytest.raises(ConfigError, match=key):
        CurriculumParams(**kw)


# ---- pathology detectors --------------------------------------------------------------------
def _curve(n: int, **series) -> list[dict]:
    return [{"step": i + 1, **{k: f(i / (n - 1)) for k, f in series.items()}} for i in range(n)]


def test_a_synthetic_collapse_raises_each_flag_by_name_but_the_blowup():
    curves = _curve(
        10,
        **{"train/entropy": lambda x: 1.2 - 1.1 * x,                 # 1.2 -> 0.1
           "train/entropy_call": lambda x: 0.3 - 0.28 * x,           # the actions too
           "train/group_distinct_fraction": lambda x: 1.0 - 0.75 * x,  # groups become copies
           "train/informative_fraction": lambda x: 0.8 - 0.7 * x,    # falls fast ...
           "train/pass_at_1": lambda x: 0.2 + 0.3 * x,               # ... while accuracy rises less
           "train/pass_at_k": lambda x: 0.7,                         # pass@k stalls
           "train/length_mean": lambda x: 100 + 400 * x,             # length x5
           "train/parse_error_rate": lambda x: 0.05 if x < 0.8 else 0.4})
    found = {f.name: f for f in pathology.detect(curves)}
    assert set(found) == set(pathology.FLAGS)
    assert pathology.flags(found.values()) == {name: name != "entropy_blowup"
                                               for name in pathology.FLAGS}
    assert found["entropy_collapse"].value > 0.5 and found["length_growth"].value > 2.0


def test_entropy_that_explodes_is_a_blowup_and_a_healthy_rise_is_not():
    """The Dr.GRPO collapse preset's entropy curve (LEARNING.md) ends at 5.4 nats per token;
    the band run's seed 1 rose ~5x too, but stayed below the ceiling while it learned."""
    dr_grpo = [0.114, 0.976, 0.517, 0.454, 0.52, 0.488, 0.599, 1.546, 3.283, 4.136, 5.592, 6.347]
    band = [0.137, 0.118, 0.147, 0.205, 0.191, 0.208, 0.595, 0.718, 0.913, 0.706, 0.677, 0.676]

    def blowup(values):
        curves = [{"step": i + 1, "train/entropy": v} for i, v in enumerate(values)]
        return {f.name: f for f in pathology.detect(curves)}["entropy_blowup"]

    assert blowup(dr_grpo).raised
    assert blowup(dr_grpo).value == pytest.approx((4.136 + 5.592 + 6.347) / 3)
    assert not blowup(band).raised and not blowup(band[:5]).raised
    assert "needs 6" in blowup(band[:5]).detail


def test_actions_that_collapse_under_rising_free_text_are_named():
    """lr 3e-4 seed 0 of the per-sequence-loss collapse (LEARNING.md): the all-token entropy
    rose x6 while the tool-call tokens' fell by two thirds; only the action detector sees it."""
    curves = _curve(12, **{"train/entropy": lambda x: 0.086 + 0.47 * x,
                           "train/entropy_call": lambda x: 0.066 - 0.046 * x})
    found = {f.name: f for f in pathology.detect(curves)}
    assert found["action_entropy_collapse"].raised
    assert found["action_entropy_collapse"].value > 0.5
    assert not found["entropy_collapse"].raised
    # a run that logs no region split (no <tool_call> token) is never flagged by it
    plain = [{k: v for k, v in c.items() if k != "train/entropy_call"} for c in curves]
    missing = {f.name: f for f in pathology.detect(plain)}["action_entropy_collapse"]
    assert not missing.raised and "0 point(s)" in missing.detail


def test_a_healthy_run_raises_no_flag():
    curves = _curve(
        10,
        **{"train/entropy": lambda x: 0.8 - 0.1 * x,
           "train/entropy_call": lambda x: 0.2 - 0.02 * x,
           "train/group_distinct_fraction": lambda x: 1.0,
           "train/informative_fraction": lambda x: 0.6 + 0.05 * x,
           "train/pass_at_1": lambda x: 0.2 + 0.2 * x,
           "train/pass_at_k": lambda x: 0.6 + 0.15 * x,
           "train/length_mean": lambda x: 200 + 40 * x,
           "train/parse_error_rate": lambda x: 0.1 - 0.05 * x})
    assert pathology.flags(pathology.detect(curves)) == {n: False for n in pathology.FLAGS}


def test_a_format_that_breaks_at_the_first_update_is_a_parse_error_spike():
    """The engineered-collapse run (bench/learning_grpo.py --preset collapse): 0.16 at step 1,
    ~0.73 from step 2 on. No step has a clean baseline window before it, so only the
    sustained rise over step 1 can name it; one noisy step after one clean one cannot."""
    rates = [0.161, 0.727, 0.73, 0.724, 0.762, 0.72, 0.739]
    curves = [{"step": i + 1, "train/parse_error_rate": r} for i, r in enumerate(rates)]
    found = {f.name: f for f in pathology.detect(curves)}
    assert found["parse_error_spike"].raised
    assert found["parse_error_spike"].value == pytest.approx(0.724 - 0.161)
    blip = [0.16, 0.5, 0.17, 0.16, 0.15, 0.16, 0.17]
    curves = [{"step": i + 1, "train/parse_error_rate": r} for i, r in enumerate(blip)]
    assert not {f.name: f for f in pathology.detect(curves)}["parse_error_spike"].raised


def test_too_short_a_curve_raises_nothing_and_says_so():
    curves = _curve(3, **{"train/entropy": lambda x: 1.0 - 0.9 * x})
    found = {f.name: f for f in pathology.detect(curves, PathologyParams(window=3))}
    assert not any(f.raised for f in found.values())
    assert "needs 6" in found["entropy_collapse"].detail
    assert found["entropy_collapse"].value is None


def test_pathology_params_refuse_meaningless_values():
    with pytest.raises(ConfigError, match="length_factor"):
        PathologyParams(length_factor=1.0)
    with pytest.raises(ConfigError, match="window"):
        PathologyParams(window=0)
    with pytest.raises(ConfigError, match="entropy_max"):
        PathologyParams(entropy_max=0.0)
