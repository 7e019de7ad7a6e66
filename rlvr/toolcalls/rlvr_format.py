"""`rlvr`: the CPU default's format (`rlvr.chat_format`), the one every stage spoke first.

    reasoning text\n<tool_call>{"name": "view", "args": {"path": "a.py"}}</tool_call><|im_end|>

The markers are special tokens of the local policy's vocabulary; the body is the JSON value
right after the first `<tool_call>`. Its strings may hold any text, the markers included (an
`old` of "</tool_call>" is a legal, if odd, argument), so the markers are looked for around
that value, never inside it; that is what lets the grammar promise that every turn it admits
parses.
"""
from __future__ import annotations

import json
from typing import Any, Collection, Mapping

from rlvr.chat_format import IM_END, SPECIAL_TOKENS, TOOL_CALL, TOOL_CALL_END
from rlvr.toolcalls.base import ParsedAction, ToolCallFormat, Validate, symbol


class RlvrFormat(ToolCallFormat):
    name = "rlvr"
    args_key = "args"
    end_of_turn = IM_END
    markers = (TOOL_CALL, TOOL_CALL_END)
    special_tokens = SPECIAL_TOKENS

    def write(self, name: str, args: Mapping[str, Any], reasoning: str = "") -> str:
        body = self.envelope(name, args)
        prefix = f"{reasoning.strip()}\n" if reasoning.strip() else ""
        return f"{prefix}{TOOL_CALL}{body}{TOOL_CALL_END}"

    def parse(self, text: str, tools: Mapping[str, Any],
              validate: Validate | None = None) -> ParsedAction:
        return self.parse_marked(text, TOOL_CALL, TOOL_CALL_END, tools, validate)

    def grammar(self, schemas: Mapping[str, Mapping[str, Any]], *, end_of_turn: str | None = None,
                special_tokens: Collection[str] | None = None) -> str:
        """Reasoning (no special token's spelling), `<tool_call>`, one canonical call to a tool
        of `schemas` (these separators, keys in schema order, each tool's JSON schema),
        `</tool_call>`, the end of turn."""
        specials = self.specials(special_tokens)
        end = end_of_turn or self.end_of_turn
        call = self.call_json_schema(schemas)
        spelled = "|".join("".join("\\" + c if c in "|/" else c for c in t)
                           for t in SPECIAL_TOKENS)
        return "\n".join([
            f"start: REASONING {symbol(TOOL_CALL, specials)} call "
            f"{symbol(TOOL_CALL_END, specials)} {symbol(end, specials)}",
            f"REASONING: /(?s:.*)/ & ~/(?s:.*)({spelled})(?s:.*)/",
            f"call: %json {json.dumps(call)}",
        ])


RLVR = RlvrFormat()
