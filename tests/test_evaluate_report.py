"""Evaluation sets, eval rows, the report and its plots (SPEC §8), on crafted passports."""
from __future__ import annotations

import csv

import pytest
import yaml

from rlvr.artifacts.io import write_table
from rlvr.artifacts.schemas import EVAL
from rlvr.config import parse
from rlvr.errors import ArtifactError, ConfigError
from rlvr.evaluate.metrics import PairingError, pass_at_k
from rlvr.evaluate.params import EvaluateParams, TierSizes
from rlvr.evaluate.report import (UnscoredPassport, build_report, check_pairing, cost_report,
                                  eval_rows, eval_timing_rows, pass_at_k_table, read_eval,
                                  read_eval_timings, summarize, timings_by_key, write_eval,
                                  write_plots)
from rlvr.evaluate.sets import build_sets, fingerprint, manifest, tier_of
from rlvr.tasks.model import Task


def _task(task_id: str, split: str, family: str = "fam") -> Task:
    return Task(task_id=task_id, family=family, instruction="fix", repo_files={"a.py": task_id},
                public_tests=(), hidden_tests={"t.py": ""}, reference_patch=f"-{task_id}",
                split=split)


POOL = ([_task(f"tr{i:02d}", "train", f"f{i % 3}") for i in range(40)]
        + [_task(f"hf{i:02d}", "heldout_function", f"f{i % 3}") for i in range(10)]
        + [_task(f"ho{i:02d}", "heldout", "hold") for i in range(6)]
        + [_task(f"rg{i:02d}", "regression", "reg") for i in range(3)])
SIZES = TierSizes(train=8, heldout_function=4, heldout=0, regression=2)


# ---- sets -----------------------------------------------------------------------------------
def test_sets_are_fixed_seeded_and_sized_per_tier():
    sets = build_sets(POOL, SIZES, seed=0)
    assert [s.tier for s in sets] == ["train", "heldout_function", "heldout", "regression"]
    assert [len(s.tasks) for s in sets] == [8, 4, 6, 2]  # heldout: 0 = all
    assert all(list(s.task_ids) == sorted(s.task_ids) for s in sets)
    # Pool order does not matter; the seed does.
    assert manifest(build_sets(POOL[::-1], SIZES, seed=0)) == manifest(sets)
    assert fingerprint(build_sets(POOL, SIZES, seed=1)) != fingerprint(sets)
    assert {t.split for s in sets for t in s.tasks if s.tier == "train"} == {"train"}
    assert all(tier_of(sets)[t] == s.tier for s in sets for t in s.task_ids)


def test_adding_tasks_to_the_pool_moves_a_set_only_by_outranking_members():
    before = set(build_sets(POOL, SIZES, seed=0)[0].task_ids)
    grown = POOL + [_task(f"new{i}", "train") for i in range(20)]
    after = set(build_sets(grown, SIZES, seed=0)[0].task_ids)
    assert len(after) == 8
    # Every old task that is still in is one that was in before: no reshuffle.
    assert {t for t in after if not t.startswith("new")} <= before


def test_a_task_twice_in_the_pool_is_refused():
    with pytest.raises(ValueError, match="twice"):
        build_sets(POOL + [POOL[0]], SIZES, seed=0)


# ---- eval rows ------------------------------------------------------------------------------
def _passport(task: str, i: int, outcome, *, infra=False, family="fam", invalid=0, turns=4,
              seconds=2.0, version="v1", seed_base=100) -> dict:
    return {"trajectory_id": f"{task}@s0#{i}", "task_id": task, "family": family,
            "sample_index": i, "reset_seed": seed_base + i, "stop_reason":
            "infra_error" if infra else "submitted", "infra_error": infra,
            "reward_outcome": outcome, "verdict_reason": None if outcome is None else
            ("none" if outcome == 1.0 else "tests_failed"), "n_turns": turns, "n_invalid_actions": invalid,
            "n_trainable_tokens": 50, "n_tokens": 400, "wall_seconds": seconds,
            "policy_version": version, "policy_step": 0,
            "turns": [{"action_valid": k >= invalid} for k in range(turns)]}


def test_infra_errors_have_no_outcome_and_never_count_as_failures():
    rows = eval_rows([_passport("a", 0, 1.0), _passport("a", 1, 0.0),
                      _passport("a", 2, 1.0), _passport("a", 3, None, infra=True)],
                     "ckpt", {"a": "train"})
    assert [r["success"] for r in rows] == [True, False, True, None]
    assert [r["infra_error"] for r in rows] == [False, False, False, True]
    assert rows[3]["verdict_reason"] == "infra_error"
    s = summarize(rows)
    assert s["episodes"] == 4 and s["graded"] == 3 and s["infra_errors"] == 1
    assert s["pass_at_1"] == pytest.approx(2 / 3)  # 2 of 3 graded, not 2 of 4
    assert s["pass_at_k"]["3"] == pytest.approx(pass_at_k(3, 2, 3))
    assert "4" not in s["pass_at_k"]  # only 3 graded samples: pass@4 is not estimable
    # A verifier infra error on an episode that itself ran fine is also no failure.
    row = dict(_passport("b", 0, None), verdict_reason="infra_error")
    (r,) = eval_rows([row], "ckpt", {"b": "train"})
    assert r["success"] is None and r["infra_error"]


