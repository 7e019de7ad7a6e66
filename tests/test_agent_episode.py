"""Episodes end to end: token exactness, loss mask, stop reasons, the passport and its
rebuild check, with a tiny real policy (TorchEngine) and a replay engine."""
from __future__ import annotations

import copy
import dataclasses
import json
import math

import pytest

from agentkit import ReplayEngine, WrappedEngine, count_task, leak_lines, tiny_policy_dir
from rlvr.agent.collector import Collector, episode_specs
from rlvr.agent.drive import run_episode, step_token
from rlvr.agent.episode import Budgets, Decoding, Episode, EpisodeConfig
from rlvr.agent.passport import apply_verdict, deterministic_view, passport_row, rebuild_check
from rlvr.agent.repetition import RepetitionParams
from rlvr.agent.tools import format_tool_call
from rlvr.agent.transcript import ChatCodec
from rlvr.engines.base import SamplingParams
from rlvr.sandbox.base import RunResult


class BrokenSandbox:
    name, python = "broken", "/usr/bin/python3"

    def run(self, argv, **kw) -> RunResult:
        raise OSError("bwrap: setting up uid map: Permission denied")


@pytest.fixture(scope="module")
def codec():
    return ChatCodec.from_model_dir(tiny_policy_dir())


@pytest.fixture(scope="module")
def engine():
    from rlvr.engines.torch_engine import TorchEngine

    return TorchEngine(tiny_policy_dir())


class Recording(WrappedEngine):
    """Forwards to an engine and remembers every prompt batch and sample it returned."""

    def __init__(self, inner):
        super().__init__(inner)
        self.name = inner.name
        self.calls: list[tuple[list[list[int]], list]] = []
        self.stats: list[dict] = []

    def generate(self, prompts, params, *, seed, sample_seeds=None):
        samples = self.inner.generate(prompts, params, seed=seed, sample_seeds=sample_seeds)
        self.calls.append(([list(p) for p in prompts], samples))
        self.stats.append(dict(getattr(self.inner, "last_stats", {})))
        return samples


def config(codec, sandbox=None, *, decoding=Decoding(), repetition=RepetitionParams(),
           seed=0, **budgets) -> EpisodeConfig:
    base = dict(max_turns=6, max_new_tokens_per_turn=128, max_new_tokens_per_episode=800,
                max_context_tokens=4096, tool_timeout_s=20.0, observation_cap=1500,
                max_invalid_actions=3)
    base.update(budgets)
    return EpisodeConfig(codec=codec, budgets=Budgets(**base), decoding=decoding,
                         repetition=repetition, sandbox=sandbox, run_seed=seed)


def one(engine, cfg, task=None, index=0) -> dict:
    spec = episode_specs(task or count_task(), index + 1, cfg.run_seed)[index]
    ep = run_episode(spec, engine, cfg)
    row = passport_row(ep)
    assert rebuild_check(row) == [], rebuild_check(row)
    return row


def spans(row, turn):
    return [i for i, (m, t) in enumerate(zip(row["loss_mask"], row["turn_ids"]))
            if m and t == turn]


# ---- token exactness -----------------------------------------------------------------------
def test_mask_covers_exactly_the_sampled_tokens(engine, codec, bwrap_sandbox):
    rec = Recording(engine)
    row = one(rec, config(codec, bwrap_sandbox, max_new_tokens_per_turn=300,
                          max_new_tokens_per_episode=1200), index=1)
    assert row["n_turns"] >= 2  # a random policy: invalid actions -> error observations
    sampled = [s for _, samples in rec.calls for s in samples]
    assert len(sampled) == row["n_turns"]
    for t, sample in enumerate(sampled):
        pos = spans(row, t)
        assert [row["token_ids"][i] for i in pos] == sample.token_ids[:len(pos)]
        assert [row["logprobs"][i] for i in pos] == pytest.approx(sample.logprobs[:len(pos)],
                                                                  abs=0)
        # the prompt of turn t is exactly the transcript before its first sampled token
        prompt = rec.calls[t][0][0]
        assert prompt == row["token_ids"][:pos[0]]
    # every masked-out token was written by the harness: prompt + observation segments
    context = [tok for tok, m in zip(row["token_ids"], row["loss_mask"]) if not m]
    expected = list(codec.initial_prompt(*_messages(row)))
    for t, turn in enumerate(row["turns"][:-1]):
        closed_by_policy = row["token_ids"][spans(row, t)[-1]] == codec.im_end
        expected += codec.observation_segment(turn["observation"],
                                              close_turn=not closed_by_policy)
    assert context == expected
    assert row["n_trainable_tokens"] == sum(len(spans(row, t)) for t in range(row["n_turns"]))


