"""What a tool-call format is, and the pieces every format shares.

A format is the text a model writes for one action: optional reasoning, exactly one call,
the end of its turn. It has three faces, kept together so they cannot drift apart:

* `parse(text, tools)` — the text of one assistant turn (end-of-turn token excluded) to a
  `ParsedAction`: the call, or the invalid reason (`ACTION_ERRORS`). An invalid action is
  data, never an exception.
* `write(name, args, reasoning="")` — the canonical text of one action (what teachers and
  pretraining write; what the chat template renders for that call).
* `grammar(schemas, ...)` — the Lark source (llguidance's dialect) of one turn in the
  canonical form. Every turn it admits parses.

One call per turn, in every format. Some templates invite several calls in one turn (Qwen's
"You may call one or more functions"); rlvr's episode is one call, one observation, so a
turn with more than one call is the invalid action `multiple_tool_calls`, whatever the
format, and the grammar admits exactly one.

The formats know nothing of the agent's tools: `parse` is given the tool schemas (name ->
JSON schema of the arguments) and, optionally, the agent's own `validate(name, args) -> ""
| reason` (the agent words its schema errors itself).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping

import jsonschema

# Why an action was invalid (recorded per turn; "" = valid). The same kinds in every format.
ACTION_ERRORS = (
    "",
    "missing_tool_call",      # no call at all
    "multiple_tool_calls",    # more than one call
    "unterminated_tool_call",  # an opening marker without its closing one
    "text_after_tool_call",   # anything but whitespace between the call and end of turn
    "bad_json",               # the call body is not JSON
    "bad_call",               # JSON, but not the format's envelope ({"name": str, <args>: {...}})
    "unknown_tool",           # name not among the tools
    "bad_args",               # args break the tool's schema
    "no_end_of_turn",         # the turn ended with end-of-text instead of end-of-turn
    "turn_too_long",          # the per-turn token budget cut the turn (episode truncated)
)

# name, args -> "" if valid, else a one-line reason
Validate = Callable[[str, Any], str]
_JSON = json.JSONDecoder()


@dataclass(frozen=True)
class ToolCall:
    name: str
    args: dict[str, Any]

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "args": self.args}, sort_keys=True,
                          ensure_ascii=False)


@dataclass(frozen=True)
class ParsedAction:
    """The outcome of parsing one assistant turn. `call` is set iff the action is valid."""

    call: ToolCall | None
    error_kind: str = ""
    error: str = ""

    @property
    def valid(self) -> bool:
        return self.call is not None


def invalid(kind: str, message: str) -> ParsedAction:
    assert kind in ACTION_ERRORS and kind, kind
    return ParsedAction(None, kind, message)


class ToolCallFormat:
    """One tool-call format. Subclasses set the class attributes and implement the three
    faces; `check_call` is the shared last step of every parser."""

    name: str = ""
    # the envelope's key for the arguments ("args", "arguments", "parameters")
    args_key: str = "args"
    # the end-of-turn token of the format's native chat format (the grammar's last symbol)
    end_of_turn: str = ""
    # other tokens that end a turn as validly (Llama 3's `<|eom_id|>`: "a tool result follows")
    also_ends_turn: tuple[str, ...] = ()
    # the marker spellings the format writes, and which of them are single special tokens
    # in its native vocabulary (the grammar refers to a special token by reference, to
    # anything else as text; a vocabulary may say otherwise: `grammar(special_tokens=...)`)
    markers: tuple[str, ...] = ()
    special_tokens: tuple[str, ...] = ()

    def parse(self, text: str, tools: Mapping[str, Any],
              validate: Validate | None = None) -> ParsedAction:
        raise NotImplementedError

    def write(self, name: str, args: Mapping[str, Any], reasoning: str = "") -> str:
        raise NotImplementedError

    def grammar(self, schemas: Mapping[str, Mapping[str, Any]], *, end_of_turn: str | None = None,
                special_tokens: Collection[str] | None = None) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<tool-call format {self.name!r}>"

    # -- shared steps ---------------------------------------------------------------------

    def check_call(self, obj: Any, tools: Mapping[str, Any],
                   validate: Validate | None = None) -> ParsedAction:
        """The decoded JSON body of one call -> the action: envelope, tool, arguments."""
        key = self.args_key
        if not (isinstance(obj, dict) and set(obj) == {"name", key}
                and isinstance(obj["name"], str) and isinstance(obj[key], dict)):
            return invalid("bad_call", f'tool call must be {{"name": "<tool>", "{key}": {{...}}}}')
        name, args = obj["name"], obj[key]
        if name not in tools:
            return invalid("unknown_tool", f"unknown tool {name!r} (tools: {', '.join(tools)})")
        reason = (validate or _schema_validator(tools))(name, args)
        if reason:
            return invalid("bad_args", reason)
        return ParsedAction(ToolCall(name, args))

    def parse_marked(self, text: str, opens: str, closes: str, tools: Mapping[str, Any],
                     validate: Validate | None = None, after: int = 0) -> ParsedAction:
        """The parse of a format that wraps the call's JSON in markers (`rlvr`, `hermes`):
        the JSON value right after the first `opens` at or after `after` (whitespace around
        it allowed), `closes`, then only whitespace to the end of the turn. The value's
        strings may hold the markers' spelling, so the markers are looked for around the
        value, never inside it; each fault gets the reason kind every format gives it."""
        start = text.find(opens, after)
        if start < 0:
            return invalid("missing_tool_call", f"no {opens}...{closes} in the turn")
        count = text.count(opens, start)
        multiple = invalid("multiple_tool_calls", f"{count} tool calls in one turn (exactly one)")
        unterminated = invalid("unterminated_tool_call", f"{opens} without {closes}")
        body = start + len(opens)
        body += len(text[body:]) - len(text[body:].lstrip())
        try:
            obj, end = _JSON.raw_decode(text, body)
        except (json.JSONDecodeError, RecursionError) as exc:
            if count > 1:
                return multiple
            if text.find(closes, body) < 0:
                return unterminated
            return invalid("bad_json", f"tool call is not valid JSON: {exc}")
        rest = text[end:].lstrip()
        if not rest.startswith(closes):
            if opens in rest:
                return multiple
            if closes not in rest:
                return unterminated
            return invalid("bad_json", f"tool call is not valid JSON: text after the JSON value, "
                                       f"before {closes}")
        tail = rest[len(closes):]
        if tail.strip():
            if opens in tail:
                return multiple
            return invalid("text_after_tool_call",
                           f"text after {closes}; end the turn right after the call")
        return self.check_call(obj, tools, validate)

    def envelope(self, name: str, args: Mapping[str, Any]) -> str:
        """The canonical JSON of one call: `{"name": ..., <args_key>: {...}}`, json.dumps'
        default separators, keys as given, non-ASCII as is."""
        return json.dumps({"name": name, self.args_key: args}, ensure_ascii=False)

    def call_json_schema(self, schemas: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """The JSON schema (llguidance `%json`) of one canonical call to a tool of `schemas`."""
        return {"anyOf": [{"type": "object",
                           "properties": {"name": {"const": name}, self.args_key: bare(schema)},
                           "required": ["name", self.args_key], "additionalProperties": False}
                          for name, schema in schemas.items()],
                "x-guidance": {"whitespace_flexible": False, "item_separator": ", ",
                               "key_separator": ": "}}

    def specials(self, special_tokens: Collection[str] | None) -> frozenset[str]:
        return frozenset(self.special_tokens if special_tokens is None else special_tokens)


def bare(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A schema without its prose (descriptions do not constrain anything)."""
    return {k: v for k, v in schema.items() if k != "description"}


def symbol(spelling: str, specials: Collection[str]) -> str:
    """A marker in a Lark rule: a special token's reference, or its text as a literal."""
    return spelling if spelling in specials else json.dumps(spelling)


def regex_escape(text: str) -> str:
    """`text` as a literal inside a Lark /regex/ of llguidance."""
    return "".join("\\" + c if c in "\\/|.*+?()[]{}^$" else c for c in text)


def _schema_validator(tools: Mapping[str, Any]) -> Validate:
    def validate(name: str, args: Any) -> str:
        error = jsonschema.exceptions.best_match(
            jsonschema.Draft202012Validator(tools[name]).iter_errors(args))
        if error is None:
            return ""
        where = "/".join(str(p) for p in error.absolute_path)
        return f"{name}: {'args/' + where + ': ' if where else ''}{error.message}"
    return validate
