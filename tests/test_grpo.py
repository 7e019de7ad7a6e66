"""The online GRPO loop (SPEC §7) on agentkit's tiny tasks and tiny real policy: real
rollouts in the bwrap policy sandbox, the update through rlvr/rl, checkpoints and resume,
and one step through the real enclave."""
from __future__ import annotations

import dataclasses
import functools
import json

import pytest
import torch

from agentkit import count_task, record_grads, synthetic_groups, take_task, tiny_policy_dir
from grpokit import (FORCED_BUDGETS, SANDBOX, ForcedFix, fake_verifier, forced, small_params,
                     small_rollout)
from rlvr.agent.tools import parse_action
from rlvr.agent.transcript import ChatCodec
from rlvr.engines.base import Decoding, SamplingParams
from rlvr.engines.model_dir import load_policy
from rlvr.errors import ConfigError
from rlvr.train import grpo, grpo_draws, pathology
from rlvr.train.backend import BackendParams, build_backend
from rlvr.train.curriculum import Curriculum
from rlvr.train.grpo_config import load_grpo_params, parse_grpo_params
from rlvr.train.grpo_state import LoopState, versions_behind
from rlvr.train.grpo_update import update_policy

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("RLVR_PROGRESS", "0")


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


class NeverCalled:
    """A verifier for runs in which nothing may reach it."""

    def __call__(self, tasks, patches):
        raise AssertionError(f"verifier called with {len(patches)} patches")


def _run(tmp_path, params, *, tasks=None, verifier=fake_verifier, rollout=None, name="run",
         wrap=None):
    return grpo.train_grpo(tiny_policy_dir(), tasks or [count_task()], params,
                           rollout or small_rollout(), SANDBOX, tmp_path / f"{name}-out",
                           tmp_path / f"{name}-work", verifier=verifier, wrap_engine=wrap)


# ---- dynamic sampling -------------------------------------------------------------------------
def test_identical_reward_groups_give_no_update_and_the_draw_cap_holds(tmp_path, bwrap_sandbox):
    """The untrained tiny policy never writes a valid call: every rollout ends at the
    invalid-action limit with reward 0, every group is uninformative. They are all dropped
    and logged, exactly `max_draws` draws are made, and the weights do not move."""
    params = small_params(steps=2, max_draws=3, tasks_per_draw=2, groups_per_step=2)
    logged = []
    before = _weights(load_policy(tiny_policy_dir()).model)
    result = grpo.train_grpo(tiny_policy_dir(), [count_task(), take_task()], params,
                             small_rollout(), SANDBOX, tmp_path / "out", tmp_path / "work",
                             verifier=NeverCalled(), log=lambda s, m: logged.append((s, m)))
    assert [g["status"] for g in result.ledger] == ["identical_rewards"] * 12  # 2 steps x 3 x 2
    assert [g["draw"] for g in result.ledger] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert all(g["rewards"] == [0.0, 0.0] for g in result.ledger)
    assert result.policy_step == 0
    after = _weights(load_policy(tmp_path / "out").model)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert [m["groups/identical_rewards"] for _, m in logged] == [6.0, 6.0]
    assert [m["train/optimizer_steps"] for _, m in logged] == [0.0, 0.0]
    assert all(m["train/informative_fraction"] == 0.0 for _, m in logged)
    card = json.loads((tmp_path / "out" / "training.json").read_text())
    assert card["groups"]["by_status"] == {"identical_rewards": 12}
    assert card["policy_step"] == 0 and card["passport"]["staleness_bound"] == 0


def test_sampling_stops_once_the_target_of_informative_groups_is_met(tmp_path, bwrap_sandbox):
    codec = ChatCodec.from_model_dir(tiny_policy_dir())
    params = small_params(groups_per_step=1, tasks_per_draw=1, max_draws=4)
    result = _run(tmp_path, params, rollout=small_rollout(**FORCED_BUDGETS), wrap=forced(codec))
    assert [g["status"] for g in result.ledger] == ["accepted"]  # one draw was enough
    assert result.policy_step == 1