def _messages(row):
    from rlvr.agent.prompt import SYSTEM_PROMPT, user_message

    return SYSTEM_PROMPT, user_message(count_task())


@pytest.mark.parametrize("decoding", [Decoding(1.0, 1.0, 0), Decoding(0.7, 0.9, 0),
                                      Decoding(1.3, 0.85, 40)])
def test_behaviour_logprobs_equal_teacher_forced_scores(engine, codec, bwrap_sandbox, decoding):
    cfg = config(codec, bwrap_sandbox, decoding=decoding, max_new_tokens_per_turn=32, seed=7)
    rows = []
    Collector(engine, cfg, group_size=3, workers=2).run(
        [count_task()], on_group=lambda g: rows.extend(passport_row(e) for e in g.episodes))
    params = SamplingParams.of(decoding, max_new_tokens=0)
    checked = 0
    for row in rows:
        assert rebuild_check(row) == []
        for t in range(row["n_turns"]):
            pos = spans(row, t)
            prompt = row["token_ids"][:pos[0]]
            completion = [row["token_ids"][i] for i in pos]
            scored = engine.score(prompt, completion, params)
            stored = [row["logprobs"][i] for i in pos]
            assert max(abs(a - b) for a, b in zip(scored, stored)) < 1e-4
            assert math.fsum(stored) == pytest.approx(row["turns"][t]["logprob_sum"], abs=1e-9)
            checked += len(pos)
    assert checked > 50


def test_a_group_shares_one_prefill_and_tools_overlap_generation(engine, codec, bwrap_sandbox):
    rec = Recording(engine)
    cfg = config(codec, bwrap_sandbox, max_new_tokens_per_turn=16)
    Collector(rec, cfg, group_size=4, workers=2, groups_per_wave=2).run(
        [count_task("a"), count_task("b")], on_group=lambda g: None)
    first_prompts, _ = rec.calls[0]
    assert len(first_prompts) == 4 and all(p == first_prompts[0] for p in first_prompts)
    assert rec.stats[0]["unique_prompts"] == 1
    assert rec.stats[0]["prefill_tokens_saved"] == 3 * len(first_prompts[0])
    # the two groups are two cohorts: the second call serves the other group's first turns
    assert len(rec.calls[1][0]) == 4 and rec.calls[1][0][0] == first_prompts[0]


def test_rollouts_do_not_depend_on_threads_or_batching(engine, codec, bwrap_sandbox):
    tasks = [count_task("a"), count_task("b"), count_task("c")]

    def collect(workers, per_wave):
        rows = []
        Collector(engine, config(codec, bwrap_sandbox, max_new_tokens_per_turn=16, seed=3),
                  group_size=2, workers=workers, groups_per_wave=per_wave).run(
            tasks, on_group=lambda g: rows.extend(passport_row(e) for e in g.episodes))
        return sorted(deterministic_view(rows), key=lambda r: r["trajectory_id"])

    first = collect(1, 3)
    assert collect(3, 3) == first
    assert len({r["reset_seed"] for r in first}) == 6


# ---- stop reasons -------------------------------------------------------------------------------
SUBMIT = format_tool_call("submit", {}, "Done.")
VIEW = format_tool_call("view", {"path": "mini/core.py", "start": 1, "end": 3})
FIX = format_tool_call("edit", {"path": "mini/core.py", "old": "if v <= limit:",
                                "new": "if v < limit:"}, "Flip the comparison.")


def test_submitted_with_a_fix(codec):
    row = one(ReplayEngine(codec, [VIEW, FIX, SUBMIT]), config(codec))
    assert row["stop_reason"] == "submitted" and row["terminated"] and not row["truncated"]
    assert row["n_turns"] == 3 and row["reward_format"] == 1.0
    assert row["patch_ok"] and "+        if v < limit:" in row["patch"]
    assert row["reward_outcome"] is None and row["reward"] is None  # the verifier decides
    done = apply_verdict(row, {"success": True, "reason": "none",
                               "verifier_version": "enclave-test"})
    assert done["reward"] == pytest.approx(1.0 + 0.05 * 1.0 - 0.05 * row["reward_length"])
    assert (done["verdict_reason"], done["verifier_version"]) == ("none", "enclave-test")
    assert rebuild_check(done) == []
    assert [t["tool_name"] for t in row["turns"]] == ["view", "edit", "submit"]
    assert row["turns"][1]["observation"] == "edited mini/core.py"


