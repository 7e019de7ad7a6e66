"""The release gate (SPEC §8): synthetic evaluations that must promote, block on each rule
by name, and come out inconclusive; bad input is a named error with exit 2, nothing written
and no alias moved."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

import gatekit as gk
from rlvr.errors import ConfigError
from rlvr.evaluate.report import write_eval
from rlvr.gate.decision import run_gate
from rlvr.gate.inputs import GateInputError, parse_training_metrics
from rlvr.gate.params import StopSignalParams, load_params
from rlvr.gate.rules import resolution


def _champ(**kw):
    return gk.rows("champ", **kw)


def _statuses(result):
    return {r.name: r.status for r in result.rules}


def _signal(result, name):
    return next(s for s in result.rule("stop_signals").numbers["signals"] if s["name"] == name)


# ---- promote / block / inconclusive ------------------------------------------------------
def test_the_enclaves_safety_flags_are_counted_per_side_and_tier_and_reported():
    from rlvr.gate.report import render_markdown
    cand = gk.rows("cand")
    for r in cand[:3]:
        r["safety_flags"] = ["tamper_conftest"]
    cand[0]["safety_flags"] = ["resource_limit_hit", "tamper_conftest"]
    gate = run_gate(cand, _champ(), gk.params()).as_json()
    tier = cand[0]["tier"]
    assert gate["safety_flags"]["candidate"][tier] == {
        "episodes": 320, "flagged": 3, "flags": {"resource_limit_hit": 1, "tamper_conftest": 3}}
    assert {s["flagged"] for t, s in gate["safety_flags"]["candidate"].items() if t != tier} \
        == {0}
    assert {s["flagged"] for s in gate["safety_flags"]["champion"].values()} == {0}
    md = render_markdown(gate)
    assert f"| cand (candidate) | {tier} | 3 / 320 | `resource_limit_hit` 1, `tamper_conftest` 3 |" \
        in md
    clean = render_markdown(run_gate(gk.rows("cand"), _champ(), gk.params()).as_json())
    assert "No verdict of either checkpoint carried a safety flag." in clean



def test_a_better_candidate_with_enough_evidence_is_promoted():
    cand = gk.rows("cand", {"heldout_function": gk.better_on_target})
    result = run_gate(cand, _champ(), gk.params())
    assert result.decision == "promote"
    assert set(_statuses(result).values()) == {"pass"}
    target = result.rule("target_capability").numbers
    assert target["difference"] == pytest.approx(10 * 0.5 / 80)
    assert target["low"] > 0 and target["superior"] is True
    assert result.discard() == []
    gate = result.as_json()
    assert gate["decision"] == "promote" and gate["blocking"] == []
    assert gate["candidate"]["content_hash"] == "sha256:000000000000cand"
    json.dumps(gate)  # JSON-safe: no NaN, no tuples


def test_worse_on_the_target_tier_blocks_on_target_capability():
    # 1 of 4 instead of 2 on 20 tasks: pass@1 down 0.0625, pass@4 unchanged
    cand = gk.rows("cand", {"heldout_function": lambda t: 1 if t < 20 else 2})
    result = run_gate(cand, _champ(), gk.params())
    assert result.decision == "block"
    assert _statuses(result)["target_capability"] == "fail"
    assert result.blocking == ["target_capability"]
    assert result.rule("target_capability").numbers["difference"] == pytest.approx(-0.0625)
    # a rejected candidate's rollouts are to be discarded by policy version and step
    assert result.discard() == [{"checkpoint": "cand", "content_hash": "sha256:000000000000cand",
                                 "policy_version": "sha256:000000000000cand",
                                 "policy_steps": [0]}]


def test_a_blocked_candidate_that_is_the_champion_discards_nothing():
    """GRPO that accepted no group saves the SFT weights again: the gate still judges it
    (here: an unparsed tool call blocks), but its rollouts are the champion's own."""
    from rlvr.gate.report import render_markdown

    twin = gk.rows("champ", invalid=lambda tier, t, i: 1 if (tier, t, i) == ("heldout", 7, 2)
                   else 0)
    result = run_gate(twin, _champ(), gk.params())
    assert result.decision == "block" and result.candidate_is_champion
    assert result.discard() == []
    gate = result.as_json()
    assert gate["candidate_is_champion"] is True and gate["discard"] == []
    assert "the champion's own checkpoint" in render_markdown(gate)
    assert run_gate(gk.rows("cand"), _champ(), gk.params()).candidate_is_champion is False