def test_a_grammar_constrained_step_trains_on_replayed_masks(tmp_path, bwrap_sandbox):
    """Rollouts sampled under `decoding.grammar` are scored under the same masks, replayed
    from their tokens: the first pass is still exactly π_old, and the trainer's logprobs
    match the sampler's (a missing mask would renormalise over the whole vocabulary)."""
    codec = ChatCodec.from_model_dir(tiny_policy_dir())
    rollout = dataclasses.replace(small_rollout(**FORCED_BUDGETS),
                                  decoding=Decoding(temperature=1.0, grammar="tool_call"))
    params = small_params(groups_per_step=1, tasks_per_draw=1, max_draws=4)
    own = []  # the policy's own (not forced) turns

    class Watched(ForcedFix):
        def generate(self, prompts, params, *, seed, sample_seeds=None):
            out = super().generate(prompts, params, seed=seed, sample_seeds=sample_seeds)
            own.extend(s for s in out if s.token_ids not in (self.fix, self.submit))
            return out

    logged = []
    result = grpo.train_grpo(tiny_policy_dir(), [count_task()], params, rollout, SANDBOX,
                             tmp_path / "out", tmp_path / "work", verifier=fake_verifier,
                             wrap_engine=functools.partial(Watched, codec=codec),
                             log=lambda s, m: logged.append(m))
    assert [g["status"] for g in result.ledger] == ["accepted"]
    assert result.policy_step == 1
    m = logged[0]
    assert m["train/first_pass_ratio_dev"] == 0.0
    assert m["train/mismatch/logprob_abs_diff_max"] < 1e-3
    assert own  # every turn the policy ended itself parses (the others hit the token budget)
    for s in own:
        assert s.finish_reason == "length" or parse_action(codec.decode(s.token_ids[:-1])).valid


# ---- the update --------------------------------------------------------------------------------
def _update(params, model=None, groups=None, grads=None):
    """One `update_policy`; `grads` (a list) receives each optimizer step's gradients."""
    model = model or load_policy(tiny_policy_dir()).model
    model.train()
    groups = groups or synthetic_groups(model)
    backend = build_backend(model, BackendParams.of(params))
    if grads is not None:
        record_grads(model, backend, grads)
    out = update_policy(model, backend, groups, params, SamplingParams(), None, 0.0, 0)
    return model, out


def test_the_ratio_is_exactly_one_on_the_first_pass(tmp_path):
    params = small_params(epochs=2, learning_rate=5e-2)
    model, out = _update(params)
    assert out["train/first_pass_ratio_dev"] == 0.0        # bit for bit, every token
    assert out["train/optimizer_steps"] == 2.0
    # the second epoch's ratio moved (the check is not vacuous), and the behaviour
    # logprobs (not the ratio's denominator) fed the truncated IS weights
    assert out["train/ratio_max"] > 1.0 or out["train/ratio_min"] < 1.0
    assert out["train/tis_weight_mean"] != pytest.approx(1.0)


@pytest.mark.parametrize("aggregation", ["constant", "token_mean", "seq_mean", "turn_mean"])
def test_the_update_does_not_depend_on_the_micro_batch_layout(aggregation):
    def gradient(micro_tokens):
        params = small_params(micro_batch_tokens=micro_tokens,
                              loss={"loss_aggregation": aggregation})
        grads: list = []
        _update(params, grads=grads)
        (g,) = grads
        return g

    whole, pieces = gradient(100_000), gradient(40)   # one micro-batch vs one per sequence
    assert set(whole) == set(pieces)
    for k in whole:
        torch.testing.assert_close(whole[k], pieces[k], atol=1e-7, rtol=1e-4)
    assert any(v.abs().max() > 0 for v in whole.values())


def test_an_all_equal_group_contributes_exactly_no_gradient():
    model = load_policy(tiny_policy_dir()).model
    groups = synthetic_groups(model)
    for g in groups:
        g["rewards"] = [0.5, 0.5]
    before = _weights(model)
    params = small_params(grad_clip=0.0, weight_decay=0.0)
    model, out = _update(params, model, groups)
    assert out["train/grad_norm"] == 0.0
    assert all(torch.equal(before[k], model.state_dict()[k]) for k in before)



def test_the_deepspeed_backend_gives_the_torch_update():
    """The SFT trainer's backends are reused: DeepSpeed (ZeRO 0, world size 1, gloo) steps
    the same AdamW to the same weights."""
    weights = {}
    for backend in ("torch", "deepspeed"):
        model, out = _update(small_params(backend=backend, epochs=2))
        assert out["train/first_pass_ratio_dev"] == 0.0
        weights[backend] = _weights(model)
    for k in weights["torch"]:
        torch.testing.assert_close(weights["torch"][k], weights["deepspeed"][k])

