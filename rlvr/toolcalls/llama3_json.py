"""`llama3_json`: Llama 3.x's JSON tool calls (the Llama 3.1/3.2/3.3 instruct templates).

What Llama's chat template renders for an assistant message with one call (content dropped):

    {"name": "view", "parameters": {"path": "a.py"}}<|eot_id|>

A model may also open the call with `<|python_tag|>` (its code-interpreter channel), which
the parser accepts. Llama's template renders no text beside a call; rlvr's canonical writer
keeps the reasoning before it, on its own lines:

    reasoning text\n{"name": "view", "parameters": {"path": "a.py"}}

Parsing:
* the call is the JSON value after the first `<|python_tag|>`, or else the one that starts
  the turn or the first line of the turn that starts with `{` (so reasoning must not start
  a line with `{`; the grammar enforces it);
* the envelope is exactly `{"name": str, "parameters": {...}}`;
* then only whitespace to the end of the turn. One call per turn (base.py): a second call
  after the first (`;`-separated, on the next line, or after another `<|python_tag|>`) is
  `multiple_tool_calls`; other text after it is `text_after_tool_call`.
Without markers there is no unterminated call: a cut-off body is `bad_json`.
"""
from __future__ import annotations

import json
import re
from typing import Any, Collection, Mapping

from rlvr.toolcalls.base import (ParsedAction, ToolCallFormat, Validate, invalid, regex_escape,
                                 symbol)

PYTHON_TAG = "<|python_tag|>"
EOT, EOM = "<|eot_id|>", "<|eom_id|>"
_SPECIAL = ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
            EOT, EOM, PYTHON_TAG)
_LINE_BRACE = re.compile(r"(?:^|\n)[ \t]*\{")
_JSON = json.JSONDecoder()


class Llama3JsonFormat(ToolCallFormat):
    name = "llama3_json"
    args_key = "parameters"
    end_of_turn = EOT
    also_ends_turn = (EOM,)
    markers = (PYTHON_TAG,)
    special_tokens = _SPECIAL

    def write(self, name: str, args: Mapping[str, Any], reasoning: str = "") -> str:
        prefix = f"{reasoning.strip()}\n" if reasoning.strip() else ""
        return f"{prefix}{self.envelope(name, args)}"

    def parse(self, text: str, tools: Mapping[str, Any],
              validate: Validate | None = None) -> ParsedAction:
        tag = text.find(PYTHON_TAG)
        if tag >= 0:
            body = tag + len(PYTHON_TAG)
            body += len(text[body:]) - len(text[body:].lstrip())
        else:
            match = _LINE_BRACE.search(text)
            if match is None:
                return invalid("missing_tool_call", 'no {"name": ..., "parameters": {...}} call '
                                                    "in the turn")
            body = match.end() - 1
        try:
            obj, end = _JSON.raw_decode(text, body)
        except (json.JSONDecodeError, RecursionError) as exc:
            return invalid("bad_json", f"tool call is not valid JSON: {exc}")
        rest = text[end:].strip()
        if rest:
            if _another_call(rest):
                return invalid("multiple_tool_calls", "more than one tool call in one turn "
                                                      "(exactly one)")
            return invalid("text_after_tool_call",
                           "text after the call; end the turn right after the call")
        return self.check_call(obj, tools, validate)

    def grammar(self, schemas: Mapping[str, Mapping[str, Any]], *, end_of_turn: str | None = None,
                special_tokens: Collection[str] | None = None) -> str:
        """Optional reasoning lines (none starting with `{`, no special token's spelling), one
        canonical call to a tool of `schemas` starting its line, the end of turn. The
        reasoning with its last newline is one lexeme (`PREFIX`): it cannot take the `{`
        that follows, so the lexer never guesses where it stops."""
        specials = self.specials(special_tokens)
        end = end_of_turn or self.end_of_turn
        call = self.call_json_schema(schemas)
        spelled = "|".join(regex_escape(t) for t in sorted({*_SPECIAL, *specials, end}))
        return "\n".join([
            f"start: PREFIX? call {symbol(end, specials)}",
            f"PREFIX: /[^{{\\s](?s:.*)\\n/ & ~/(?s:.*)(\\n[ \\t]*\\{{|{spelled})(?s:.*)/",
            f"call: %json {json.dumps(call)}",
        ])


def _another_call(rest: str) -> bool:
    rest = rest.lstrip("; \t\n")
    if rest.startswith(PYTHON_TAG):
        return True
    if not rest.startswith("{"):
        return False
    try:
        _JSON.raw_decode(rest)
    except (json.JSONDecodeError, RecursionError):
        return False
    return True


LLAMA3_JSON = Llama3JsonFormat()
