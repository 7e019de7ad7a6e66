"""Tool schemas, the tool-call parser, hunks and the observation cap."""
from __future__ import annotations

import json

import jsonschema
import pytest
from callkit import VALID_CALLS

from rlvr.agent.executor import cap_text
from rlvr.agent.hunks import HunkError, apply_hunk
from rlvr.agent.tools import (ACTION_ERRORS, TOOL_NAMES, TOOL_SCHEMAS, format_tool_call,
                              parse_action, validate_call)


@pytest.mark.parametrize("name,args", VALID_CALLS)
def test_formatted_calls_parse_back(name, args):
    text = format_tool_call(name, args, "Some reasoning first.")
    parsed = parse_action(text)
    assert parsed.valid, parsed.error
    assert parsed.call.name == name and parsed.call.args == args
    assert parse_action(text + "\n  ").valid  # trailing whitespace before end of turn is fine


def test_every_tool_schema_is_a_valid_json_schema():
    assert set(TOOL_NAMES) == {"view", "search", "run_tests", "edit", "submit"}
    for schema in TOOL_SCHEMAS.values():
        jsonschema.Draft202012Validator.check_schema(schema)


INVALID = [
    ("I will just fix it.", "missing_tool_call"),
    ('<tool_call>{"name": "submit", "args": {}}</tool_call><tool_call>{"name": "submit", '
     '"args": {}}</tool_call>', "multiple_tool_calls"),
    ('<tool_call>{"name": "submit", "args": {}}', "unterminated_tool_call"),
    ('<tool_call>{"name": "submit", "args": {}}</tool_call> and then more', "text_after_tool_call"),
    ("<tool_call>{name: submit}</tool_call>", "bad_json"),
    ('<tool_call>["submit"]</tool_call>', "bad_call"),
    ('<tool_call>{"name": "submit"}</tool_call>', "bad_call"),
    ('<tool_call>{"name": "submit", "args": {}, "x": 1}</tool_call>', "bad_call"),
    ('<tool_call>{"name": "rm", "args": {"path": "/"}}</tool_call>', "unknown_tool"),
    ('<tool_call>{"name": "view", "args": {}}</tool_call>', "bad_args"),
    ('<tool_call>{"name": "view", "args": {"path": "a", "start": "3"}}</tool_call>', "bad_args"),
    ('<tool_call>{"name": "view", "args": {"path": "a", "start": true}}</tool_call>', "bad_args"),
    ('<tool_call>{"name": "view", "args": {"path": "a", "start": 0}}</tool_call>', "bad_args"),
    ('<tool_call>{"name": "search", "args": {"pattern": ""}}</tool_call>', "bad_args"),
    ('<tool_call>{"name": "edit", "args": {"path": "a", "old": "x"}}</tool_call>', "bad_args"),
    ('<tool_call>{"name": "edit", "args": {"path": "a", "old": "x", "new": "y", "hunk": "z"}}'
     '</tool_call>', "bad_args"),
    ('<tool_call>{"name": "submit", "args": {"now": true}}</tool_call>', "bad_args"),
    ('<tool_call>{"name": "edit", "args": {"suspect": 0, "old": "<", "new": "<="}}</tool_call>',
     "bad_args"),
    ('<tool_call>{"name": "edit", "args": {"suspect": 1, "path": "a", "old": "<", "new": "x"}}'
     '</tool_call>', "bad_args"),
    ('<tool_call>{"name": "run_tests", "args": {"path": 3}}</tool_call>', "bad_args"),
]


@pytest.mark.parametrize("text,kind", INVALID)
def test_invalid_actions_are_classified_not_raised(text, kind):
    parsed = parse_action(text)
    assert not parsed.valid
    assert parsed.call is None
    assert parsed.error_kind == kind
    assert kind in ACTION_ERRORS
    assert parsed.error


def test_deeply_nested_json_is_an_invalid_action_not_a_crash():
    text = "<tool_call>" + "[" * 100_000 + "]" * 100_000 + "</tool_call>"
    assert parse_action(text).error_kind in ("bad_json", "bad_call")


def test_edit_schema_message_names_both_forms():
    reason = validate_call("edit", {"path": "a", "old": "x"})
    assert '"old"' in reason and '"hunk"' in reason


def test_format_is_the_shared_syntax():
    text = format_tool_call("submit", {})
    assert text == '<tool_call>{"name": "submit", "args": {}}</tool_call>'
    assert json.loads(text[len("<tool_call>"):-len("</tool_call>")]) == {"name": "submit",
                                                                         "args": {}}


# ---- hunks ----------------------------------------------------------------------------------
SOURCE = "def f(x):\n    if x < 1:\n        return 0\n    return x\n"


def test_hunk_applies_by_content_even_with_a_wrong_line_number():
    hunk = "@@ -40,3 +40,3 @@\n def f(x):\n-    if x < 1:\n+    if x <= 1:\n         return 0\n"
    assert apply_hunk(SOURCE, hunk) == SOURCE.replace("x < 1", "x <= 1")


def test_hunk_tolerates_file_headers_and_no_header():
    hunk = "--- a/f.py\n+++ b/f.py\n-    return x\n+    return x + 1\n"
    assert apply_hunk(SOURCE, hunk).endswith("    return x + 1\n")


def test_hunk_errors_are_messages():
    with pytest.raises(HunkError, match="do not match"):
        apply_hunk(SOURCE, "-    if x > 1:\n+    if x >= 1:\n")
    with pytest.raises(HunkError, match="changes nothing"):
        apply_hunk(SOURCE, " def f(x):\n")
    with pytest.raises(HunkError, match="one hunk"):
        apply_hunk(SOURCE, "@@ -1 +1 @@\n-def f(x):\n+def g(x):\n@@ -2 +2 @@\n-a\n+b\n")
    with pytest.raises(HunkError, match="must start with"):
        apply_hunk(SOURCE, "*    if x < 1:\n")
    twice = "a = 1\nb = 2\na = 1\n"
    with pytest.raises(HunkError, match="matches 2 places"):
        apply_hunk(twice, "-a = 1\n+a = 3\n")
    assert apply_hunk(twice, "@@ -3,1 +3,1 @@\n-a = 1\n+a = 3\n") == "a = 1\nb = 2\na = 3\n"


def test_hunk_keeps_a_missing_final_newline_missing():
    assert apply_hunk("a\nb", "-b\n+c\n") == "a\nc"


# ---- observation cap ------------------------------------------------------------------------------
def test_cap_text_marks_what_it_drops():
    text = "".join(str(i % 10) for i in range(1000))
    capped, truncated = cap_text(text, 100)
    assert truncated
    assert "[... truncated 900 chars]" in capped
    assert capped.startswith(text[:50]) and capped.endswith(text[-50:])
    assert cap_text("short", 100) == ("short", False)