# ---- checkpoints and resumption ---------------------------------------------------------------
def test_a_killed_run_resumes_to_the_same_groups_and_weights(tmp_path, bwrap_sandbox):
    codec = ChatCodec.from_model_dir(tiny_policy_dir())
    tasks = [count_task(), take_task()]
    params = small_params(steps=3, groups_per_step=4, tasks_per_draw=2, max_draws=2)
    rollout = small_rollout(**FORCED_BUDGETS)
    whole = _run(tmp_path, params, tasks=tasks, rollout=rollout, name="whole",
                 wrap=forced(codec))
    assert whole.policy_step >= 2                # informative groups were trained on
    # a run killed when step 2's second draw starts (2 groups per draw, 2 draws per step:
    # the 7th group; the first draw of step 2 is on disk as rollout shards)
    wrappers = []

    def killing(engine):
        wrappers.append(ForcedFix(engine, codec, kill_at_start=6 if not wrappers else None))
        return wrappers[-1]

    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, params, tasks=tasks, rollout=rollout, name="killed", wrap=killing)
    ckpts = sorted((tmp_path / "killed-work").glob("*/checkpoints/step-*"))
    assert [c.name for c in ckpts] == ["step-000001"]
    resumed = _run(tmp_path, params, tasks=tasks, rollout=rollout, name="killed", wrap=killing)
    assert resumed.resumed_from == 1
    key = lambda g: (g["step"], g["draw"], g["group_id"], g["status"], g["rewards"],  # noqa: E731
                     tuple(g["trajectory_ids"]))
    assert [key(g) for g in resumed.ledger] == [key(g) for g in whole.ledger]
    assert len({g["group_id"] for g in resumed.ledger}) == len(resumed.ledger)  # no duplicate
    assert resumed.policy_step == whole.policy_step
    assert resumed.policy_version == whole.policy_version
    a, b = whole.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert resumed.curves == whole.curves
    # the resumed run generated step 2's second draw and step 3's two (2 groups each);
    # step 2's first draw came back from its rollout shards, not from the engine
    assert wrappers[1].starts == 2 + 4
    # the checkpoint is an HF directory with the passport and policy_step
    card = json.loads((ckpts[0].parent / "step-000003" / "training.json").read_text())
    assert card["policy_step"] == whole.policy_step
    assert card["passport"]["advantage_method"] == "grpo"
    assert (ckpts[0].parent / "step-000003" / "model.safetensors").is_file()



def test_a_longer_run_continues_a_shorter_one_and_a_shorter_one_reproduces(tmp_path,
                                                                          bwrap_sandbox):
    """`steps` is not part of the run key: 2 then 3 steps continue from step 2; asking for
    1 step afterwards starts afresh (no checkpoint of <= 1 step is kept) and gives the
    1-step run's weights, not the 3-step ones."""
    codec = ChatCodec.from_model_dir(tiny_policy_dir())
    rollout = small_rollout(**FORCED_BUDGETS)
    one = _run(tmp_path, small_params(steps=1), rollout=rollout, name="one", wrap=forced(codec))
    _run(tmp_path, small_params(steps=2), rollout=rollout, name="grow", wrap=forced(codec))
    three = _run(tmp_path, small_params(steps=3), rollout=rollout, name="grow", wrap=forced(codec))
    assert three.resumed_from == 2 and three.steps == 3
    back = _run(tmp_path, small_params(steps=1), rollout=rollout, name="grow", wrap=forced(codec))
    assert back.resumed_from == 0 and back.steps == 1
    assert back.policy_version == one.policy_version != three.policy_version
    assert [c.name for c in sorted((tmp_path / "grow-work").glob("*/checkpoints/*"))] == [
        "step-000001"]

def test_the_model_card_is_what_the_gate_reads(tmp_path, bwrap_sandbox):
    from rlvr.gate.inputs import read_training_metrics

    codec = ChatCodec.from_model_dir(tiny_policy_dir())
    result = _run(tmp_path, small_params(steps=2), rollout=small_rollout(**FORCED_BUDGETS),
                  wrap=forced(codec))
    tm = read_training_metrics(tmp_path / "run-out")
    assert [s for s, _ in tm.series("train/reward")] == [1, 2]
    for key in ("train/entropy", "train/length_mean", "train/loss_mean"):
        assert len(tm.series(key)) == 2, key
    assert tm.flags == result.flags and set(tm.flags) == set(pathology.FLAGS)
    assert not any(k.startswith(("time/", "memory/")) for c in tm.curves for k in c)