def test_eval_rows_carry_the_enclaves_safety_flags_of_their_verdicts():
    rows = eval_rows([_passport("a", 0, 0.0), _passport("a", 1, 1.0)], "ckpt", {"a": "train"},
                     safety_flags={"a@s0#0": ["tamper_conftest", "resource_limit_hit"],
                                   "a@s0#1": []})
    assert [r["safety_flags"] for r in rows] == [["resource_limit_hit", "tamper_conftest"], []]
    assert eval_rows([_passport("a", 0, 0.0)], "ckpt", {"a": "train"})[0]["safety_flags"] == []


def test_an_episode_that_never_submitted_is_a_failure_decided_at_rollout_time():
    row = dict(_passport("a", 0, 0.0), stop_reason="max_turns", verdict_reason=None)
    (r,) = eval_rows([row], "ckpt", {"a": "train"})
    assert (r["success"], r["infra_error"], r["verdict_reason"]) == (False, False,
                                                                     "not_submitted")
    # A submitted episode with an outcome but no verdict reason never went through a verdict.
    with pytest.raises(UnscoredPassport, match="no verdict_reason"):
        eval_rows([dict(_passport("a", 0, 0.0), verdict_reason=None)], "ckpt", {"a": "train"})


def test_a_passport_that_was_never_verified_is_refused():
    with pytest.raises(UnscoredPassport, match="apply the verdicts"):
        eval_rows([_passport("a", 0, None)], "ckpt", {"a": "train"})


def test_summary_costs_and_parse_errors():
    rows = eval_rows([_passport("a", 0, 1.0, invalid=1, turns=4, seconds=3.0),
                      _passport("a", 1, 0.0, invalid=0, turns=6, seconds=1.0),
                      _passport("b", 0, 0.0, invalid=3, turns=6, seconds=2.0)],
                     "ckpt", {"a": "train", "b": "train"})
    s = summarize(rows)
    assert s["parse_error_rate"] == pytest.approx(4 / 16)
    assert s["tokens_per_solved"] == pytest.approx(1200.0)
    assert s["generated_tokens_per_solved"] == pytest.approx(150.0)
    assert "seconds_per_solved" not in s  # no clock without the timings
    timed = summarize(rows, timings=timings_by_key(eval_timing_rows(rows)))
    assert timed["seconds_per_solved"] == pytest.approx(6.0)
    assert timed["seconds_mean"] == pytest.approx(2.0)
    assert {k: v for k, v in timed.items() if "seconds" not in k} == s
    assert s["stop_reasons"] == {"submitted": 3}
    # per-task mean: (1/2 + 0) / 2
    assert s["pass_at_1"] == pytest.approx(0.25)
    assert s["pass_at_1_low"] <= 0.25 <= s["pass_at_1_high"]


# ---- report ---------------------------------------------------------------------------------
def _checkpoint_rows(name: str, solved: dict[str, int], n: int = 4, seed_base: int = 100):
    tiers = {"a": "train", "b": "train", "h": "heldout"}
    fam = {"a": "f1", "b": "f2", "h": "hold"}
    passports = [_passport(t, i, 1.0 if i < solved[t] else 0.0, family=fam[t],
                           version=name, seed_base=seed_base) for t in tiers for i in range(n)]
    return eval_rows(passports, name, tiers)


def test_report_per_tier_family_and_paired_comparison():
    rows = (_checkpoint_rows("init", {"a": 0, "b": 1, "h": 0})
            + _checkpoint_rows("sft", {"a": 3, "b": 4, "h": 1}))
    rep = build_report(rows, checkpoints=["init", "sft"], n_boot=500)
    assert rep["tiers"] == {"train": {"pairs": 8}, "heldout": {"pairs": 4}}
    train = rep["checkpoints"]["sft"]["tiers"]["train"]
    assert train["pass_at_1"] == pytest.approx(7 / 8)
    assert set(train["pass_at_k"]) == set(train["pass_hat_k"]) == {"1", "2", "3", "4"}
    assert train["pass_hat_k"]["4"] == pytest.approx(0.5)  # task b: all 4 of 4
    fams = rep["checkpoints"]["sft"]["families"]["train"]
    assert fams["f1"]["pass_at_1"] == pytest.approx(0.75) and fams["f2"]["pass_at_1"] == 1.0
    cmp = rep["paired"]["sft_vs_init"]["train"]
    assert cmp["difference_estimate"] == pytest.approx(7 / 8 - 1 / 8)
    assert cmp["n_pairs"] == 8 and cmp["runs_a"] == cmp["runs_b"] == 1


def test_report_refuses_unpaired_checkpoints():
    rows = (_checkpoint_rows("init", {"a": 0, "b": 1, "h": 0})
            + _checkpoint_rows("sft", {"a": 3, "b": 4, "h": 1}, seed_base=900))
    with pytest.raises(PairingError, match="differ"):
        check_pairing(rows)
    with pytest.raises(PairingError):
        build_report(rows)


