"""The tool-call format as rlvr/agent/tools.py and rlvr/agent/grammar.py wrote it before the
formats moved to `rlvr.toolcalls` (main at 4eb8b22), frozen verbatim: the `rlvr` format must
stay byte-identical to it (tests/test_toolcall_formats.py)."""
from __future__ import annotations

import json
from typing import Any, Mapping

import jsonschema

from rlvr.agent.tools import (CALL_SCHEMA, TOOL_NAMES, TOOL_SCHEMAS, ParsedAction, ToolCall,
                              validate_call)
from rlvr.chat_format import IM_END, SPECIAL_TOKENS, TOOL_CALL, TOOL_CALL_END
from rlvr.chat_format import TOOL_CALL as TOOL_CALL_OPEN
from rlvr.chat_format import TOOL_CALL_END as TOOL_CALL_CLOSE

_CALL_VALIDATOR = jsonschema.Draft202012Validator(CALL_SCHEMA)
_JSON = json.JSONDecoder()


def format_tool_call(name: str, args: dict[str, Any], reasoning: str = "") -> str:
    """The canonical text of one assistant action (without the end-of-turn token)."""
    body = json.dumps({"name": name, "args": args}, ensure_ascii=False)
    prefix = f"{reasoning.strip()}\n" if reasoning.strip() else ""
    return f"{prefix}{TOOL_CALL_OPEN}{body}{TOOL_CALL_CLOSE}"


def parse_action(text: str) -> ParsedAction:
    """Parse the text of one assistant turn (end-of-turn token excluded).

    The call is the one JSON value right after the first `<tool_call>`. Its strings may hold
    any text, the tool-call markers included (an `old` of "</tool_call>" is a legal, if odd,
    argument), so the markers are looked for around that value, never inside it; that is
    what lets `rlvr.agent.grammar` promise that every turn it admits parses."""
    start = text.find(TOOL_CALL_OPEN)
    if start < 0:
        return _invalid("missing_tool_call",
                        f"no {TOOL_CALL_OPEN}...{TOOL_CALL_CLOSE} in the turn")
    body = start + len(TOOL_CALL_OPEN)
    body += len(text[body:]) - len(text[body:].lstrip())
    try:
        obj, end = _JSON.raw_decode(text, body)
    except (json.JSONDecodeError, RecursionError) as exc:
        if text.count(TOOL_CALL_OPEN) > 1:
            return _multiple(text)
        if text.find(TOOL_CALL_CLOSE, body) < 0:
            return _invalid("unterminated_tool_call", f"{TOOL_CALL_OPEN} without {TOOL_CALL_CLOSE}")
        return _invalid("bad_json", f"tool call is not valid JSON: {exc}")
    rest = text[end:].lstrip()
    if not rest.startswith(TOOL_CALL_CLOSE):
        if TOOL_CALL_OPEN in rest:
            return _multiple(text)
        if TOOL_CALL_CLOSE not in rest:
            return _invalid("unterminated_tool_call", f"{TOOL_CALL_OPEN} without {TOOL_CALL_CLOSE}")
        return _invalid("bad_json", f"tool call is not valid JSON: text after the JSON value, "
                                    f"before {TOOL_CALL_CLOSE}")
    after = rest[len(TOOL_CALL_CLOSE):]
    if after.strip():
        if TOOL_CALL_OPEN in after:
            return _multiple(text)
        return _invalid("text_after_tool_call",
                        f"text after {TOOL_CALL_CLOSE}; end the turn right after the call")
    error = jsonschema.exceptions.best_match(_CALL_VALIDATOR.iter_errors(obj))
    if error is not None or not isinstance(obj, dict):
        return _invalid("bad_call", 'tool call must be {"name": "<tool>", "args": {...}}')
    name, args = obj["name"], obj["args"]
    if name not in TOOL_SCHEMAS:
        return _invalid("unknown_tool", f"unknown tool {name!r} (tools: {', '.join(TOOL_NAMES)})")
    reason = validate_call(name, args)
    if reason:
        return _invalid("bad_args", reason)
    return ParsedAction(ToolCall(name, args))


def _multiple(text: str) -> ParsedAction:
    return _invalid("multiple_tool_calls",
                    f"{text.count(TOOL_CALL_OPEN)} tool calls in one turn (exactly one)")


def _invalid(kind: str, message: str) -> ParsedAction:
    return ParsedAction(None, kind, message)


def turn_grammar(schemas: Mapping[str, Mapping[str, Any]]) -> str:
    """Reasoning, one canonical call to a tool of `schemas` (name -> args schema), the end."""
    call = {"anyOf": [{"type": "object",
                       "properties": {"name": {"const": name}, "args": _bare(schema)},
                       "required": ["name", "args"], "additionalProperties": False}
                      for name, schema in schemas.items()],
            "x-guidance": {"whitespace_flexible": False, "item_separator": ", ",
                           "key_separator": ": "}}
    spelled = "|".join("".join("\\" + c if c in "|/" else c for c in t) for t in SPECIAL_TOKENS)
    return "\n".join([
        f"start: REASONING {TOOL_CALL} call {TOOL_CALL_END} {IM_END}",
        f"REASONING: /(?s:.*)/ & ~/(?s:.*)({spelled})(?s:.*)/",
        f"call: %json {json.dumps(call)}",
    ])


def _bare(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A schema without its prose (descriptions do not constrain anything)."""
    return {k: v for k, v in schema.items() if k != "description"}


def _bare(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A schema without its prose (descriptions do not constrain anything)."""
    return {k: v for k, v in schema.items() if k != "description"}