def test_a_diff_the_patch_policy_refuses_records_the_policy_version(codec):
    """Policy code run by `run_tests` can write any file into the workspace; the diff then
    touches a build file, the static policy refuses it, and the row names the patch policy
    (not the enclave, which never saw it) as what decided its outcome."""
    from rlvr.tasks.patches import PATCH_POLICY_VERSION

    cfg = config(codec)
    spec = episode_specs(count_task(), 1, cfg.run_seed)[0]
    ep = Episode(spec, cfg, engine_name="replay")
    ep.start()
    (ep.workspace.repo / "setup.cfg").write_text("[tool:pytest]\naddopts = -p no:randomly\n")
    step_token(ReplayEngine(codec, [SUBMIT]), [ep], cfg)
    ep.finish()
    row = passport_row(ep)
    assert row["stop_reason"] == "submitted" and not row["patch_ok"]
    assert row["patch_reason"].startswith("setup.cfg:")
    assert row["verifier_version"] == PATCH_POLICY_VERSION
    assert row["verdict_reason"] == "patch_rejected"
    assert row["reward_outcome"] == 0.0 and rebuild_check(row) == []


def test_policy_step_is_the_engines_at_the_first_turn(codec):
    """Weights may change mid-episode (a trainer syncs between calls): the row's ordinal and
    version are the first turn's, each turn keeps its own version."""

    class SyncsAfterEachCall(ReplayEngine):
        def generate(self, prompts, params, *, seed, sample_seeds=None):
            out = super().generate(prompts, params, seed=seed, sample_seeds=sample_seeds)
            self.sync_weights({}, f"w{self.policy_step + 1}", self.policy_step + 1)
            return out

    row = one(SyncsAfterEachCall(codec, [VIEW, SUBMIT], policy_version="w3", policy_step=3),
              config(codec))
    assert (row["policy_version"], row["policy_step"]) == ("w3", 3)
    assert row["turn_policy_versions"] == ["w3", "w4"]
    for bad in (-1, None):
        assert any("policy_step" in p for p in rebuild_check({**row, "policy_step": bad}))
    teacher_like = {**row, "logprobs_kind": "none", "policy_step": 2}
    assert any("a teacher's rollout" in p for p in rebuild_check(teacher_like))


def test_max_turns(codec):
    row = one(ReplayEngine(codec, [VIEW]), config(codec, max_turns=3))
    assert (row["stop_reason"], row["truncation_source"], row["n_turns"]) == ("max_turns",
                                                                           "max_turns", 3)
    assert row["truncated"] and not row["terminated"] and row["reward"] == 0.0


def test_max_tokens_per_turn(codec):
    row = one(ReplayEngine(codec, ["x" * 200], end_turn=False),
              config(codec, max_new_tokens_per_turn=8))
    assert (row["stop_reason"], row["truncation_source"]) == ("max_tokens", "max_tokens")
    assert row["turns"][-1]["finish_reason"] == "length"
    assert row["turns"][-1]["action_error_kind"] == "turn_too_long"
    assert row["n_trainable_tokens"] == 8 and row["reward"] == 0.0


def test_max_tokens_per_episode(codec):
    n_view = len(codec.encode_action(VIEW)) + 1
    row = one(ReplayEngine(codec, [VIEW]), config(codec, max_new_tokens_per_episode=n_view + 5))
    assert row["stop_reason"] == "max_tokens" and row["n_trainable_tokens"] == n_view + 5
    assert "episode budget" in row["stop_detail"]


def test_observation_that_does_not_fit_the_context(codec):
    cfg = config(codec, max_context_tokens=len(codec.initial_prompt(*_messages(None))) + 60)
    row = one(ReplayEngine(codec, [format_tool_call("view", {"path": "mini/core.py"})]), cfg)
    assert (row["stop_reason"], row["truncation_source"]) == ("max_tokens", "observation")
    assert row["n_tokens_before_truncation"] > row["n_tokens"]
    assert row["turns"][0]["observation"].startswith("mini/core.py (lines 1-11")


def test_repetition(codec):
    loop = "let me think again " * 30
    row = one(ReplayEngine(codec, [loop], end_turn=False),
              config(codec, max_new_tokens_per_turn=200,
                     repetition=RepetitionParams(ngram=4, threshold=3, window=64)))
    assert row["stop_reason"] == "repetition" and row["terminated"] and row["reward"] == 0.0
    assert not row["truncated"]


