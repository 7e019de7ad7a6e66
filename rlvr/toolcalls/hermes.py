"""`hermes`: Qwen2.5 / Qwen3 (and most open instruct models trained on Hermes-style calls).

What Qwen's chat template renders for an assistant message with content C and one call:

    C\n<tool_call>\n{"name": "view", "arguments": {"path": "a.py"}}\n</tool_call><|im_end|>

(no C: the call alone; `arguments` rendered with `tojson`, i.e. json.dumps' separators,
non-ASCII as is). Thinking models may open the turn with `<think>...</think>`.

Parsing, as lenient as a native model needs and no more:
* thinking: a turn that opens with `<think>` thinks up to its first `</think>`; otherwise a
  `</think>` before the first `<tool_call>` ends the thinking (templates that open the
  `<think>` in the generation prompt). Text inside the thinking may mention `<tool_call>`.
* the call is the JSON value right after the first `<tool_call>` after the thinking, with or
  without the newlines around it; `</tool_call>`, then only whitespace to the end of the turn.
* the envelope is exactly `{"name": str, "arguments": {...}}` (arguments given as a JSON
  *string* is `bad_call`: the canonical form is an object).
* one call per turn (base.py): a second `<tool_call>` is `multiple_tool_calls`.
The rest is rlvr's parser with these markers: the same reason kinds for the same faults.

On Qwen's vocabulary `<tool_call>`, `</tool_call>`, `<think>`, `</think>` are added tokens (one
token each); the grammar refers to them as tokens, and builds text-matching lexemes instead
for a vocabulary where they are text (`grammar(special_tokens=...)`).
"""
from __future__ import annotations

import json
from typing import Any, Collection, Mapping

from rlvr.toolcalls.base import ParsedAction, ToolCallFormat, Validate, regex_escape, symbol

OPEN, CLOSE = "<tool_call>", "</tool_call>"
THINK, THINK_END = "<think>", "</think>"
IM_END = "<|im_end|>"
_SPECIAL = ("<|endoftext|>", "<|im_start|>", IM_END)
# Qwen's added tokens: tokenizer.json flags only the first three special, but llguidance's
# tokenizer (`llguidance.hf`) treats every added token as a special token (matched by
# reference, never by its text), and so do the grammars here.
_ADDED = (*_SPECIAL, OPEN, CLOSE, THINK, THINK_END, "<tool_response>", "</tool_response>")


class HermesFormat(ToolCallFormat):
    name = "hermes"
    args_key = "arguments"
    end_of_turn = IM_END
    markers = (OPEN, CLOSE, THINK, THINK_END, "<tool_response>", "</tool_response>")
    special_tokens = _ADDED

    def write(self, name: str, args: Mapping[str, Any], reasoning: str = "") -> str:
        prefix = f"{reasoning.strip()}\n" if reasoning.strip() else ""
        return f"{prefix}{OPEN}\n{self.envelope(name, args)}\n{CLOSE}"

    def parse(self, text: str, tools: Mapping[str, Any],
              validate: Validate | None = None) -> ParsedAction:
        return self.parse_marked(text, OPEN, CLOSE, tools, validate, after=_thinking_end(text))

    def grammar(self, schemas: Mapping[str, Mapping[str, Any]], *, end_of_turn: str | None = None,
                special_tokens: Collection[str] | None = None) -> str:
        """Optional thinking `<think>...</think>`, reasoning, `<tool_call>\\n`, one canonical call
        to a tool of `schemas`, `\\n</tool_call>`, the end of turn. Thinking and reasoning hold
        no marker's spelling (the reasoning no thinking marker either), so the parser reads
        the turn as the grammar built it. A marker that is a special token of the vocabulary
        is referred to as one; a marker that is text is joined with the text before it into
        one lexeme that ends at its first occurrence, so the lexer never has to guess where
        the reasoning stops."""
        specials = self.specials(special_tokens)
        end = end_of_turn or self.end_of_turn
        call = self.call_json_schema(schemas)
        banned = sorted({OPEN, CLOSE, "<tool_response>", "</tool_response>", end, *_SPECIAL,
                         *specials} - {THINK, THINK_END})
        spelled = "|".join(regex_escape(t) for t in banned)
        think, think_end = regex_escape(THINK), regex_escape(THINK_END)
        lines = [f"THOUGHT: /(?s:.*)/ & ~/(?s:.*)({think_end}|{spelled})(?s:.*)/",
                 f"TEXT: /(?s:.*)/ & ~/(?s:.*)({think}|{think_end}|{spelled})(?s:.*)/"]
        if THINK in specials:  # <think> THOUGHT </think> as a rule of tokens
            head, prefix = "thinking? ", "TEXT"
            lines.append(f"thinking: {THINK} THOUGHT {symbol(THINK_END, specials)}")
        else:  # ... or inside the lexeme that ends the text before the call
            head, prefix = "", f'("{THINK}" THOUGHT "{THINK_END}")? TEXT'
        if OPEN in specials:
            start = f"{head}PREFIX {OPEN}"
            lines.append(f"PREFIX: {prefix}")
        else:
            start = f"{head}OPEN"
            lines.append(f"OPEN: {prefix} {json.dumps(OPEN)}")
        return "\n".join([
            f"start: {start} \"\\n\" call \"\\n\" {symbol(CLOSE, specials)} {symbol(end, specials)}",
            *lines,
            f"call: %json {json.dumps(call)}",
        ])


def _thinking_end(text: str) -> int:
    """Where the turn's thinking ends (0: no thinking)."""
    close = text.find(THINK_END)
    if close < 0:
        return 0
    first_call = text.find(OPEN)
    if text.lstrip().startswith(THINK) or first_call < 0 or close < first_call:
        return close + len(THINK_END)
    return 0


HERMES = HermesFormat()
