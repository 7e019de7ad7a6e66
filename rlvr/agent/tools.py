"""The agent's tool contract: JSON schemas, the one tool-call syntax, and its parser.

Every assistant turn is optional reasoning text followed by exactly one
`<tool_call>{"name": ..., "args": {...}}</tool_call>` and the end-of-turn token (the `rlvr`
tool-call format, `rlvr.toolcalls`; `format` names another registered one). The policy,
the scripted teacher and any external teacher emit this same syntax (`format_tool_call`), and
one parser (`parse_action`) decides validity for all of them, so "parses against its schema"
means the same thing in rollouts, SFT data and the release gate (SPEC §8.3).

An invalid action is data, not an exception: `parse_action` always returns a `ParsedAction`
whose `error_kind` says what was wrong (the episode records it and answers with an error
observation).
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

import jsonschema

from rlvr.agent.fixes import FIXES
from rlvr.toolcalls import DEFAULT_FORMAT, get_format
from rlvr.toolcalls.base import ACTION_ERRORS, ParsedAction, ToolCall

__all__ = ["ACTION_ERRORS", "CALL_SCHEMA", "ParsedAction", "TOOL_NAMES", "TOOL_SCHEMAS", "ToolCall",
           "format_tool_call", "openai_tools", "parse_action", "tools_fingerprint", "validate_call"]

_PATH = {"type": "string", "minLength": 1, "maxLength": 512}

# One JSON schema (draft 2020-12) per tool: the arguments object of the call.
TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    "view": {
        "description": "Show a text file with line numbers (optionally lines start..end, "
                       "1-based, inclusive), or list the files under a directory.",
        "type": "object",
        "properties": {
            "path": _PATH,
            "start": {"type": "integer", "minimum": 1},
            "end": {"type": "integer", "minimum": 1},
        },
        "required": ["path"],
        "additionalProperties": False,
    },
    "search": {
        "description": "Find the lines containing a literal string (not a regex) in the text "
                       "files under `path` (default: the whole repository).",
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "maxLength": 200},
            "path": _PATH,
        },
        "required": ["pattern"],
        "additionalProperties": False,
    },
    "run_tests": {
        "description": "Run the public tests with pytest (all of them, or one public test "
                       "file / node id).",
        "type": "object",
        "properties": {"path": _PATH},
        "additionalProperties": False,
    },
    "edit": {
        "description": "Change a source file: replace `old` by `new` within line `line` (as "
                       "numbered by `view`, a traceback or run_tests; `old` must occur exactly "
                       "once in that line), or replace the exact text `old` (must occur exactly "
                       "once in the file) by `new`, or rewrite suspicious line `suspect` of the "
                       "last run_tests by a named `fix` (e.g. `<=`, `+1`, `not`, `swap`; `nth` "
                       "picks the line's n-th site), or apply one unified-diff hunk.",
        "oneOf": [
            {
                # the line-addressed edit: the primary action of small policies, which cannot
                # copy long spans from their context (issue "Learning I" §4)
                "type": "object",
                "properties": {
                    "path": _PATH,
                    "line": {"type": "integer", "minimum": 1},
                    "old": {"type": "string", "minLength": 1, "maxLength": 200},
                    "new": {"type": "string", "maxLength": 200},
                },
                "required": ["path", "line", "old", "new"],
                "additionalProperties": False,
            },
            {
                "type": "object",
                "properties": {
                    "path": _PATH,
                    "old": {"type": "string", "minLength": 1},
                    "new": {"type": "string"},
                },
                "required": ["path", "old", "new"],
                "additionalProperties": False,
            },
            {
                # addressed by the last run_tests' suspicious lines (1 = the first listed):
                # nothing to copy but `old`, the few characters to change
                "type": "object",
                "properties": {
                    "suspect": {"type": "integer", "minimum": 1},
                    "old": {"type": "string", "minLength": 1, "maxLength": 200},
                    "new": {"type": "string", "maxLength": 200},
                },
                "required": ["suspect", "old", "new"],
                "additionalProperties": False,
            },
            {
                # a named rewrite of a suspicious line (rlvr.agent.fixes): nothing copied at
                # all, the edit of policies that cannot copy even `old`
                "type": "object",
                "properties": {
                    "suspect": {"type": "integer", "minimum": 1},
                    "fix": {"enum": list(FIXES)},
                    "nth": {"type": "integer", "minimum": 1},
                },
                "required": ["suspect", "fix"],
                "additionalProperties": False,
            },
            {
                "type": "object",
                "properties": {"path": _PATH, "hunk": {"type": "string", "minLength": 1}},
                "required": ["path", "hunk"],
                "additionalProperties": False,
            },
        ],
    },
    "submit": {
        "description": "End the episode; the current state of the source files is the answer.",
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    },
}
TOOL_NAMES: tuple[str, ...] = tuple(TOOL_SCHEMAS)

# The envelope around every call.
CALL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "args": {"type": "object"}},
    "required": ["name", "args"],
    "additionalProperties": False,
}

# Why an action was invalid (recorded per turn; "" = valid): `rlvr.toolcalls.base.ACTION_ERRORS`,
# the same kinds in every tool-call format.

_VALIDATORS = {name: jsonschema.Draft202012Validator(schema)
               for name, schema in TOOL_SCHEMAS.items()}
for _schema in (*TOOL_SCHEMAS.values(), CALL_SCHEMA):
    jsonschema.Draft202012Validator.check_schema(_schema)


def format_tool_call(name: str, args: dict[str, Any], reasoning: str = "",
                     format: str = DEFAULT_FORMAT) -> str:
    """The canonical text of one assistant action (without the end-of-turn token) in tool-call
    format `format` (`rlvr.toolcalls`)."""
    return get_format(format).write(name, args, reasoning)


def validate_call(name: str, args: Any) -> str:
    """'' if `args` is valid for tool `name`, else a one-line reason."""
    validator = _VALIDATORS.get(name)
    if validator is None:
        return f"unknown tool {name!r} (tools: {', '.join(TOOL_NAMES)})"
    error = jsonschema.exceptions.best_match(validator.iter_errors(args))
    if error is None:
        return ""
    where = "/".join(str(p) for p in error.absolute_path)
    if name == "edit" and error.validator == "oneOf":
        return ("edit takes {\"path\", \"line\", \"old\", \"new\"}, {\"path\", \"old\", "
                "\"new\"}, {\"suspect\", \"old\", \"new\"}, {\"suspect\", \"fix\"[, \"nth\"]} "
                "or {\"path\", \"hunk\"} (line, suspect, nth integers >= 1; fix one of "
                + " ".join(FIXES) + "; the rest strings)")
    return f"{name}: {'args/' + where + ': ' if where else ''}{error.message}"


def parse_action(text: str, format: str = DEFAULT_FORMAT) -> ParsedAction:
    """Parse the text of one assistant turn (end-of-turn token excluded) in tool-call format
    `format` (`rlvr.toolcalls`): the call against TOOL_SCHEMAS (`validate_call`'s reasons), or
    the invalid action with its reason kind.

    In the `rlvr` format the call is the one JSON value right after the first `<tool_call>`.
    Its strings may hold any text, the tool-call markers included (an `old` of "</tool_call>"
    is a legal, if odd, argument), so the markers are looked for around that value, never
    inside it; that is what lets `rlvr.agent.grammar` promise that every turn it admits
    parses."""
    return get_format(format).parse(text, TOOL_SCHEMAS, validate_call)


def openai_tools() -> list[dict[str, Any]]:
    """The tools as chat templates and OpenAI-compatible APIs declare them:
    `{"type": "function", "function": {"name", "description", "parameters"}}` per tool."""
    return [{"type": "function", "function": {
        "name": name, "description": schema["description"],
        "parameters": {k: v for k, v in schema.items() if k != "description"}}}
        for name, schema in TOOL_SCHEMAS.items()]


def tools_fingerprint() -> str:
    """Hash of every tool schema: part of the environment version of each rollout."""
    blob = json.dumps(TOOL_SCHEMAS, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]