# ---- async: bounded queue and staleness admission --------------------------------------------
def test_admission_by_staleness():
    p = small_params(max_staleness=1, groups_per_step=1)
    assert grpo_draws.admit([1.0, 0.0], 1, 0, p) == "accepted"
    assert grpo_draws.admit([1.0, 0.0], 2, 0, p) == "stale"
    assert grpo_draws.admit([1.0, 0.0], 0, 1, p) == "surplus"
    assert grpo_draws.admit([0.0, 0.0], 5, 0, p) == "identical_rewards"   # no signal, stale or not
    assert grpo_draws.admit(None, 0, 0, p) == "infra_error"


def test_stale_groups_are_dropped_and_logged_with_their_difficulty():
    params = small_params(max_staleness=1, groups_per_step=2, tasks_per_draw=2, max_draws=1)
    cur = Curriculum(["a", "b"], params.curriculum, 2, 0)

    def row(task, i, reward, step):
        return {"group_id": f"{task}@s0", "task_id": task, "trajectory_id": f"{task}#{i}",
                "reward": reward, "reward_outcome": float(reward >= 1), "policy_step": step,
                "n_trainable_tokens": 10}

    draw = grpo_draws.Draw(0, ["a", "b"], {"a": "hard", "b": "band"}, {"a": 0.0, "b": 0.5},
                           [row("a", 0, 1.0, 1), row("a", 1, 0.0, 1),  # Δv = 3 - 1 = 2: stale
                            row("b", 0, 1.0, 2), row("b", 1, 0.0, 2)],  # Δv = 1: admitted
                           {"time/rollout_s": 0.0, "time/verify_s": 0.0, "time/generate_s": 0.0})
    state = LoopState(policy_step=3, published=[1, 2, 3])   # one optimizer step per version
    groups, _ = grpo_draws.collect_groups(4, state, cur, lambda i: draw, params)
    assert [(g["task_id"], g["status"], g["staleness"], g["band"]) for g in groups] == [
        ("a", "stale", 2, "hard"), ("b", "accepted", 1, "band")]
    assert [g["status"] for g in state.ledger] == ["stale", "accepted"]
    assert state.draws == 1
    assert cur.stats["a"].count == 2          # a stale group's outcomes still inform p̂


def test_staleness_counts_policy_versions_not_optimizer_steps():
    """SPEC §7 Δv is in policy versions: with epochs 2 x mini_batches 2 every update is 4
    optimizer steps but one version, so `max_staleness: 1` admits a draw sampled by the
    weights one update behind and drops one two updates behind."""
    params = small_params(max_staleness=1, epochs=2, mini_batches=2, groups_per_step=2,
                     tasks_per_draw=3, max_draws=1)
    cur = Curriculum(["a", "b", "c"], params.curriculum, 2, 0)
    state = LoopState(policy_step=8, published=[4, 8])   # versions: 0 (base), 4, 8

    def row(task, i, step):
        return {"group_id": f"{task}@s0", "task_id": task, "trajectory_id": f"{task}#{i}",
                "reward": float(i == 0), "reward_outcome": float(i == 0), "policy_step": step,
                "n_trainable_tokens": 10}

    rows = [row("a", i, 8) for i in range(2)] + [row("b", i, 4) for i in range(2)] + [
        row("c", i, 0) for i in range(2)]
    draw = grpo_draws.Draw(0, ["a", "b", "c"], dict.fromkeys("abc", "band"),
                           dict.fromkeys("abc", 0.5), rows,
                           {"time/rollout_s": 0.0, "time/verify_s": 0.0, "time/generate_s": 0.0})
    groups, _ = grpo_draws.collect_groups(3, state, cur, lambda i: draw, params)
    assert [(g["task_id"], g["staleness"], g["status"]) for g in groups] == [
        ("a", 0, "accepted"), ("b", 1, "accepted"), ("c", 2, "stale")]
    assert [versions_behind(state, k) for k in (0, 3, 4, 7, 8)] == [2, 2, 1, 1, 0]


def test_async_mode_trains_from_a_bounded_queue(tmp_path, bwrap_sandbox):
    codec = ChatCodec.from_model_dir(tiny_policy_dir())
    # queue of 1 + one draw in flight: a draw starts only once the one two before it was
    # taken, so (two informative groups per draw, one draw per step) Δv <= 2 = the bound
    params = small_params(steps=4, max_staleness=2, queue_size=1, groups_per_step=2,
                     tasks_per_draw=2, max_draws=2)
    logged = []
    result = grpo.train_grpo(tiny_policy_dir(), [count_task(), take_task()], params,
                             small_rollout(**FORCED_BUDGETS), SANDBOX, tmp_path / "out",
                             tmp_path / "work", verifier=fake_verifier,
                             wrap_engine=forced(codec), log=lambda s, m: logged.append(m))
    draws = [g["draw"] for g in result.ledger]
    assert draws == sorted(draws) and len(set(g["group_id"] for g in result.ledger)) == len(draws)
    assert all(g["staleness"] <= 2 for g in result.ledger if g["status"] == "accepted")
    assert result.policy_step >= 2
    # new weights reached the producer: later groups were sampled by updated policies
    assert max(g["policy_step"] for g in result.ledger) >= 1
    assert all("groups/stale_hard" in m and "train/staleness_accepted_max" in m for m in logged)
    card = json.loads((tmp_path / "out" / "training.json").read_text())
    assert card["passport"]["staleness_bound"] == 2
    assert card["passport"]["mode"].startswith("async")