def test_a_regression_on_another_tier_blocks_on_no_regressions():
    cand = gk.rows("cand", {"heldout_function": gk.better_on_target,
                            "regression": lambda t: 1 if t < 20 else 2})
    result = run_gate(cand, _champ(), gk.params())
    assert result.decision == "block"
    assert result.blocking == ["no_regressions"]
    tiers = result.rule("no_regressions").numbers["tiers"]
    assert tiers["regression"]["status"] == "fail" and tiers["heldout"]["status"] == "pass"


def test_one_unparsed_tool_call_blocks_on_contract_compliance():
    cand = gk.rows("cand", {"heldout_function": gk.better_on_target},
                   invalid=lambda tier, t, i: 1 if (tier, t, i) == ("heldout", 7, 2) else 0)
    result = run_gate(cand, _champ(), gk.params())
    assert result.decision == "block"
    assert result.blocking == ["contract_compliance"]
    c = result.rule("contract_compliance").numbers
    assert (c["unparsed"], c["tool_calls"]) == (1, 4 * 4 * 80 * 4)
    assert c["examples"] == [{"tier": "heldout", "task_id": "t-heldout-007", "seed": 1072,
                              "run": "", "trajectory_id": "traj-heldout-007-2",
                              "n_invalid_actions": 1, "n_turns": 4,
                              "stop_reason": "submitted"}]
    # a declared tolerance lets it through
    relaxed = gk.params(contract=replace(gk.params().contract, max_invalid_rate=0.01))
    assert run_gate(cand, _champ(), relaxed).decision == "promote"


def test_the_reference_pathology_blocks_with_train_up_heldout_down_named():
    """SPEC §8: train accuracy 0.313 -> 0.408 while held-out 0.033 -> 0.000 (and pass@4
    down): blocked, the collapse rule named, even with tolerances loose enough that rules 1
    and 2 alone would not catch it."""
    champ = gk.rows("champ", {"train": lambda t: 1 if t < 50 else 0,
                              "heldout_function": lambda t: 1 if t < 11 else 0,
                              "heldout": lambda t: 1 if t < 11 else 0})
    cand = gk.rows("cand", {"train": lambda t: 2 if t < 50 else (1 if t < 51 else 0),
                            "heldout_function": lambda t: 1 if t < 11 else 0,
                            "heldout": lambda t: 0})
    loose = gk.params(regression_tolerance=0.2)
    result = run_gate(cand, champ, loose)
    assert _statuses(result)["no_regressions"] == "pass"
    assert result.decision == "block"
    assert "stop_signals:train_up_heldout_down" in result.blocking
    sig = _signal(result, "train_up_heldout_down")
    assert sig["status"] == "raised" and sig["value"] >= 0.05


@pytest.mark.parametrize("name, make, stop", [
    ("parse_error_spike",
     lambda: gk.rows("cand", invalid=lambda tier, t, i: {0: 2, 1: 1}.get(i, 0)),
     {}),
    ("infra_error_rise",
     lambda: gk.rows("cand", infra=lambda tier, t, i: i == 3),
     {}),
    ("length_growth", lambda: gk.rows("cand", tokens=300), {}),
    ("pass_at_k_drop",
     lambda: gk.rows("cand", {"heldout": lambda t: 0 if t < 24 else 2}),
     {"train_rise": None}),
])
def test_each_evaluation_stop_signal_blocks_by_name(name, make, stop):
    p = gk.params(regression_tolerance=0.5,
                  contract=replace(gk.params().contract, max_invalid_rate=1.0),
                  stop=replace(StopSignalParams(), **stop))
    result = run_gate(make(), _champ(), p)
    assert result.decision == "block"
    assert f"stop_signals:{name}" in result.blocking
    assert _signal(result, name)["status"] == "raised"


