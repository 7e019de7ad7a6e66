"""The MLflow model registry as the gate's ledger: every candidate registered with its
content hash, the `champion` alias moves exactly on promotion and back on rollback, a
rejected version is marked for discard with its policy step (SPEC §8)."""
from __future__ import annotations

import json

import pytest

import gatekit as gk
from rlvr.gate.apply import GateInputs, decide_and_register
from rlvr.tracking.registry import (Checkpoint, RegistryError, aliases_of, apply_decision,
                                    champion, client, discarded, history, rollback, versions)

MODEL = "rlvr-policy"


@pytest.fixture
def reg(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'registry.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return client(uri)


def ck(name: str, step: int = 0) -> Checkpoint:
    return Checkpoint(name, f"sha256:{name:0>16}", f"/models/{name}", (f"sha256:{name:0>16}",),
                      (step,))


def _champion_hash(c) -> str:
    return champion(c, MODEL).tags["content_hash"]


def test_first_gate_run_makes_the_champion_the_baseline_and_moves_only_on_promote(reg):
    out = apply_decision(reg, MODEL, "block", ck("a", 7), ck("init"))
    assert out["alias_moved"] is False and out["discard"] is True
    assert _champion_hash(reg) == ck("init").content_hash
    out = apply_decision(reg, MODEL, "inconclusive", ck("b"), ck("init"))
    assert out["alias_moved"] is False and out["discard"] is False
    assert _champion_hash(reg) == ck("init").content_hash
    out = apply_decision(reg, MODEL, "promote", ck("c"), ck("init"))
    assert out["alias_moved"] is True
    assert _champion_hash(reg) == ck("c").content_hash
    assert [m["event"] for m in history(reg, MODEL)] == ["baseline", "promote"]
    tags = {v.tags["checkpoint"]: v.tags for v in versions(reg, MODEL)}
    assert tags["a"]["gate.decision"] == "block" and tags["a"]["discard"] == "true"
    assert tags["a"]["discard.policy_step"] == "7"
    assert tags["b"]["gate.decision"] == "inconclusive" and "discard" not in tags["b"]
    assert tags["c"]["content_hash"] == ck("c").content_hash
    a_version = next(str(v.version) for v in versions(reg, MODEL)
                     if v.tags["checkpoint"] == "a")
    assert discarded(reg, MODEL) == [{"version": a_version, "checkpoint": "a",
                                      "policy_version": ck("a").content_hash,
                                      "policy_step": "7"}]


def test_a_checkpoint_is_registered_once_and_a_rerun_changes_nothing(reg):
    first = apply_decision(reg, MODEL, "promote", ck("c"), ck("init"))
    again = apply_decision(reg, MODEL, "promote", ck("c"), ck("init"))
    assert again["already_applied"] is True and again["alias_moved"] is False
    assert again["candidate_version"] == first["candidate_version"]
    assert len(versions(reg, MODEL)) == 2
    assert len(history(reg, MODEL)) == 2


@pytest.mark.parametrize("decision", ["block", "promote", "inconclusive"])
def test_a_candidate_identical_to_the_champion_changes_nothing(reg, decision):
    """GRPO that accepted no group writes the SFT weights again: same content hash. Blocking
    it must not tag the champion's own version for discard (nor promotion move anything)."""
    apply_decision(reg, MODEL, "block", ck("a"), ck("sft"))
    before = {v.version: dict(v.tags) for v in versions(reg, MODEL)}
    twin = Checkpoint("grpo", ck("sft").content_hash, "/models/grpo",
                      ck("sft").policy_versions, (0,))
    out = apply_decision(reg, MODEL, decision, twin, ck("sft"))
    assert out["candidate_is_champion"] is True
    assert out["discard"] is False and out["alias_moved"] is False
    assert out["candidate_version"] == out["champion_version"] == out["champion_now"]
    assert {v.version: dict(v.tags) for v in versions(reg, MODEL)} == before
    assert [d["checkpoint"] for d in discarded(reg, MODEL)] == ["a"]
    assert [m["event"] for m in history(reg, MODEL)] == ["baseline"]


def test_a_gate_against_a_checkpoint_that_is_not_the_champion_is_refused(reg):
    apply_decision(reg, MODEL, "promote", ck("c"), ck("init"))
    before = (aliases_of(reg, MODEL), history(reg, MODEL), len(versions(reg, MODEL)))
    with pytest.raises(RegistryError, match="compared against"):
        apply_decision(reg, MODEL, "promote", ck("d"), ck("stale"))
    assert (aliases_of(reg, MODEL), history(reg, MODEL), len(versions(reg, MODEL))) == before


def test_rollback_walks_back_one_champion_at_a_time(reg):
    apply_decision(reg, MODEL, "promote", ck("c"), ck("init"))
    apply_decision(reg, MODEL, "promote", ck("d"), ck("c"))
    assert _champion_hash(reg) == ck("d").content_hash
    moved = rollback(reg, MODEL, reason="regression found in prod")
    assert _champion_hash(reg) == ck("c").content_hash
    assert history(reg, MODEL)[-1] == {"version": moved["to"], "event": "rollback",
                                       "reason": "regression found in prod"}
    rolled = next(v for v in versions(reg, MODEL) if v.version == int(moved["from"]))
    assert rolled.tags["rolled_back"] == "true"
    rollback(reg, MODEL)
    assert _champion_hash(reg) == ck("init").content_hash
    with pytest.raises(RegistryError, match="no previous"):
        rollback(reg, MODEL)
    assert _champion_hash(reg) == ck("init").content_hash
    # a promotion after rollbacks stacks on the champion in force
    apply_decision(reg, MODEL, "promote", ck("e"), ck("init"))
    rollback(reg, MODEL)
    assert _champion_hash(reg) == ck("init").content_hash


def test_rollback_without_a_champion_is_a_named_error(reg):
    with pytest.raises(RegistryError, match="no 'champion' alias"):
        rollback(reg, MODEL)


def _inputs(cand_rows, champ_rows):
    return GateInputs(cand_rows, champ_rows, "sha256:000000000000cand",
                      "sha256:00000000000champ", "c.parquet", "h.parquet", None, None, None)


def test_the_gate_moves_the_alias_exactly_on_promotion(reg):
    champ = gk.rows("champ")
    worse = gk.rows("cand", {"heldout_function": lambda t: 1 if t < 20 else 2}, step=12)
    blocked = decide_and_register(gk.params(), _inputs(worse, champ), registry_client=reg)
    assert blocked.decision == "block" and blocked.registry["alias_moved"] is False
    assert _champion_hash(reg) == "sha256:00000000000champ"
    gate = blocked.as_json()
    assert gate["discard"][0]["policy_steps"] == [12]
    assert gate["registry"]["discard"] is True
    better = gk.rows("cand", {"heldout_function": gk.better_on_target}, step=12)
    promoted = decide_and_register(gk.params(), _inputs(better, champ), registry_client=reg)
    assert promoted.decision == "promote" and promoted.registry["alias_moved"] is True
    assert _champion_hash(reg) == "sha256:000000000000cand"


def test_cli_rollback(reg, tmp_path, capsys):
    from rlvr.cli import main

    apply_decision(reg, MODEL, "promote", ck("c"), ck("init"))
    main(["gate", "rollback", "--reason", "manual", "--params", str(tmp_path / "none.yaml")])
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == MODEL and _champion_hash(reg) == ck("init").content_hash
    with pytest.raises(SystemExit) as exc:
        main(["gate", "rollback", "--params", str(tmp_path / "none.yaml")])
    assert exc.value.code == 2
    assert "no previous" in capsys.readouterr().err
