"""The DAG on a real-format model, on two tasks: the tiny Qwen3 (real Qwen tokenizer, Qwen3's
chat template, Hermes tool calls; `rlvr.engines.tiny_model`) through every stage's library
entry point in turn — init_policy (kind: path) -> rollout (scripted teacher, grammar
`tool_call.hermes`) -> verify (the real enclave) -> SFT on the verified successes -> GRPO
(two optimizer steps, informative groups forced by grpokit's `ForcedFix` in the policy's own
format) -> evaluate init / sft / grpo paired -> the gate's decision, recorded.

The model is random, so nothing here is about quality: each step checks that a
Hermes-speaking policy goes through the stage and comes out as the next stage's input (chat
card carried forward, weights moved, passports that rebuild, a gate decision written).
Budgets are tiny: the 151,669-row LM head is the cost of every sampled token."""
from __future__ import annotations

import json

import pytest
import torch

from agentkit import count_task, price_task
from grpokit import FIX_CALL, forced, small_params
from rlvr.agent import rollout as lib
from rlvr.agent.codecs import CHAT_CARD, load_codec
from rlvr.agent.episode import Budgets
from rlvr.agent.passport import (apply_verdicts, needs_verdict, read_trajectories,
                                 rebuild_check, write_trajectories)
from rlvr.agent.template_codec import TemplateCodec
from rlvr.agent.tools import parse_action
from rlvr.engines.base import Decoding
from rlvr.engines.model_dir import load_policy, weights_fingerprint
from rlvr.sandbox.params import SandboxParams

pytestmark = pytest.mark.usefixtures("one_torch_thread", "bwrap_sandbox")

GRAMMAR = "tool_call.hermes"
SANDBOX = SandboxParams(backend="bwrap", workers=1)
# What the random policy acts under (GRPO's and the evaluation's sampled turns): room for
# the forced 44-token Hermes edit, then a submit.
SMALL = Budgets(max_turns=2, max_new_tokens_per_turn=48, max_new_tokens_per_episode=96)
SAMPLED = Decoding(temperature=1.0, grammar=GRAMMAR)


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("RLVR_TRACKING", "off")
    monkeypatch.setenv("RLVR_PROGRESS", "0")


def _weights(model_dir) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in load_policy(model_dir).model.state_dict().items()}


def _moved(a, b) -> bool:
    wa, wb = _weights(a), _weights(b)
    assert set(wa) == set(wb)
    return any(not torch.equal(wa[k], wb[k]) for k in wa)


def _speaks_hermes(model_dir) -> None:
    assert (model_dir / CHAT_CARD).is_file()
    codec = load_codec(model_dir)
    assert isinstance(codec, TemplateCodec) and codec.format.name == "hermes"


# ---- the chain: each stage's output is the next one's input (module-scoped) ----------------
@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("byo-dag")


@pytest.fixture(scope="module")
def tasks():
    """agentkit's mini-count and shop-price through real curation (their F2P / P2P ids are
    placeholders until then), no held-out split: both are train tasks."""
    from rlvr.authoring.curation import CurationParams, curate_one
    from rlvr.enclave.core import Enclave
    from rlvr.tasks.splits import SplitParams

    params = CurationParams(reference_runs=1, max_mutants=0,
                            split=SplitParams(heldout_function_share=0.0))
    with Enclave(backend="bwrap", workers=1) as enclave:
        out = [curate_one(t, enclave, params) for t in (count_task(), price_task())]
    assert [t.split for t in out] == ["train", "train"]
    return out


@pytest.fixture(scope="module")
def policy_init(root):
    """1. The tiny Qwen3 imported by `init_policy(kind=path)`: models/policy-init."""
    from rlvr.engines.tiny_model import build_tiny_qwen
    from rlvr.train.policy_init import PolicyParams, init_policy

    src = build_tiny_qwen(root / "tiny-qwen3")
    out = root / "policy-init"
    metrics = init_policy(PolicyParams(kind="path", path=str(src)), out)
    return out, metrics