@pytest.mark.parametrize("name, training", [
    ("entropy_collapse", {"curves": [{"step": 1, "train/entropy": 0.29},
                                     {"step": 2, "train/entropy": 0.01}]}),
    ("entropy_blowup", {"curves": [{"step": 1, "train/entropy": 0.11},
                                   {"step": 2, "train/entropy": 6.3}]}),
    ("reward_up_heldout_down", {"curves": [{"step": 1, "train/reward": 0.31},
                                           {"step": 2, "train/reward": 0.41}]}),
    ("trainer:informative_fraction_collapse",
     {"curves": [], "flags": {"informative_fraction_collapse": True, "length_growth": False}}),
])
def test_each_training_stop_signal_blocks_by_name(name, training):
    # held-out pass@1 down by 0.0625: inside a loose regression tolerance, so only the
    # declared signal can block
    cand = gk.rows("cand", {"heldout": lambda t: 2 if t >= 10 else 0})
    p = gk.params(regression_tolerance=0.3)
    result = run_gate(cand, _champ(), p, training=parse_training_metrics(training, "t.json"))
    assert result.decision == "block"
    assert f"stop_signals:{name}" in result.blocking


def test_missing_training_metrics_are_said_so_not_passed():
    cand = gk.rows("cand", {"heldout_function": gk.better_on_target})
    card = {"metrics": {"evals": [{"step": 40, "train/loss_mean": 1.2, "val/loss": 1.3,
                                   "eval/parse_error_rate": 0.6},
                                  {"step": 80, "train/loss_mean": 0.9, "val/loss": 1.1,
                                   "eval/parse_error_rate": 0.5}]}}
    training = parse_training_metrics(card, "models/policy-sft/training.json")
    result = run_gate(cand, _champ(), gk.params(), training=training)
    stop = result.rule("stop_signals")
    assert stop.status == "pass"
    assert set(stop.numbers["unavailable"]) == {"reward_up_heldout_down", "entropy_collapse",
                                                "entropy_blowup", "trainer_flags"}
    assert "'train/entropy'" in _signal(result, "entropy_collapse")["why"]
    assert "records no pathology flags" in _signal(result, "trainer_flags")["why"]
    assert result.as_json()["training_metrics"]["curves"] == [
        "eval/parse_error_rate", "train/loss_mean", "val/loss"]


def test_too_few_tasks_for_the_tolerance_is_inconclusive_never_promote():
    champ = gk.rows("champ", tasks=24)
    cand = gk.rows("cand", tasks=24)  # identical: no discordant task among 24
    result = run_gate(cand, champ, gk.params())
    assert _statuses(result)["target_capability"] == "pass"
    assert _statuses(result)["enough_evidence"] == "inconclusive"
    assert result.decision == "inconclusive"
    ev = result.rule("enough_evidence").numbers["tiers"]["heldout_function"]
    assert ev["resolution"] == pytest.approx(1.959964 ** 2 / (24 + 1.959964 ** 2), rel=1e-5)
    assert ev["resolution"] > 0.05 and ev["enough"] is False
    assert result.discard() == []


def test_an_interval_straddling_the_margin_is_inconclusive():
    # worse by 0.025 on average, but noisy: interval reaches below -0.05
    # per-task differences of -1 on 10 tasks, +1 on 10, -0.5 on one: mean -0.006, wide
    champ = gk.rows("champ", {"heldout_function": lambda t: {0: 4, 1: 0}.get(t % 8, 2)})
    cand = gk.rows("cand", {"heldout_function": lambda t: 0 if t == 2 else
                            {0: 0, 1: 4}.get(t % 8, 2)})
    result = run_gate(cand, champ, gk.params())
    t = result.rule("target_capability").numbers
    assert t["difference"] >= -0.05 > t["low"]
    assert result.rule("target_capability").status == "inconclusive"
    assert result.decision == "inconclusive"


def test_sft_vs_init_at_zero_is_not_promoted():
    """The real CPU default: both at pass@1 = 0 on every tier, the candidate with unparsed
    calls (0.50 of turns) but fewer than the champion (0.96): blocked on the contract, and
    24 tasks could not have shown non-inferiority anyway."""
    champ = gk.rows("champ", {t: (lambda _: 0) for t in gk.TIERS}, tasks=24,
                    invalid=lambda tier, t, i: 4 if (t + i) % 25 else 3)
    cand = gk.rows("cand", {t: (lambda _: 0) for t in gk.TIERS}, tasks=24,
                   invalid=lambda tier, t, i: 2)
    result = run_gate(cand, champ, gk.params())
    assert result.decision == "block"
    assert result.blocking == ["contract_compliance"]
    assert _statuses(result)["enough_evidence"] == "inconclusive"
    assert _signal(result, "parse_error_spike")["status"] == "clear"