def test_invalid_action_limit_and_error_observations(codec):
    actions = ["I think the bug is in count_below.", '<tool_call>{"name": "view"}</tool_call>',
               '<tool_call>{"name": "fly", "args": {}}</tool_call>']
    row = one(ReplayEngine(codec, actions), config(codec, max_invalid_actions=3))
    assert row["stop_reason"] == "invalid_action_limit" and row["n_invalid_actions"] == 3
    kinds = [t["action_error_kind"] for t in row["turns"]]
    assert kinds == ["missing_tool_call", "bad_call", "unknown_tool"]
    assert row["turns"][0]["observation"].startswith("error: invalid tool call "
                                                     "(missing_tool_call)")
    assert row["reward_format"] == 0.0 and row["reward"] == 0.0


def test_eos_instead_of_end_of_turn_is_invalid(codec):
    class EosReplay(ReplayEngine):
        def _ids(self, k):
            return self.codec.encode_action(SUBMIT) + [self.codec.eos]

    row = one(EosReplay(codec, [SUBMIT]), config(codec, max_invalid_actions=2))
    assert row["turns"][0]["action_error_kind"] == "no_end_of_turn"
    assert row["stop_reason"] == "invalid_action_limit"
    first = spans(row, 0)
    assert row["token_ids"][first[-1]] == codec.eos
    # the harness closes the turn (mask 0) before the error observation
    assert row["token_ids"][first[-1] + 1] == codec.im_end
    assert row["loss_mask"][first[-1] + 1] == 0


def test_a_broken_sandbox_is_infra_error_not_failure(codec):
    row = one(ReplayEngine(codec, [format_tool_call("run_tests", {}), SUBMIT]),
              config(codec, BrokenSandbox()))
    assert row["stop_reason"] == "infra_error" and row["infra_error"]
    assert not row["terminated"] and not row["truncated"]
    assert row["reward_outcome"] is None and row["reward"] is None
    scored = apply_verdict(row, {"success": True, "reason": "none", "verifier_version": "v"})
    assert scored["reward"] is None and scored["verdict_reason"] is None


def test_oversized_observation_is_capped_in_the_transcript(codec):
    row = one(ReplayEngine(codec, [format_tool_call("view", {"path": "."}),
                                   format_tool_call("search", {"pattern": "e"}), SUBMIT]),
              config(codec, observation_cap=80))
    search = row["turns"][1]
    assert search["observation_truncated"] and search["observation_raw_chars"] > 80
    assert "[... truncated " in search["observation"]
    text = codec.decode(row["token_ids"])
    assert search["observation"] in text


# ---- the rebuild check ------------------------------------------------------------------------------
def tamper_cases(row):
    def flip_mask(r):
        i = r["loss_mask"].index(1)
        r["loss_mask"][i] = 0

    def shift_logprob(r):
        i = r["loss_mask"].index(1)
        r["logprobs"][i] -= 0.5

    def drop_token(r):
        for key in ("token_ids", "loss_mask", "logprobs", "turn_ids"):
            r[key].pop()

    def relabel_stop(r):
        r["stop_reason"] = "submitted"

    def inflate_reward(r):
        r["reward"] = 1.0
        r["reward_outcome"] = 1.0

    def trainable_count(r):
        r["n_trainable_tokens"] += 1

    def turn_sum(r):
        r["turns"][0]["logprob_sum"] += 0.01

    def hide_invalid(r):
        r["n_invalid_actions"] = 0

    def mask_prompt(r):
        r["loss_mask"][0] = 1
        r["n_trainable_tokens"] += 1

    return [flip_mask, shift_logprob, drop_token, relabel_stop, inflate_reward, trainable_count,
            turn_sum, hide_invalid, mask_prompt]


def test_rebuild_check_detects_tampering(codec):
    row = one(ReplayEngine(codec, ["no call", VIEW]), config(codec, max_turns=3))
    assert row["stop_reason"] == "max_turns" and row["n_invalid_actions"] == 1
    for tamper in tamper_cases(row):
        bad = copy.deepcopy(row)
        tamper(bad)
        assert rebuild_check(bad), tamper.__name__


