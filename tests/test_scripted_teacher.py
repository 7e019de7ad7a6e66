"""The scripted teacher: systematic debugging, same tool-call format as the policy,
controlled noise, and no access to hidden tests or the reference."""
from __future__ import annotations

import math

import pytest

from agentkit import all_tasks, count_task, fixed_sources, leak_lines, tiny_policy_dir
from rlvr.agent.collector import Collector
from rlvr.agent.episode import Budgets, EpisodeConfig, teacher_view
from rlvr.agent.passport import passport_row, rebuild_check
from rlvr.agent.tools import parse_action
from rlvr.agent.transcript import ChatCodec
from rlvr.teachers.scripted import ScriptedTeacher, line_edit
from rlvr.tasks.patches import apply_patch


@pytest.fixture(scope="module")
def codec():
    return ChatCodec.from_model_dir(tiny_policy_dir())


def rollouts(codec, sandbox, tasks, *, noise, group_size=1, seed=0, max_turns=12, **teacher):
    cfg = EpisodeConfig(codec=codec, sandbox=sandbox, run_seed=seed,
                        budgets=Budgets(max_turns=max_turns, max_new_tokens_per_turn=400,
                                        max_new_tokens_per_episode=4000))
    rows = []
    Collector(ScriptedTeacher(noise=noise, max_turns=max_turns, **teacher), cfg,
              group_size=group_size,
              workers=2).run(tasks, on_group=lambda g: rows.extend(passport_row(e)
                                                                  for e in g.episodes))
    for row in rows:
        assert rebuild_check(row) == [], rebuild_check(row)
    return rows


def solved(row) -> bool:
    path, fixed = fixed_sources()[row["task_id"]]
    task = {t.task_id: t for t in all_tasks()}[row["task_id"]]
    return (row["stop_reason"] == "submitted" and row["patch_ok"]
            and apply_patch(task.source_files, row["patch"])[path] == fixed)


def test_teacher_debugs_and_fixes_every_tiny_task(codec, bwrap_sandbox):
    for view in (False, True):
        rows = rollouts(codec, bwrap_sandbox, all_tasks(), noise=0.0, view=view,
                        reasoning="explain" if view else "terse")
        assert [solved(r) for r in rows] == [True, True, True]
        for row in rows:
            tools = [t["tool_name"] for t in row["turns"]]
            assert tools[0] == "run_tests" and tools[-1] == "submit"
            assert (tools[1] == "view") == view and (tools[1] == "edit") != view
    for row in rows:
        tools = [t["tool_name"] for t in row["turns"]]
        assert "edit" in tools and tools[-2] == "run_tests"
        assert "[pytest exit code 0]" in row["turns"][-2]["observation"]
        assert row["engine"] == "scripted" and row["logprobs_kind"] == "none"
        assert row["reward_format"] == 1.0


def test_teacher_addressing_by_suspect_rank_makes_the_same_fixes(codec, bwrap_sandbox):
    """`address: suspect`: an edit of a line the last run_tests listed names its rank
    instead of path + line (nothing for a student to copy but the few changed characters)."""
    import json

    by_line = rollouts(codec, bwrap_sandbox, all_tasks(), noise=0.0)
    by_rank = rollouts(codec, bwrap_sandbox, all_tasks(), noise=0.0, address="suspect")
    assert [r["patch"] for r in by_rank] == [r["patch"] for r in by_line]
    assert [solved(r) for r in by_rank] == [True, True, True]
    edits = [json.loads(t["tool_args"]) for r in by_rank for t in r["turns"]
             if t["tool_name"] == "edit"]
    assert edits and all(set(e) == {"suspect", "old", "new"} for e in edits)
    assert "-suspect" in by_rank[0]["policy_version"]
    assert "-suspect" not in by_line[0]["policy_version"]
    with pytest.raises(ValueError, match="address"):
        ScriptedTeacher(address="rank")


def test_teacher_addressing_by_named_fix_tries_only_named_fixes(codec, bwrap_sandbox):
    """`address: fix`: the teacher tries only candidates one named rewrite of a listed line
    makes, one edit at a time (undo, then the next try), each emitted as {suspect, fix[,
    nth]}: nothing in a demonstration is copied, and the fixes are the line-addressed ones."""
    import json

    by_line = rollouts(codec, bwrap_sandbox, all_tasks(), noise=0.0)
    by_fix = rollouts(codec, bwrap_sandbox, all_tasks(), noise=0.0, address="fix")
    same = [a["patch"] == b["patch"] for a, b in zip(by_fix, by_line)]
    # `n + 1` -> `n + 0` (the named fix `-1`) where the line-addressed teacher drops the
    # offset: the same function, another text
    assert same == [True, True, False] and "+    return items[:n + 0]" in by_fix[2]["patch"]
    assert [solved(r) for r in by_fix[:2]] == [True, True]
    assert all(r["stop_reason"] == "submitted" for r in by_fix)
    edits = [json.loads(t["tool_args"]) for r in by_fix for t in r["turns"]
             if t["tool_name"] == "edit"]
    assert len(edits) >= 3 and all(set(e) - {"nth"} == {"suspect", "fix"} for e in edits)
    assert "-fix" in by_fix[0]["policy_version"]