@pytest.fixture(scope="module")
def rollouts(tasks, policy_init, root):
    """2. The scripted teacher on the two tasks, G=2, decoding grammar `tool_call.hermes`."""
    init, _ = policy_init
    params = lib.RolloutParams(
        engine="scripted", model_dir=str(init), group_size=2, seed=5, workers=1,
        groups_per_wave=2, decoding=SAMPLED,
        budgets=Budgets(max_turns=8, max_new_tokens_per_turn=400,
                        max_new_tokens_per_episode=3000, max_context_tokens=16384))
    from rlvr.teachers.acting import open_engine

    rows = lib.roll_out(tasks, params, SANDBOX, root / "rollout-parts",
                        open_engine=open_engine)
    write_trajectories(root / "trajectories.parquet", rows)
    return rows


@pytest.fixture(scope="module")
def verified(tasks, rollouts, root):
    """3. The submitted diffs through the real enclave, the verdicts written back into the
    passports (what stage verify does with --trajectories)."""
    from rlvr.enclave.batch import VerifyParams, verify_patches, write_verdicts

    patches = lib.patch_rows(rollouts)
    verdicts = verify_patches(tasks, patches, VerifyParams(seed=5, consensus_runs=1), SANDBOX,
                              where="byo-dag")
    write_verdicts(root / "verdicts.parquet", verdicts)
    scored = apply_verdicts(rollouts, verdicts, where="byo-dag")
    write_trajectories(root / "trajectories_verified.parquet", scored)
    return patches, verdicts, read_trajectories(root / "trajectories_verified.parquet").to_pylist()


@pytest.fixture(scope="module")
def policy_sft(tasks, policy_init, verified, root):
    """4. SFT (two steps) on the verified successes -> models/policy-sft; the stage's
    parse-error probe (one torch episode, no grammar) runs at the end."""
    from rlvr.train.demos import select_demonstrations
    from rlvr.train.probe import parse_error_probe
    from rlvr.train.sft import train_sft
    from rlvr.train.sft_config import DemoParams, EarlyStopParams, SFTParams

    init, _ = policy_init
    _, _, scored = verified
    params = SFTParams(max_steps=2, batch_size=2, warmup_steps=0, learning_rate=3e-3,
                       eval_every=0, probe_tasks=1, demos=DemoParams(val_fraction=0.0),
                       early_stop=EarlyStopParams(patience=0, parse_error_stop=None))
    selection = select_demonstrations(scored, params)
    probe = parse_error_probe(tasks[:1], lib.RolloutParams(
        model_dir=str(init), seed=5, workers=1, budgets=SMALL), SANDBOX)
    logged: list = []
    out = root / "policy-sft"
    result = train_sft(init, selection.train, selection.val, params, out, on_eval=probe,
                       log=lambda step, m: logged.append((step, m)))
    return out, selection, result, logged


@pytest.fixture(scope="module")
def policy_grpo(tasks, policy_sft, root):
    """5. GRPO from policy-sft: two loop steps of one group each on the count task, sample 0
    of every group forced to the correct Hermes edit (then submit), verified in the real
    enclave; sampling and scoring under `tool_call.hermes`."""
    from rlvr.enclave.batch import VerifyParams, enclave_verifier
    from rlvr.train.grpo import train_grpo

    sft, *_ = policy_sft
    params = small_params(steps=2, groups_per_step=1, tasks_per_draw=1, max_draws=2)
    rollout = lib.RolloutParams(workers=1, budgets=SMALL, decoding=SAMPLED)
    logged: list = []
    with enclave_verifier(VerifyParams(consensus_runs=1), SANDBOX, where="byo-dag") \
            as (verifier, _):
        result = train_grpo(sft, tasks[:1], params, rollout, SANDBOX, root / "policy-grpo",
                            root / "grpo-work", verifier=verifier,
                            wrap_engine=forced(load_codec(sft)),
                            log=lambda step, m: logged.append(m))
    return root / "policy-grpo", result, logged


