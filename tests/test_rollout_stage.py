"""Stage `rollout` and the library loop under it (`rlvr.agent.rollout`): artifacts, metrics,
contracts, resumption after an interruption, sampling rounds."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agentkit import (COUNT_BUGGY, COUNT_FIXED, COUNT_HIDDEN, COUNT_PUBLIC, all_tasks,
                      make_task, tiny_policy_dir)
from rlvr.agent import rollout as lib
from rlvr.agent.passport import deterministic_view, read_trajectories, rebuild_check
from rlvr.artifacts import schemas
from rlvr.artifacts.io import read_table
from rlvr.errors import ConfigError
from rlvr.sandbox.params import SandboxParams
from rlvr.tasks.pool import save_tasks, select_tasks
from rlvr.teachers.acting import open_engine
from stages import rollout as stage


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("RLVR_TRACKING", "off")
    monkeypatch.setenv("RLVR_PROGRESS", "0")


def same(a: list[dict], b: list[dict]) -> bool:
    """Equal up to wall-clock columns (NaN logprobs of teacher tokens compare equal)."""
    return (json.dumps(deterministic_view(a), sort_keys=True)
            == json.dumps(deterministic_view(b), sort_keys=True))


def roll(tasks, params, sandbox, parts_root, **kwargs) -> list[dict]:
    """`roll_out` with the engine `params` names, built as the stage builds it."""
    return lib.roll_out(tasks, params, sandbox, parts_root, open_engine=open_engine, **kwargs)


def write_params(path: Path, **rollout) -> Path:
    section = {
        "engine": "scripted", "model_dir": str(tiny_policy_dir()), "split": "train",
        "max_tasks": 0, "group_size": 2, "seed": 3, "workers": 2, "groups_per_wave": 2,
        "decoding": {"temperature": 1.0, "top_p": 1.0, "top_k": 0},
        "budgets": {"max_turns": 10, "max_new_tokens_per_turn": 400,
                    "max_new_tokens_per_episode": 3000, "max_context_tokens": 8192,
                    "tool_timeout_s": 20, "observation_cap": 1500, "max_invalid_actions": 3},
        "repetition": {"ngram": 8, "threshold": 6, "window": 256},
        "reward": {"lambda_fmt": 0.05, "alpha": 0.05},
        "teacher": {"noise": 0.3},
    }
    for key, value in rollout.items():
        if isinstance(value, dict):
            section[key] = {**section[key], **value}
        else:
            section[key] = value
    path.write_text(yaml.safe_dump({"rollout": section, "sandbox": {"backend": "bwrap"}}))
    return path


@pytest.fixture
def tasks_file(tmp_path):
    tasks = all_tasks()
    tasks.append(make_task("other-count", "other", "core", COUNT_BUGGY, COUNT_FIXED,
                           COUNT_PUBLIC.replace("mini.core", "other.core"), COUNT_HIDDEN,
                           function="count_below", operator="comparison_flip", line=5,
                           split="heldout"))
    path = tmp_path / "tasks.parquet"
    save_tasks(path, tasks)
    return path


def run_stage(tmp_path, params, tasks_file, name="out"):
    out = tmp_path / name
    stage.main(["--params", str(params), "--tasks", str(tasks_file),
                "--out", str(out / "trajectories.parquet"),
                "--patches-out", str(out / "rollout_patches.parquet"),
                "--metrics", str(out / "rollout.json")])
    return out


def test_stage_writes_passports_patches_and_metrics(tmp_path, tasks_file, bwrap_sandbox):
    out = run_stage(tmp_path, write_params(tmp_path / "params.yaml"), tasks_file)
    rows = read_trajectories(out / "trajectories.parquet").to_pylist()
    assert len(rows) == 6  # 3 train tasks x G=2; the held-out task is not rolled out
    assert {r["task_id"] for r in rows} == {"mini-count", "shop-price", "seq-take"}
    for row in rows:
        assert rebuild_check(row) == []
        assert row["group_id"] == f"{row['task_id']}@s3"
        assert row["trajectory_id"] == f"{row['group_id']}#{row['sample_index']}"
    patches = read_table(out / "rollout_patches.parquet", schemas.PATCHES,
                         contract="patches").to_pylist()
    submitted = {r["trajectory_id"]: r for r in rows
                 if r["stop_reason"] == "submitted" and r["patch_ok"]}
    assert {p["candidate_id"] for p in patches} == set(submitted)
    for p in patches:
        assert p["origin"] == f"rollout:{p['candidate_id']}"
        assert p["patch"] == submitted[p["candidate_id"]]["patch"]
    metrics = json.loads((out / "rollout.json").read_text())
    assert metrics["rollouts"] == 6 and metrics["groups"] == 3
    assert set(metrics["stop_reasons"]) == set(schemas.STOP_REASONS)
    assert sum(metrics["stop_reasons"].values()) == pytest.approx(1.0)
    assert metrics["parse_error_rate"] == 0.0
    assert metrics["tokens_generated_sum"] == sum(r["n_trainable_tokens"] for r in rows)
    assert metrics["this_run"]["groups_resumed"] == 0
    assert metrics["this_run"]["generate_prompts"] == sum(r["n_turns"] for r in rows)
    assert not (out / ".rollout_parts").exists()  # checkpoint removed after success


def test_a_rerun_writes_byte_identical_artifacts_and_only_the_timings_differ(
        tmp_path, tasks_file, bwrap_sandbox):
    """What `dvc.lock` needs on a fresh clone: the same inputs give the same artifact bytes
    (so no later stage is stale); every clock reading is in the timings sidecar."""
    import pyarrow.parquet as pq

    from rlvr.agent.passport import read_trajectory_timings

    params = write_params(tmp_path / "params.yaml")
    a = run_stage(tmp_path, params, tasks_file, "a")
    b = run_stage(tmp_path, params, tasks_file, "b")
    for name in ("trajectories.parquet", "rollout_patches.parquet"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    names = pq.read_schema(a / "trajectories.parquet").names
    assert not set(schemas.TRAJECTORY_TIMING_COLUMNS) & set(names)
    rows = read_trajectories(a / "trajectories.parquet").to_pylist()
    timings = [read_trajectory_timings(out / "trajectories.timings.parquet") for out in (a, b)]
    for got in timings:
        assert set(got) == {r["trajectory_id"] for r in rows}
        for r in rows:  # one tool and one generation figure per turn
            assert len(got[r["trajectory_id"]]["tool_latency_s"]) == r["n_turns"]
            assert len(got[r["trajectory_id"]]["gen_seconds"]) == r["n_turns"]
    metrics = json.loads((a / "rollout.json").read_text())
    assert metrics["tool_seconds_sum"] == pytest.approx(
        sum(s for t in timings[0].values() for s in t["tool_latency_s"]), abs=2e-3)
    assert metrics["episode_seconds"]["max"] == pytest.approx(
        max(t["wall_seconds"] for t in timings[0].values()), abs=2e-3)


def test_resume_after_interruption_gives_the_uninterrupted_result(tmp_path, tasks_file,
                                                                  bwrap_sandbox):
    params, sandbox = lib.load_params(write_params(tmp_path / "params.yaml"))
    tasks = select_tasks([tasks_file], params.split, 0, params.seed)
    reference = roll(tasks, params, sandbox, tmp_path / "parts-a")

    written: list[str] = []

    def interrupt(group_id: str) -> None:
        written.append(group_id)
        if len(written) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        roll(tasks, params, sandbox, tmp_path / "parts-b", on_group_written=interrupt)
    shards = list((tmp_path / "parts-b").rglob("*.parquet"))
    assert len(shards) == 2
    rerun: list[str] = []
    resumed = roll(tasks, params, sandbox, tmp_path / "parts-b", on_group_written=rerun.append)
    assert len(rerun) == 1 and rerun[0] not in written  # nothing redone, nothing lost
    assert same(resumed, reference)
    # the resumed groups keep the timings they were measured with (the shards hold them)
    from rlvr.agent.passport import timing_rows

    assert [t["trajectory_id"] for t in timing_rows(resumed)] == [r["trajectory_id"]
                                                                  for r in reference]


def test_resume_with_the_torch_policy_replays_partial_waves(tmp_path, tasks_file,
                                                           bwrap_sandbox):
    params, sandbox = lib.load_params(write_params(
        tmp_path / "params.yaml", engine="torch", groups_per_wave=2,
        budgets={"max_turns": 3, "max_new_tokens_per_turn": 24,
                 "max_new_tokens_per_episode": 60}))
    tasks = select_tasks([tasks_file], params.split, 0, params.seed)
    reference = roll(tasks, params, sandbox, tmp_path / "parts-a")
    assert {r["engine"] for r in reference} == {"torch"}
    assert all(r["logprobs_kind"] == "behaviour" for r in reference)

    def interrupt(group_id: str) -> None:
        raise KeyboardInterrupt  # right after the first group of the first wave

    with pytest.raises(KeyboardInterrupt):
        roll(tasks, params, sandbox, tmp_path / "parts-b", on_group_written=interrupt)
    resumed = roll(tasks, params, sandbox, tmp_path / "parts-b")
    assert same(resumed, reference)


def test_changed_params_do_not_reuse_old_shards(tmp_path, tasks_file):
    params, sandbox = lib.load_params(write_params(tmp_path / "params.yaml"))
    tasks = select_tasks([tasks_file], params.split, 0, params.seed)
    other, _ = lib.load_params(write_params(tmp_path / "p2.yaml", teacher={"noise": 0.9}))
    a = lib.fingerprint(params, sandbox, tasks, "v", tiny_policy_dir())
    assert a == lib.fingerprint(params, sandbox, tasks, "v", tiny_policy_dir())
    assert a != lib.fingerprint(other, sandbox, tasks, "v", tiny_policy_dir())
    assert a != lib.fingerprint(params, sandbox, tasks[:-1], "v", tiny_policy_dir())
    assert a != lib.fingerprint(params, SandboxParams(workers=7), tasks, "v",
                                tiny_policy_dir())
    assert a != lib.fingerprint(params, sandbox, tasks, "v", tiny_policy_dir(), 1)
    assert a != lib.fingerprint(params, sandbox, tasks, "v", tiny_policy_dir(), policy_step=1)


def test_shards_of_another_policy_step_are_not_reused(tmp_path, tasks_file, bwrap_sandbox):
    """The same weights at another ordinal are another policy_step in every passport: their
    shards must not be resumed under the wrong step."""
    from agentkit import ReplayEngine
    from rlvr.agent.tools import format_tool_call
    from rlvr.agent.transcript import ChatCodec

    params, sandbox = lib.load_params(write_params(tmp_path / "params.yaml"))
    tasks = select_tasks([tasks_file], params.split, 0, params.seed)[:1]
    engine = ReplayEngine(ChatCodec.from_model_dir(tiny_policy_dir()),
                          [format_tool_call("submit", {})], policy_version="w")
    first = lib.roll_out(tasks, params, sandbox, tmp_path / "parts", engine=engine)
    engine.sync_weights({}, "w", 1)  # same weights hash, next ordinal
    written: list[str] = []
    again = lib.roll_out(tasks, params, sandbox, tmp_path / "parts", engine=engine,
                         on_group_written=written.append)
    assert written == [first[0]["group_id"]]  # rolled out anew, not resumed
    assert {r["policy_step"] for r in first} == {0} and {r["policy_step"] for r in again} == {1}


def test_a_later_sampling_round_neither_replays_nor_collides(tmp_path, tasks_file,
                                                            bwrap_sandbox):
    params, sandbox = lib.load_params(write_params(tmp_path / "params.yaml"))
    tasks = select_tasks([tasks_file], params.split, 0, params.seed)[:2]
    first = roll(tasks, params, sandbox, tmp_path / "parts")
    again = roll(tasks, params, sandbox, tmp_path / "parts", sampling_round=1)
    # round 0 keeps today's ids; round 1 is its own group and its own random streams
    assert [r["group_id"] for r in first] == [f"{t.task_id}@s3" for t in tasks for _ in "ab"]
    assert [r["group_id"] for r in again] == [f"{t.task_id}@s3r1" for t in tasks for _ in "ab"]
    assert not {r["trajectory_id"] for r in first} & {r["trajectory_id"] for r in again}
    assert not {r["reset_seed"] for r in first} & {r["reset_seed"] for r in again}
    seeds = [{t["sample_seed"] for r in rows for t in r["turns"]} for rows in (first, again)]
    assert seeds[0] and seeds[1] and not seeds[0] & seeds[1]
    assert all(rebuild_check(r) == [] for r in again)
    # the same round again is a replay: resumed from its shards, identical
    assert same(roll(tasks, params, sandbox, tmp_path / "parts", sampling_round=1),
                again)
    with pytest.raises(ConfigError, match="sampling_round must be >= 0"):
        roll(tasks, params, sandbox, tmp_path / "parts", sampling_round=-1)


def test_roll_out_in_process_with_a_live_engine_and_sandbox(tmp_path, tasks_file,
                                                          bwrap_sandbox):
    """What a training loop does: its own engine and sandbox, no checkpoint directory."""
    params, sandbox = lib.load_params(write_params(tmp_path / "params.yaml"))
    tasks = select_tasks([tasks_file], params.split, 0, params.seed)[:2]
    engine = open_engine(params)
    live = lib.roll_out(tasks, params, sandbox, None, engine=engine, sandbox=bwrap_sandbox)
    assert same(live, roll(tasks, params, sandbox, tmp_path / "parts"))
    assert {r["engine"] for r in live} == {engine.name}


def test_max_tasks_is_a_seeded_sample(tasks_file):
    a = select_tasks([tasks_file], "train", 2, seed=1)
    assert len(a) == 2 and a == select_tasks([tasks_file], "train", 2, seed=1)
    assert {t.split for t in select_tasks([tasks_file], "", 0, 0)} == {"train", "heldout"}


@pytest.mark.parametrize("change,message", [
    ({"group_sise": 2}, "rollout.group_sise: unknown key"),
    ({"engine": "gpt"}, "rollout.engine: must be one of"),
    ({"budgets": {"max_turns": 0}}, "max_turns must be >= 1"),
    ({"reward": {"lambda_fmt": 0.7, "alpha": 0.5}}, "lambda_fmt + alpha < 1"),
])
def test_bad_params_are_named_errors(tmp_path, tasks_file, capsys, change, message):
    params = write_params(tmp_path / "params.yaml")
    data = yaml.safe_load(params.read_text())
    for key, value in change.items():
        if isinstance(value, dict):
            data["rollout"][key] = {**data["rollout"][key], **value}
        else:
            data["rollout"][key] = value
    params.write_text(yaml.safe_dump(data))
    with pytest.raises(SystemExit) as exc:
        run_stage(tmp_path, params, tasks_file)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_duplicate_task_ids_across_files_are_refused(tmp_path, tasks_file, capsys):
    params = write_params(tmp_path / "params.yaml")
    with pytest.raises(SystemExit):
        stage.main(["--params", str(params), "--tasks", str(tasks_file), "--tasks",
                    str(tasks_file), "--out", str(tmp_path / "t.parquet")])
    assert "also appears" in capsys.readouterr().err
    assert not (tmp_path / "t.parquet").exists()


def test_a_trained_checkpoint_is_rolled_out_at_the_policy_step_it_records(tmp_path):
    """A GRPO checkpoint's `training.json` names its `policy_step`; the engine opened on it
    (rollout, evaluation) must record that step, so the gate's discard marks are right."""
    import shutil

    ckpt = tmp_path / "policy-grpo"
    shutil.copytree(tiny_policy_dir(), ckpt)
    params, _ = lib.load_params(write_params(tmp_path / "p.yaml", engine="torch",
                                             model_dir=str(ckpt)))
    assert open_engine(params).policy_step == 0          # no card: an initial policy
    (ckpt / "training.json").write_text(json.dumps({"policy_step": 7, "trainer": "x"}))
    assert open_engine(params).policy_step == 7
    teacher, _ = lib.load_params(write_params(tmp_path / "t.yaml", model_dir=str(ckpt)))
    assert open_engine(teacher).policy_version.startswith("scripted")  # tokenizer only
    (ckpt / "training.json").write_text(json.dumps({"policy_step": -1}))
    with pytest.raises(ConfigError, match="training.json: policy_step -1"):
        open_engine(params)