def test_eval_parquet_round_trip_and_contract(tmp_path):
    rows = (_checkpoint_rows("init", {"a": 0, "b": 1, "h": 0})
            + _checkpoint_rows("sft", {"a": 3, "b": 4, "h": 1}))
    rows[0] = dict(rows[0], success=None, infra_error=True)
    path = tmp_path / "eval.parquet"
    write_eval(path, rows)  # the same trajectory ids under two checkpoints: fine
    back = read_eval(path)
    assert len(back) == len(rows) and back[0]["success"] is None
    assert set(back[0]) == set(EVAL.names)
    with pytest.raises(ArtifactError, match="checkpoint,run,trajectory_id"):
        write_table(tmp_path / "dup.parquet", rows + rows[:1], EVAL, contract="eval")
    with pytest.raises(ArtifactError, match="tier"):
        write_table(tmp_path / "bad.parquet", [dict(rows[0], tier="nope")], EVAL,
                    contract="eval")


def test_eval_timings_live_in_a_sidecar_and_only_metrics_read_them(tmp_path):
    """eval.parquet and the report are functions of the outcomes: two evaluations that
    differ only in their clocks write the same eval.parquet bytes and the same report."""
    rows = (_checkpoint_rows("init", {"a": 0, "b": 1, "h": 0})
            + _checkpoint_rows("sft", {"a": 3, "b": 4, "h": 1}))
    slower = [dict(r, seconds=r["seconds"] * 3 + 1) for r in rows]
    for name, group in (("a", rows), ("b", slower)):
        write_eval(tmp_path / f"{name}.parquet", group,
                   timings_path=tmp_path / f"{name}.timings.parquet")
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert "seconds" not in EVAL.names
    timings = read_eval_timings(tmp_path / "a.timings.parquet")
    assert timings == timings_by_key(eval_timing_rows(rows))
    assert len(timings) == len(rows)
    assert build_report(rows, n_boot=50) == build_report(slower, n_boot=50)
    timed = build_report(rows, n_boot=50, timings=timings)
    sft = timed["checkpoints"]["sft"]["tiers"]["train"]
    assert sft["seconds_per_solved"] == pytest.approx(2.0 * 8 / 7)  # 8 episodes, 7 solved
    costs = cost_report(rows, timings, checkpoints=["init", "sft"])
    assert list(costs) == ["init", "sft"] and set(costs["sft"]) == {"train", "heldout"}
    assert costs["sft"]["train"]["seconds_per_solved"] == pytest.approx(sft["seconds_per_solved"])
    assert costs["init"]["heldout"]["seconds_per_solved"] is None  # nothing solved
    with pytest.raises(ArtifactError, match="no timings"):
        summarize(rows, timings={})
    with pytest.raises(ArtifactError, match="no episode timings"):  # passports read from disk
        write_eval(tmp_path / "c.parquet", [dict(rows[0], seconds=None)],
                   timings_path=tmp_path / "c.timings.parquet")
    assert not (tmp_path / "c.parquet").exists()


def test_pass_at_k_plots_csv_and_png(tmp_path):
    rows = (_checkpoint_rows("init", {"a": 0, "b": 1, "h": 0})
            + _checkpoint_rows("sft", {"a": 3, "b": 4, "h": 1}))
    table = pass_at_k_table(rows, checkpoints=["init", "sft"])
    write_plots(table, tmp_path / "passk.png", tmp_path / "passk.csv")
    with open(tmp_path / "passk.csv") as fh:
        got = list(csv.DictReader(fh))
    assert len(got) == 2 * 2 * 4  # checkpoints x tiers x k
    assert {r["series"] for r in got} == {"init/train", "init/heldout", "sft/train",
                                          "sft/heldout"}
    sft_train = [float(r["pass_at_k"]) for r in got if r["series"] == "sft/train"]
    assert sft_train == sorted(sft_train) and sft_train[-1] == 1.0  # pass@k rises with k
    assert (tmp_path / "passk.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---- params ---------------------------------------------------------------------------------
def test_params_yaml_evaluate_section_parses():
    with open("params.yaml") as fh:
        data = yaml.safe_load(fh)
    p = parse(EvaluateParams, data["evaluate"], "evaluate")
    assert p.samples_per_task >= 1 and p.checkpoints
    assert p.budgets == parse(EvaluateParams, {"budgets": data["rollout"]["budgets"]},
                              "evaluate").budgets  # deployment budgets: same as rollout's


@pytest.mark.parametrize("section,key", [({"tasks_per_tier": {"train": -1}}, "tasks_per_tier.train"),
                                         ({"samples_per_task": 0}, "samples_per_task"),
                                         ({"checkpoints": {}}, "checkpoints"),
                                         ({"tiers": 3}, "tiers")])
def test_bad_evaluate_params_name_the_key(section, key):
    with pytest.raises(ConfigError, match=rf"evaluate\.{key}"):
        parse(EvaluateParams, section, "evaluate")
