"""Pretraining corpus of the CPU default: synthetic repair episodes built from training-family
code, tokenized as episodes are, whose line-addressed fix really undoes the injected bug."""
from __future__ import annotations

import dataclasses
import json
import re

import pytest

from agentkit import tiny_policy_dir
from rlvr.agent.executor import edit_line
from rlvr.agent.observations import suspicious_lines
from rlvr.agent.tools import parse_action
from rlvr.agent.transcript import ChatCodec
from rlvr.agent.tools import format_tool_call
from rlvr.train.pretrain import (PretrainParams, copy_drills, pretrain_policy, pretrain_rows,
                                 repair_cases, synthetic_episodes)
from rlvr.train.copy_probe import _copy_profile, copy_probe

SOURCE = '''def clamp(x, lo, hi):
    """Clamp x into [lo, hi]."""
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def total(values):
    s = 0
    for v in values:
        s = s + v
    return s
'''


@pytest.fixture(scope="module")
def codec():
    return ChatCodec.from_model_dir(tiny_policy_dir())


def _turns(text: str) -> list[tuple[str, str]]:
    """(role, content) of every chat message in a rendered transcript."""
    return re.findall(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", text, re.S)


def test_episodes_show_the_bug_line_and_their_edit_undoes_the_bug(codec):
    episodes = synthetic_episodes({"pkg/core.py": SOURCE}, codec, PretrainParams(episodes=20))
    assert len(episodes) == 20 and len({tuple(e) for e, _ in episodes}) > 5
    for ids, mask in episodes:
        assert set(mask) == {1}
        msgs = _turns(codec.decode(ids))
        assert [r for r, _ in msgs][:3] == ["system", "user", "assistant"]
        actions = [parse_action(c) for r, c in msgs if r == "assistant"]
        assert all(a.valid for a in actions)
        assert [a.call.name for a in actions] == ["run_tests", "edit", "run_tests", "submit"]
        args = actions[1].call.args
        observation = msgs[3][1]
        suspects = suspicious_lines(observation)
        assert {s.path for s in suspects} == {"pkg/core.py"}
        shown = {s.line: s.text for s in suspects}
        assert args["line"] in shown and args["old"] in shown[args["line"]]
        # rebuild the mutated file from the flagged line: the edit restores the original
        lines = SOURCE.split("\n")
        mutated = "\n".join(shown[args["line"]] if i + 1 == args["line"] and
                            lines[i].strip() != shown[args["line"]] else
                            lines[i] for i in range(len(lines)))
        indent = re.match(r"\s*", lines[args["line"] - 1]).group(0)
        mutated = mutated.replace("\n" + shown[args["line"]] + "\n",
                                  "\n" + indent + shown[args["line"]] + "\n")
        fixed, error = edit_line(mutated, args["line"], args["old"], args["new"])
        assert error == "" and fixed == SOURCE, json.dumps(args)


def test_rows_train_every_token_and_pretraining_writes_a_policy(codec, tmp_path):
    p = PretrainParams(steps=2, episodes=6, batch_size=4, code_chunk_tokens=32)
    rows = pretrain_rows({"pkg/core.py": SOURCE}, codec, p)
    assert len(rows) > 6 and all(set(r["loss_mask"]) == {1} for r in rows)
    result, n = pretrain_policy(tiny_policy_dir(), tmp_path / "pt", {"pkg/core.py": SOURCE}, p)
    assert n == len(rows) and result.steps == 2
    assert (tmp_path / "pt" / "config.json").is_file()
    assert (tmp_path / "pt" / "tokenizer.json").read_bytes() == (
        tiny_policy_dir() / "tokenizer.json").read_bytes()


def test_shifted_renamed_cases_still_point_at_the_bug_and_action_masks_cover_actions(codec):
    cases = repair_cases({"pkg/core.py": SOURCE}, 30, seed=1, line_shift=20, rename_paths=0.5)
    plain = repair_cases({"pkg/core.py": SOURCE}, 30, seed=1)
    assert len({c.edit["line"] for c in cases}) > len({c.edit["line"] for c in plain})
    renamed = [c for c in cases if c.path != "pkg/core.py"]
    assert 5 < len(renamed) < 25 and all(c.path.endswith("/core.py") for c in renamed)
    for c in cases:
        shown = {(s.path, s.line): s.text for s in suspicious_lines(c.observation)}
        assert (c.edit["path"], c.edit["line"]) in shown  # the bug is listed where it now is
        assert c.edit["old"] in shown[(c.edit["path"], c.edit["line"])]
    p = PretrainParams(episodes=4, train_on="actions")
    for ids, mask in synthetic_episodes({"pkg/core.py": SOURCE}, codec, p):
        trained = codec.decode([i for i, m in zip(ids, mask) if m])
        assert 0 < sum(mask) < len(ids) and "suspicious lines" not in trained
        assert [a.call.name for a in map(parse_action, trained.split("<|im_end|>")[:-1])] == [
            "run_tests", "edit", "run_tests", "submit"]
    with pytest.raises(Exception, match="policy.pretrain.rename_paths"):
        PretrainParams(rename_paths=2.0).check()


def test_copy_drills_train_only_the_edit_of_a_listed_line(codec):
    p = PretrainParams(drills=10, line_shift=5, rename_paths=0.5)
    drills = copy_drills({"pkg/core.py": SOURCE}, codec, p)
    assert len(drills) == 10
    for ids, mask in drills:
        text = codec.decode(ids)
        trained = codec.decode([i for i, m in zip(ids, mask) if m])
        assert "<|im_start|>system" not in text and "suspicious lines" in text
        edit = parse_action(trained.removesuffix("<|im_end|>")).call
        assert edit.name == "edit"
        shown = {(s.path, s.line) for s in suspicious_lines(text)}
        assert (edit.args["path"], edit.args["line"]) in shown
        assert "=====" not in text and "FAILED" not in text  # the section alone
    for case in repair_cases({"pkg/core.py": SOURCE}, 5, seed=2):
        assert case.suspects.startswith("suspicious lines (") and case.suspects in case.observation
        assert suspicious_lines(case.suspects) == suspicious_lines(case.observation)
    rows = pretrain_rows({"pkg/core.py": SOURCE}, codec, dataclasses.replace(
        p, episodes=2, code_chunk_tokens=32))
    assert sum(r["trajectory_id"].startswith("pretrain-") for r in rows) == len(rows) > 12


def test_copy_profile_tells_a_copied_location_from_one_written_from_memory():
    case = repair_cases({"pkg/core.py": SOURCE}, 1, seed=3)[0]
    exact = parse_action(format_tool_call("edit", case.edit))
    assert _copy_profile(case, exact) == dict.fromkeys(
        ("parsed", "edit", "path_flagged", "line_flagged", "bug_line", "old_in_line", "fixed"),
        True)
    ranked = case.edit_args("suspect")            # addressed by its rank in the listing
    assert set(ranked) == {"suspect", "old", "new"}
    assert suspicious_lines(case.observation)[ranked["suspect"] - 1].line == case.edit["line"]
    assert _copy_profile(case, parse_action(format_tool_call("edit", ranked))) == \
        _copy_profile(case, exact)
    named = case.edit_args("fix")                 # a named rewrite of the listed line
    if case.fix is not None:
        assert set(named) - {"nth"} == {"suspect", "fix"} and named["suspect"] == ranked["suspect"]
        assert _copy_profile(case, parse_action(format_tool_call("edit", named)))["fixed"]
        other_fix = next(f for f in ("+1", "swap", "not", "or") if f != case.fix[0])
        assert not _copy_profile(case, parse_action(format_tool_call(
            "edit", {**named, "fix": other_fix})))["fixed"]
    else:
        assert named == ranked
    fixes = [c.fix for c in repair_cases({"pkg/core.py": SOURCE}, 12, seed=3)]
    assert any(f is not None for f in fixes)  # comparison / arithmetic bugs have one
    wrong = {**ranked, "old": "zzz"}
    assert not _copy_profile(case, parse_action(format_tool_call("edit", wrong)))["fixed"]
    other = next(s for s in suspicious_lines(case.observation) if s.line != case.edit["line"])
    elsewhere = parse_action(format_tool_call(
        "edit", {"path": "pkg/core.py", "line": other.line, "old": "zzz", "new": "y"}))
    prof = _copy_profile(case, elsewhere)
    assert prof["line_flagged"] and not prof["bug_line"] and not prof["old_in_line"]
    memory = parse_action(format_tool_call(
        "edit", {"path": "pkg/other.py", "line": case.edit["line"], "old": "<", "new": ">"}))
    assert not _copy_profile(case, memory)["path_flagged"]
    assert _copy_profile(case, parse_action("no call")) == {}


def test_copy_probe_runs_greedy_on_a_model_and_reports_rates(codec):
    from rlvr.engines.model_dir import load_policy

    model = load_policy(tiny_policy_dir()).model
    cases = repair_cases({"pkg/core.py": SOURCE}, 3, seed=0)
    rates = copy_probe(cases, codec, max_new_tokens=8, batch=2)(0, model)
    assert set(rates) == {f"copy_{k}" for k in ("parsed", "edit", "path_flagged",
                                                 "line_flagged", "bug_line", "old_in_line",
                                                 "fixed")}
    # an untrained model emits no 8-token tool call: nothing parses, nothing is copied
    assert all(v == 0.0 for v in rates.values())


def test_suspicious_lines_reads_the_plugin_format():
    out = ("..F\nsuspicious lines (run by failing tests, not by passing ones):\n"
           "pkg/a.py:7: if x < lo:  [2 failing, 0 passing]\n"
           "pkg/a.py:9:   [1 failing, 3 passing]\nFAILED tests/test_a.py::t\n")
    got = suspicious_lines(out)
    assert [(s.path, s.line, s.text, s.failing, s.passing) for s in got] == [
        ("pkg/a.py", 7, "if x < lo:", 2, 0), ("pkg/a.py", 9, "", 1, 3)]
    assert suspicious_lines("pkg/a.py:7: x  [1 failing, 0 passing]") == []  # no header