# ---- nothing hidden reaches the agent --------------------------------------------------------
def test_hidden_tests_and_reference_never_reach_prompt_or_observations(engine, codec,
                                                                       bwrap_sandbox):
    task = count_task()
    rows = [one(engine, config(codec, bwrap_sandbox, max_new_tokens_per_turn=24), task, i)
            for i in range(2)]
    rows.append(one(ReplayEngine(codec, [format_tool_call("view", {"path": "."}),
                                         format_tool_call("search", {"pattern": "count"}),
                                         format_tool_call("run_tests", {}), FIX,
                                         format_tool_call("view", {"path": "mini/core.py"}),
                                         SUBMIT]),
                    config(codec, bwrap_sandbox), task))
    hidden = leak_lines(task)
    assert hidden
    for row in rows:
        everything = codec.decode(row["token_ids"])
        prompt = codec.decode(row["token_ids"][:row["n_prompt_tokens"]])
        first_edit = next((t["turn"] for t in row["turns"] if t["tool_name"] == "edit"
                           and t["tool_status"] == "ok"), row["n_turns"])
        early = "\n".join(t["observation"] for t in row["turns"][:first_edit])
        for line in hidden:
            assert line not in prompt and line not in early
            if line.startswith("assert") or line.startswith("def test_hidden"):
                assert line not in everything
        assert task.reference_patch not in everything
    # the agent's own fix does show up once it has written it
    assert "if v < limit:" in rows[-1]["turns"][4]["observation"]


def test_decoding_params_and_seeds_are_recorded(engine, codec, bwrap_sandbox):
    dec = Decoding(0.8, 0.95, 0)
    row = one(engine, config(codec, bwrap_sandbox, decoding=dec, max_new_tokens_per_turn=16,
                             seed=11))
    decoding = json.loads(row["decoding"])
    assert decoding == {"temperature": 0.8, "top_p": 0.95, "top_k": 0, "grammar": "",
                        "stop_token_ids": [codec.im_end, codec.eos]}
    assert row["decoding_seed"] == 11 and row["engine"] == "torch"
    assert row["turn_policy_versions"] == [engine.policy_version] * row["n_turns"]
    assert len({t["sample_seed"] for t in row["turns"]}) == row["n_turns"]
    budgets = json.loads(row["budgets"])
    assert budgets["max_new_tokens_per_turn"] == 16
    assert row["initial_state_checksum"] == count_task().hashes()["snapshot_hash"]
    assert row["env_version"].startswith("1+tools.")
    assert dataclasses.asdict(RepetitionParams()) == json.loads(row["repetition"])


def test_artifact_refuses_misaligned_rows_and_unknown_enums(codec, tmp_path):
    from rlvr.agent.passport import read_trajectories, write_trajectories
    from rlvr.errors import ArtifactError

    row = one(ReplayEngine(codec, [SUBMIT]), config(codec))
    write_trajectories(tmp_path / "ok.parquet", [row])
    assert read_trajectories(tmp_path / "ok.parquet").num_rows == 1
    short = copy.deepcopy(row)
    short["logprobs"].pop()
    with pytest.raises(ArtifactError, match="not aligned"):
        write_trajectories(tmp_path / "bad.parquet", [short])
    bogus = dict(copy.deepcopy(row), stop_reason="gave_up")
    with pytest.raises(ArtifactError, match="stop_reason"):
        write_trajectories(tmp_path / "bad.parquet", [bogus])
    twice = dict(copy.deepcopy(row))
    with pytest.raises(ArtifactError, match="trajectory_id"):
        write_trajectories(tmp_path / "bad.parquet", [row, twice])
    assert not (tmp_path / "bad.parquet").exists()


def test_a_workspace_that_cannot_be_created_is_infra_error(codec, tmp_path):
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    cfg = dataclasses.replace(config(codec), workspace_parent=blocked)
    spec = episode_specs(count_task(), 1, 0)[0]
    ep = run_episode(spec, ReplayEngine(codec, [SUBMIT]), cfg)
    row = passport_row(ep)
    assert row["stop_reason"] == "infra_error" and row["n_tokens"] == 0
    assert "workspace setup failed" in row["stop_detail"]
    assert rebuild_check(row) == []


def test_a_huge_invalid_call_gets_a_capped_error_observation(codec):
    huge = format_tool_call("view", {"path": "a", "start": "9" * 1500})
    row = one(ReplayEngine(codec, [huge, SUBMIT]),
              config(codec, observation_cap=200, max_new_tokens_per_turn=4000,
                     max_new_tokens_per_episode=8000, max_context_tokens=16000,
                     repetition=RepetitionParams(enabled=False)))
    first = row["turns"][0]
    assert first["action_error_kind"] == "bad_args"
    assert first["observation_truncated"] and first["observation_raw_chars"] > 1500
    assert len(first["observation"]) < 300
    assert row["stop_reason"] == "submitted"