def test_resolution_is_the_half_width_when_the_bootstrap_has_spread():
    cand = gk.rows("cand", {"heldout_function": gk.better_on_target})
    result = run_gate(cand, _champ(), gk.params())
    c = result.comparisons["heldout_function"]
    assert resolution(c) == pytest.approx((c.high - c.low) / 2)


# ---- validation ------------------------------------------------------------------------
def test_evaluations_on_different_task_sets_are_refused():
    cand = gk.rows("cand", task_prefix="other")
    with pytest.raises(GateInputError, match="different task sets"):
        run_gate(cand, _champ(), gk.params())


def test_evaluations_with_different_sample_seeds_are_refused():
    cand = gk.rows("cand", seed_base=5000)
    with pytest.raises(GateInputError, match="different sample seeds"):
        run_gate(cand, _champ(), gk.params())


def test_a_missing_gated_tier_is_refused():
    tiers = ("train", "heldout", "regression")
    with pytest.raises(GateInputError, match="heldout_function"):
        run_gate(gk.rows("cand", tiers=tiers), gk.rows("champ", tiers=tiers), gk.params())


@pytest.mark.parametrize("section, message", [
    ({"candidat": "sft"}, "gate.candidat: unknown key"),
    ({"target_tier": "nope"}, "gate.target_tier: must be one of"),
    ({"tolerance": 1.5}, "gate.tolerance"),
    ({"other_tiers": ["heldout_function"]}, "gate.other_tiers"),
    ({"stop": {"entropy_min": -1}}, "gate.stop.entropy_min"),
    ({"stop": {"entropy_min": 0.5, "entropy_max": 0.4}}, "gate.stop.entropy_max"),
    ({"stop": {"entrpy_min": 0.1}}, "gate.stop.entrpy_min: unknown key"),
    ({"min_trials": "many"}, "gate.min_trials: expected an integer"),
])
def test_malformed_gate_params_name_the_key(tmp_path, section, message):
    path = tmp_path / "params.yaml"
    path.write_text(json.dumps({"gate": section}))
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_params(path)


def test_params_yaml_gate_section_parses():
    from pathlib import Path

    p = load_params(Path(__file__).resolve().parent.parent / "params.yaml")
    assert (p.candidate, p.champion, p.target_tier) == ("grpo", "sft", "heldout_function")
    assert (p.candidate_dir, p.champion_dir) == ("models/policy-grpo", "models/policy-sft")
    assert p.other_tiers == ("heldout", "regression")


# ---- stage entry: outputs, exit 2 on bad input, nothing written ----------------------
def _params_file(tmp_path, **gate):
    path = tmp_path / "params.yaml"
    section = {"candidate": "cand", "champion": "champ", "candidate_dir": "",
               "champion_dir": "", "bootstrap": 200, **gate}
    path.write_text(json.dumps({"gate": section}))
    return path


def _stage(tmp_path, params, eval_path, *extra):
    from stages.gate import main

    out = tmp_path / "out"
    argv = ["--params", str(params), "--eval", str(eval_path), "--out", str(out / "gate.json"),
            "--report", str(out / "gate.md"), "--metrics", str(out / "metrics.json"), *extra]
    main(argv)
    return out


@pytest.fixture
def registry(tmp_path, monkeypatch):
    from rlvr.tracking.registry import client

    uri = f"sqlite:///{tmp_path / 'registry.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("RLVR_TRACKING", "off")  # no stage run: only the registry
    return client(uri)