# ---- params ----------------------------------------------------------------------------------
@pytest.mark.parametrize("value, key", [
    ({"groups_per_step": 0}, "grpo.groups_per_step"),
    ({"mini_batches": 3, "groups_per_step": 2}, "grpo.mini_batches"),
    ({"split": "heldout"}, "grpo.split"),
    ({"loss": {"eps_low": 0.3, "eps_high": 0.2}}, "grpo.loss.eps_high"),
    ({"loss": {"loss_aggregation": "mean"}}, "grpo.loss.loss_aggregation"),
    ({"curriculum": {"hard_share": 0.0}}, "grpo.curriculum.hard_share"),
    ({"overlong": {"mode": "threshold", "gamma": 0.01, "t_budget": 10, "t_max": 20}},
     "grpo.overlong.gamma"),
    ({"zero_stage": 1}, "grpo.zero_stage"),
    ({"backend": "deepspeed", "zero_stage": 3, "lora": {"enabled": True}}, "grpo.zero_stage"),
    ({"max_staleness": -1}, "grpo.max_staleness"),
    ({"queue_size": 0}, "grpo.queue_size"),
    ({"learning_rat": 1.0}, "grpo.learning_rat"),
])
def test_grpo_params_name_the_bad_key(value, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        parse_grpo_params(value)


def test_the_repo_params_file_parses():
    p = load_grpo_params("params.yaml")
    assert p.passport()["loss_aggregation"] == p.loss.loss_aggregation


# ---- the real enclave ------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _curated_count():
    from rlvr.enclave.core import Enclave
    from rlvr.authoring.curation import CurationParams, curate_one
    from rlvr.tasks.splits import SplitParams

    params = CurationParams(reference_runs=1, max_mutants=0,
                            split=SplitParams(heldout_families=["shop"],
                                              heldout_function_share=0.0))
    with Enclave(backend="bwrap", workers=1) as enclave:
        return curate_one(count_task(), enclave, params)


def test_a_grpo_step_through_the_real_enclave(tmp_path, bwrap_sandbox):
    """Sample 0 of the group submits the correct edit, sample 1 is the policy's own
    attempt: the enclave passes the fix (reward ~1), the group is informative, one update."""
    from rlvr.enclave.batch import VerifyParams, verify_patches
    from rlvr.enclave.core import Enclave

    task = _curated_count()
    codec = ChatCodec.from_model_dir(tiny_policy_dir())
    params = small_params(groups_per_step=1, tasks_per_draw=1, max_draws=1)
    calls = []
    before = _weights(load_policy(tiny_policy_dir()).model)
    with Enclave(backend="bwrap", workers=1, consensus_runs=1) as enclave:
        def verifier(tasks, patches):
            calls.append(len(patches))
            return verify_patches(tasks, patches, VerifyParams(consensus_runs=1), SANDBOX,
                                  enclave=enclave, where="test")

        logged = []
        result = grpo.train_grpo(tiny_policy_dir(), [task], params, small_rollout(**FORCED_BUDGETS),
                                 SANDBOX, tmp_path / "out", tmp_path / "work",
                                 verifier=verifier, wrap_engine=forced(codec),
                                 log=lambda s, m: logged.append(m))
    assert calls == [1]                                     # only the submitted diff crossed
    (group,) = result.ledger
    assert group["status"] == "accepted"
    fixed, other = group["rewards"]
    assert fixed == pytest.approx(1.0, abs=0.06) and fixed > 0.9   # 1 + λ·fmt − α·len
    assert other == 0.0
    assert result.policy_step == 1
    after = result.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    m = logged[0]
    assert m["train/pass_at_1"] == 0.5 and m["train/pass_at_k"] == 1.0
    assert m["train/first_pass_ratio_dev"] == 0.0
    assert m["train/mismatch/logprob_abs_diff_max"] < 1e-3   # engine vs trainer, measured