def test_teacher_actions_use_the_policy_format_and_are_trainable(codec, bwrap_sandbox):
    row = rollouts(codec, bwrap_sandbox, [count_task()], noise=0.0)[0]
    for t, turn in enumerate(row["turns"]):
        parsed = parse_action(turn["action_text"])
        assert parsed.valid and parsed.call.name == turn["tool_name"]
        pos = [i for i, (m, k) in enumerate(zip(row["loss_mask"], row["turn_ids"]))
               if m and k == t]
        ids = [row["token_ids"][i] for i in pos]
        assert ids == codec.encode_action(turn["action_text"]) + [codec.im_end]
        assert codec.tool_call in ids and codec.tool_call_end in ids
        assert all(math.isnan(row["logprobs"][i]) for i in pos)  # SFT only, never RL


def test_noise_controls_the_share_of_wrong_submissions(codec, bwrap_sandbox):
    noisy = rollouts(codec, bwrap_sandbox, all_tasks(), noise=1.0)
    assert all(r["stop_reason"] == "submitted" for r in noisy)
    assert not any(solved(r) for r in noisy)
    mixed = rollouts(codec, bwrap_sandbox, [count_task()], noise=0.5, group_size=6, seed=5)
    assert 0 < sum(solved(r) for r in mixed) < 6


def test_whether_an_episode_is_noisy_is_seeded():
    def noisy(seed):
        bound = ScriptedTeacher(noise=0.5).for_task(teacher_view(count_task()))
        bound.chat([{"role": "system", "content": ""}], seed=seed, max_tokens=100)
        return bound.noisy

    draws = [noisy(s) for s in range(40)]
    assert draws == [noisy(s) for s in range(40)]
    assert 8 < sum(draws) < 32


def test_teacher_never_sees_or_writes_hidden_tests_or_the_reference(codec, bwrap_sandbox):
    with pytest.raises(ValueError, match="teacher_view"):
        ScriptedTeacher().for_task(count_task())
    view = teacher_view(count_task())
    assert not view.hidden_tests and not view.reference_patch and not view.fail_to_pass
    bound = ScriptedTeacher().for_task(view)
    assert "from" not in str(bound.hints) and "<redacted>" not in str(bound.hints)
    for row in rollouts(codec, bwrap_sandbox, all_tasks(), noise=0.3):
        task = {t.task_id: t for t in all_tasks()}[row["task_id"]]
        transcript = codec.decode(row["token_ids"])
        assert task.reference_patch not in transcript
        for text in task.hidden_tests.values():
            for line in text.splitlines():
                if line.strip().startswith(("assert", "def test_hidden")):
                    assert line.strip() not in transcript
        prompt = transcript[:len(codec.decode(row["token_ids"][:row["n_prompt_tokens"]]))]
        for line in leak_lines(task):
            assert line not in prompt


def test_line_edit_is_one_exact_unique_span():
    before = "a = 1\nb = 2\na = 1\nc = 3\n"
    after = "a = 1\nb = 2\na = 5\nc = 3\n"
    old, new, line = line_edit(before, after)
    assert before.count(old) == 1 and before.replace(old, new) == after and line <= 3
    deleted = "a = 1\nb = 2\nc = 3\n"
    old, new, _ = line_edit(before, deleted)
    assert before.replace(old, new, 1) == deleted


def test_default_teacher_reasons_only_from_what_it_observed(codec, bwrap_sandbox):
    """Without hints, every line the teacher names in its reasoning was shown to it first
    (by run_tests' suspicious lines or a view), and single-line fixes are line-addressed."""
    import json
    import re

    rows = rollouts(codec, bwrap_sandbox, all_tasks(), noise=0.0, view=True,
                    reasoning="explain")
    for row in rows:
        assert "-hints0-" in row["policy_version"]
        assert row["policy_step"] == 0  # a teacher is no trained policy
        seen = ""
        for turn in row["turns"]:
            for path, line in re.findall(r"([\w/]+\.py)(?::| line )(\d+)", turn["action_text"]):
                assert f"{path}:{line}:" in seen or f"{int(line):>4}| " in seen, (
                    turn["action_text"], seen[-400:])
            if turn["tool_name"] == "edit":
                args = json.loads(turn["tool_args"])
                assert set(args) == {"path", "line", "old", "new"} and len(args["old"]) <= 16
            seen += turn["observation"]


def test_token_diff_is_short_and_unique_within_the_line():
    from rlvr.teachers.scripted import edit_args

    before = "x = 1\n    if a < b and c < d:\n        return a + 1\n"
    after = before.replace("c < d", "c <= d")
    assert edit_args("m.py", before, after) == {"path": "m.py", "line": 2, "old": "c <",
                                                "new": "c <="}
    after = before.replace("a + 1", "a")
    assert edit_args("m.py", before, after) == {"path": "m.py", "line": 3, "old": " + 1",
                                                "new": ""}
    two = before.replace("x = 1\n", "")
    assert "line" not in edit_args("m.py", before, two)  # a removed line: a span edit