@pytest.fixture(scope="module")
def evaluation(tasks, policy_init, policy_sft, policy_grpo, root):
    """6a. init / sft / grpo evaluated paired on the two tasks (tier train), grammar
    `tool_call.hermes`, written as eval.parquet + its timings."""
    from rlvr.artifacts.io import timings_path
    from rlvr.evaluate.params import EvaluateParams, TierSizes
    from rlvr.evaluate.report import build_report, check_pairing, write_eval
    from rlvr.evaluate.run import evaluate_checkpoints
    from rlvr.evaluate.sets import build_sets

    ckpts = {"init": str(policy_init[0]), "sft": str(policy_sft[0]),
             "grpo": str(policy_grpo[0])}
    params = EvaluateParams(checkpoints=ckpts, samples_per_task=2, seed=5, workers=1,
                            groups_per_wave=2, consensus_runs=1, decoding=SAMPLED,
                            budgets=SMALL, bootstrap=200)
    sets = build_sets(tasks, TierSizes(), params.seed)
    rows = evaluate_checkpoints(ckpts, sets, params, SANDBOX, parts_root=root / "eval-parts")
    path = root / "eval.parquet"
    write_eval(path, rows, timings_path=timings_path(path))
    report = build_report(rows, checkpoints=list(ckpts), n_boot=200)
    return path, rows, report, check_pairing(rows)


# ---- the steps ---------------------------------------------------------------------------------
def test_1_policy_init_imports_the_qwen_model_with_its_chat_card(policy_init):
    init, metrics = policy_init
    assert metrics["tool_call_format"] == "hermes" and metrics["vocab_size"] == 151669
    _speaks_hermes(init)


def test_2_scripted_rollouts_are_hermes_calls_whose_passports_rebuild(tasks, policy_init,
                                                                     rollouts):
    init, _ = policy_init
    codec = load_codec(init)
    assert len(rollouts) == 4  # 2 tasks x G=2
    for row in rollouts:
        assert rebuild_check(row) == []
        assert row["env_version"].endswith(f"+chat.hermes.{codec.template_hash}")
        assert json.loads(row["decoding"])["grammar"] == GRAMMAR
        for turn in row["turns"]:
            assert turn["action_valid"], turn
            assert parse_action(turn["action_text"], "hermes").valid, turn["action_text"]
            assert "<tool_call>\n{\"name\": " in turn["action_text"]
    assert {r["task_id"] for r in rollouts if r["stop_reason"] == "submitted"
            and r["patch_ok"]} == {t.task_id for t in tasks}


def test_3_the_enclave_verifies_the_submitted_diffs(rollouts, verified):
    patches, verdicts, scored = verified
    assert len(verdicts) == len(patches) == sum(needs_verdict(r) for r in rollouts) > 0
    assert {v["reason"] for v in verdicts} <= {"none", "tests_failed"}  # no infra error
    assert any(v["success"] for v in verdicts)
    by_id = {v["candidate_id"]: v for v in verdicts}
    for row in scored:
        assert rebuild_check(row) == []
        if row["trajectory_id"] in by_id:
            assert row["reward_outcome"] == (1.0 if by_id[row["trajectory_id"]]["success"]
                                             else 0.0)
            assert row["verifier_version"] == by_id[row["trajectory_id"]]["verifier_version"]


def test_4_sft_on_the_verified_successes_keeps_the_chat_card_and_moves_the_weights(
        policy_init, verified, policy_sft):
    init, _ = policy_init
    out, selection, result, logged = policy_sft
    _, _, scored = verified
    successes = {r["trajectory_id"] for r in scored if r["reward_outcome"] == 1.0}
    assert selection.train and {d["trajectory_id"] for d in selection.train} <= successes
    assert result.steps == 2 and len([m for _, m in logged if "train/loss" in m]) == 2
    assert 0.0 <= result.evals[-1]["eval/parse_error_rate"] <= 1.0  # the probe rolled it out
    _speaks_hermes(out)
    assert load_codec(out).template_hash == load_codec(init).template_hash
    assert weights_fingerprint(out) != weights_fingerprint(init)
    assert _moved(init, out)


