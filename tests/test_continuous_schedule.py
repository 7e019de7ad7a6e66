"""The collector's continuous schedule (`ScheduleParams.mode = "continuous"`): episodes join
and leave one running decode per wave. Its rollouts are those of the cohort schedule (same
ids, actions, observations and rewards; logprobs to float rounding), do not depend on the
tool pool's threads, and are the same run to run; a wrong setting is refused by name.

The policy answers `run_tests` every turn (`agentkit.acting_policy_dir`) under the
`tool_call` grammar, so every turn waits on a real sandboxed pytest run."""
from __future__ import annotations

import pytest

from agentkit import ReplayEngine, acting_policy_dir, count_task, price_task, take_task
from rlvr.agent.collector import Collector, ScheduleParams
from rlvr.agent.episode import Budgets, Decoding, EpisodeConfig
from rlvr.agent.passport import deterministic_view, passport_row, rollout_differences
from rlvr.agent.rollout import load_params
from rlvr.agent.transcript import ChatCodec
from rlvr.engines.torch_engine import TorchEngine
from rlvr.errors import ConfigError


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def engine():
    return TorchEngine(acting_policy_dir())


def collect(engine, sandbox, schedule: ScheduleParams, *, workers: int = 2) -> list[dict]:
    codec = ChatCodec.from_model_dir(acting_policy_dir())
    cfg = EpisodeConfig(codec=codec, sandbox=sandbox, run_seed=3,
                        decoding=Decoding(grammar="tool_call"),
                        budgets=Budgets(max_turns=4, max_new_tokens_per_turn=64,
                                        max_new_tokens_per_episode=400))
    rows: list[dict] = []
    Collector(engine, cfg, group_size=2, workers=workers, groups_per_wave=3,
              schedule=schedule).run([count_task("a"), price_task("b"), take_task("c")],
                                     on_group=lambda g: rows.extend(map(passport_row, g.episodes)))
    return sorted(deterministic_view(rows), key=lambda r: r["trajectory_id"])


def test_continuous_rollouts_are_the_cohort_schedules(engine, bwrap_sandbox):
    cohorts = collect(engine, bwrap_sandbox, ScheduleParams())
    assert all(r["n_turns"] == 4 and r["stop_reason"] == "max_turns" for r in cohorts)
    assert all(t["tool_name"] == "run_tests" for r in cohorts for t in r["turns"])
    for schedule in (ScheduleParams(mode="continuous", join_lag_steps=0),
                     ScheduleParams(mode="continuous", join_lag_steps=8, max_slots=3)):
        assert rollout_differences(cohorts, collect(engine, bwrap_sandbox, schedule)) == []


def test_continuous_rollouts_do_not_depend_on_threads(engine, bwrap_sandbox):
    schedule = ScheduleParams(mode="continuous", join_lag_steps=2, max_slots=4)
    one = collect(engine, bwrap_sandbox, schedule, workers=1)
    assert collect(engine, bwrap_sandbox, schedule, workers=3) == one  # bit for bit


def test_a_wrong_schedule_is_refused_by_name(tmp_path):
    codec = ChatCodec.from_model_dir(acting_policy_dir())
    with pytest.raises(ValueError, match="cannot decode continuously"):
        Collector(ReplayEngine(codec, []), EpisodeConfig(codec=codec), group_size=2,
                  schedule=ScheduleParams(mode="continuous"))
    with pytest.raises(ValueError, match="schedule.join_lag_steps"):
        ScheduleParams(join_lag_steps=-1)
    params = tmp_path / "params.yaml"
    params.write_text("rollout:\n  schedule: {mode: streaming}\n")
    with pytest.raises(ConfigError, match=r"rollout\.schedule\.mode: must be one of"):
        load_params(params)


def test_a_grpo_step_rolls_out_continuously(tmp_path, bwrap_sandbox, monkeypatch):
    """The loop's in-process engine (`TorchEngine.from_model` on the trained model) streams:
    `rollout.schedule` reaches the GRPO draws, which equal the cohort schedule's."""
    import dataclasses

    from rlvr.agent.rollout import RolloutParams
    from rlvr.sandbox.params import SandboxParams
    from rlvr.train import grpo
    from rlvr.train.grpo_config import parse_grpo_params

    monkeypatch.setenv("RLVR_PROGRESS", "0")
    rollout = RolloutParams(workers=1, decoding=Decoding(grammar="tool_call"),
                            budgets=Budgets(max_turns=3, max_new_tokens_per_turn=48,
                                            max_new_tokens_per_episode=200))
    params = parse_grpo_params({"steps": 1, "group_size": 2, "groups_per_step": 2,
                                "tasks_per_draw": 2, "max_draws": 1, "consensus_runs": 1})

    def no_patches(tasks, patches):  # run_tests every turn: nothing is ever submitted
        assert not patches
        return []

    ledgers = {}
    for mode in ("cohorts", "continuous"):
        logged: list[dict] = []
        result = grpo.train_grpo(
            acting_policy_dir(), [count_task(), take_task()], params,
            dataclasses.replace(rollout, schedule=ScheduleParams(mode=mode)),
            SandboxParams(backend="bwrap", workers=1), tmp_path / f"{mode}-out",
            tmp_path / f"{mode}-work", verifier=no_patches,
            log=lambda step, m: logged.append(dict(m)))
        ledgers[mode] = [(g["group_id"], g["status"], g["rewards"], tuple(g["trajectory_ids"]))
                         for g in result.ledger]
        assert logged[0]["time/generate_busy_fraction"] > 0
    assert ledgers["continuous"] == ledgers["cohorts"] and len(ledgers["cohorts"]) == 2