def test_stage_writes_gate_json_report_metrics_and_promotes(tmp_path, registry):
    from rlvr.artifacts.io import timings_path
    from rlvr.tracking.registry import aliases_of, versions

    ev = tmp_path / "eval.parquet"
    rows = _champ() + gk.rows("cand", {"heldout_function": gk.better_on_target})
    for r in rows:
        r.update(seconds=2.0, tool_seconds=0.5, gen_seconds=1.0)
    write_eval(ev, rows, timings_path=timings_path(ev))
    training = tmp_path / "training.json"
    training.write_text(json.dumps({"curves": [{"step": s, "train/entropy": 0.3 - s / 100,
                                                "train/length_mean": 100 + s}
                                               for s in range(1, 6)]}))
    out = _stage(tmp_path, _params_file(tmp_path), ev, "--training-metrics", str(training))
    gate = json.loads((out / "gate.json").read_text())
    assert gate["decision"] == "promote"
    assert set(gate["rules"]) == {"target_capability", "no_regressions", "contract_compliance",
                                  "stop_signals", "enough_evidence"}
    assert gate["registry"]["alias_moved"] is True
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["decision"] == "promote" and metrics["promoted"] == 1
    report = (out / "gate.md").read_text()
    assert "# Release gate: **PROMOTE**" in report
    # wall seconds in the metrics, never in the versioned report (its DVC hash must repeat)
    assert metrics["cost"]["candidate"]["heldout_function"]["seconds_per_solved"] == \
        pytest.approx(3.6, abs=0.05)
    assert "seconds / solved" not in report and "wall-clock measurements" in report
    assert "gate_plots/pass_at_k.png" in report and "gate_plots/training_curves.png" in report
    assert (out / "gate_plots" / "pass_at_k.png").stat().st_size > 0
    assert (out / "gate_plots" / "training_curves.png").stat().st_size > 0
    by_hash = {v.tags["content_hash"]: v.version for v in versions(registry, "rlvr-policy")}
    assert aliases_of(registry, "rlvr-policy") == {"champion": str(by_hash[
        "sha256:000000000000cand"])}


@pytest.mark.parametrize("case", ["different_tasks", "different_seeds", "missing_champion",
                                  "malformed_params"])
def test_bad_input_exits_2_writes_nothing_and_moves_no_alias(tmp_path, registry, case, capsys):
    from rlvr.tracking.registry import aliases_of, history

    ev = tmp_path / "eval.parquet"
    good = _champ() + gk.rows("cand", {"heldout_function": gk.better_on_target})
    write_eval(ev, good)
    _stage(tmp_path / "first", _params_file(tmp_path), ev)   # a champion exists: cand
    before = (aliases_of(registry, "rlvr-policy"), history(registry, "rlvr-policy"))
    params = _params_file(tmp_path)
    bad = tmp_path / "bad.parquet"
    champ2 = gk.rows("cand2", {"heldout_function": gk.better_on_target})
    rows = {"different_tasks": gk.rows("champ", task_prefix="x") + champ2,
            "different_seeds": gk.rows("champ", seed_base=7) + champ2,
            "missing_champion": champ2,
            "malformed_params": good}[case]
    write_eval(bad, rows)
    if case == "malformed_params":
        params.write_text(json.dumps({"gate": {"candidate": "cand", "tolerance": "small"}}))
    else:
        params = _params_file(tmp_path, candidate="cand2")
    with pytest.raises(SystemExit) as exc:
        _stage(tmp_path / "second", params, bad)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert {"different_tasks": "different task sets", "different_seeds": "different sample seeds",
            "missing_champion": "no evaluation of checkpoint 'champ'",
            "malformed_params": "gate.tolerance"}[case] in err[0]
    assert not (tmp_path / "second" / "out").exists()
    assert (aliases_of(registry, "rlvr-policy"), history(registry, "rlvr-policy")) == before


def test_a_checkpoint_directory_changed_since_its_evaluation_is_refused(tmp_path, registry):
    from rlvr.engines.model_dir import weights_fingerprint

    dirs = {}
    for name in ("cand", "champ"):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text('{"model_type": "qwen2"}')
        (d / "tokenizer.json").write_text("{}")
        (d / "model.safetensors").write_bytes(name.encode() * 10)
        dirs[name] = d
    ev = tmp_path / "eval.parquet"
    write_eval(ev, gk.rows("champ", version=weights_fingerprint(dirs["champ"])) +
               gk.rows("cand", {"heldout_function": gk.better_on_target},
                       version=weights_fingerprint(dirs["cand"])))
    params = _params_file(tmp_path, candidate_dir=str(dirs["cand"]),
                          champion_dir=str(dirs["champ"]))
    out = _stage(tmp_path, params, ev)
    gate = json.loads((out / "gate.json").read_text())
    assert gate["candidate"]["content_hash"] == weights_fingerprint(dirs["cand"])
    (dirs["cand"] / "model.safetensors").write_bytes(b"retrained")
    with pytest.raises(SystemExit) as exc:
        _stage(tmp_path / "again", params, ev)
    assert exc.value.code == 2
    assert not (tmp_path / "again").exists()