def test_5_grpo_takes_two_steps_from_sft_on_forced_hermes_fixes(policy_sft, policy_grpo):
    sft, *_ = policy_sft
    out, result, logged = policy_grpo
    codec = load_codec(sft)
    fix = codec.format.write(*FIX_CALL)
    assert [g["status"] for g in result.ledger] == ["accepted", "accepted"]
    for g in result.ledger:  # sample 0 forced to the fix (verified), sample 1 the policy's own
        assert g["rewards"][0] > 0.9 and g["rewards"][1] < 0.5
    assert result.policy_step == 2 and result.steps == 2
    for m in logged:  # scored under the grammar it was sampled under
        assert m["train/first_pass_ratio_dev"] == 0.0
        assert m["train/mismatch/logprob_abs_diff_max"] < 1e-3
    card = json.loads((out / "training.json").read_text())
    assert card["policy_step"] == 2
    assert card["passport"]["decoding"]["grammar"] == GRAMMAR
    _speaks_hermes(out)
    assert parse_action(fix, "hermes").valid
    assert _moved(sft, out)


def test_6_init_sft_grpo_are_evaluated_paired_and_the_gate_decides(
        policy_init, policy_sft, policy_grpo, evaluation, root, monkeypatch):
    from rlvr.tracking.registry import client, versions
    from stages.gate import main as gate_main

    path, rows, report, pairing = evaluation
    assert len(rows) == 3 * 2 * 2  # checkpoints x tasks x samples
    assert pairing == {"train": 2 * 2}  # tasks x samples, identical for every checkpoint
    assert set(report["paired"]) == {"sft_vs_init", "grpo_vs_init", "grpo_vs_sft"}
    for name, d in (("init", policy_init[0]), ("sft", policy_sft[0]),
                    ("grpo", policy_grpo[0])):
        mine = [r for r in rows if r["checkpoint"] == name]
        assert {r["policy_version"] for r in mine} == {weights_fingerprint(d)}
        for r in mine:
            assert r["infra_error"] == (r["success"] is None)
    keys = {name: sorted((r["task_id"], r["sample_index"], r["seed"], r["trajectory_id"])
                         for r in rows if r["checkpoint"] == name)
            for name in ("init", "sft", "grpo")}
    assert keys["init"] == keys["sft"] == keys["grpo"]

    # 6b. the gate, grpo (candidate) vs sft (champion), through the stage entry
    uri = f"sqlite:///{root / 'registry.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    params = root / "params.yaml"
    params.write_text(json.dumps({"gate": {
        "candidate": "grpo", "champion": "sft", "candidate_dir": str(policy_grpo[0]),
        "champion_dir": str(policy_sft[0]), "target_tier": "train", "other_tiers": [],
        "bootstrap": 200}}))
    out = root / "gate"
    gate_main(["--params", str(params), "--eval", str(path),
               "--training-metrics", str(policy_grpo[0] / "training.json"),
               "--out", str(out / "gate.json"), "--report", str(out / "gate.md"),
               "--metrics", str(out / "metrics.json")])
    gate = json.loads((out / "gate.json").read_text())
    assert gate["decision"] in ("promote", "block", "inconclusive")
    assert gate["candidate"]["content_hash"] == weights_fingerprint(policy_grpo[0])
    assert gate["champion"]["content_hash"] == weights_fingerprint(policy_sft[0])
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["decision"] == gate["decision"]
    assert gate["registry"]["alias_moved"] == (gate["decision"] == "promote")
    registered = {v.tags["checkpoint"]: v.tags for v in versions(client(uri), "rlvr-policy")}
    assert registered["grpo"]["gate.decision"] == gate["decision"]
    assert registered["grpo"]["content_hash"] == weights_fingerprint(policy_grpo[0])
    assert (out / "gate.md").read_text().startswith("# Release gate: **")