def test_cli_gate_runs_on_two_evaluation_files(tmp_path, registry, capsys):
    from rlvr.cli import main

    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    write_eval(a, gk.rows("policy", {"heldout_function": lambda t: 0 if t < 20 else 2},
                          version="sha256:aaaaaaaaaaaaaaaa"))
    write_eval(b, gk.rows("policy", version="sha256:bbbbbbbbbbbbbbbb"))
    main(["gate", "--candidate-eval", str(a), "--champion-eval", str(b), "--candidate", "policy",
          "--champion", "policy", "--out", str(tmp_path / "g"),
          "--params", str(tmp_path / "none.yaml")])
    printed = json.loads(capsys.readouterr().out)
    assert printed["decision"] == "block" and "target_capability" in printed["blocking"]
    assert printed["registry"] == {}  # no --register: the registry is untouched
    gate = json.loads((tmp_path / "g" / "gate.json").read_text())
    assert gate["candidate"]["content_hash"] == "sha256:aaaaaaaaaaaaaaaa"
    with pytest.raises(SystemExit) as exc:
        main(["gate", "--candidate-eval", str(a), "--champion-eval", str(b),
              "--candidate", "policy", "--champion", "nobody", "--out", str(tmp_path / "h"),
              "--params", str(tmp_path / "none.yaml")])
    assert exc.value.code == 2
    assert not (tmp_path / "h").exists()


def test_cli_on_one_file_with_both_checkpoints_registers_and_reports_seconds(tmp_path, registry,
                                                                           capsys):
    from rlvr.artifacts.io import timings_path
    from rlvr.cli import main
    from rlvr.tracking.registry import aliases_of

    rows = _champ() + gk.rows("cand", {"heldout_function": gk.better_on_target})
    for r in rows:
        r.update(seconds=2.0, tool_seconds=0.5, gen_seconds=1.0)
    ev = tmp_path / "eval.parquet"
    write_eval(ev, rows, timings_path=timings_path(ev))
    main(["gate", "--candidate-eval", str(ev), "--candidate", "cand", "--champion", "champ",
          "--out", str(tmp_path / "g"), "--register", "--params", str(tmp_path / "none.yaml")])
    printed = json.loads(capsys.readouterr().out)
    assert printed["decision"] == "promote" and printed["registry"]["alias_moved"] is True
    assert aliases_of(registry, "rlvr-policy") == {"champion": printed["registry"][
        "candidate_version"]}
    report = (tmp_path / "g" / "gate.md").read_text()
    # 320 episodes of 2 s per tier over 160 (champion) / 180 (candidate) solved
    seconds = {line.split(" | ")[0][2:] + "/" + line.split(" | ")[1]: line.split(" | ")[-2]
               for line in report.splitlines() if "(candidate) |" in line or "(champion) |" in line}
    assert seconds["cand (candidate)/heldout_function"] == "3.6"
    assert seconds["champ (champion)/heldout_function"] == "4.0"
    gate = json.loads((tmp_path / "g" / "gate.json").read_text())
    assert "seconds" not in json.dumps(gate)  # no clock in gate.json


def test_pooled_runs_compare_but_are_not_registered(tmp_path, registry):
    from rlvr.gate.apply import decide_and_register, load_inputs

    runs = []
    for k in range(2):
        part = gk.rows("cand", {"heldout_function": gk.better_on_target},
                       version=f"sha256:{k:0>16}")
        runs += [dict(r, run=f"seed{k}") for r in part]
    champ = [dict(r, run="seed0") for r in _champ()] + [dict(r, run="seed1") for r in _champ()]
    ev = tmp_path / "eval.parquet"
    write_eval(ev, runs + champ)
    inputs = load_inputs(gk.params(), ev, ev)
    assert inputs.candidate_hash == "sha256:0000000000000000,sha256:0000000000000001"
    assert decide_and_register(gk.params(), inputs).decision == "promote"
    with pytest.raises(GateInputError, match="pooled runs"):
        decide_and_register(gk.params(), inputs, registry_client=registry)
