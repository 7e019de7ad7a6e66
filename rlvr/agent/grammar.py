"""The grammar of the agent's next turn, for constrained decoding (`Decoding.grammar`,
compiled and applied by `rlvr.engines.constraint`).

A grammar here is a function of the transcript so far (the decoded prompt of the turn) to a
Lark source in llguidance's dialect. The sampler and the trainer both derive it from the
same prompt tokens, so the masks the trainer replays are the sampler's. Two are registered
(`rlvr.engines.grammars`) when this module is imported, which `rlvr.agent` does with the
package, so any use of the agent can name them:

* `tool_call` — the contract, whatever the state: reasoning text, exactly one call in
  `format_tool_call`'s canonical form (these separators, keys in schema order, each tool's
  JSON schema), `</tool_call>`, `<|im_end|>`. Every turn it admits parses (`parse_action`),
  so a policy decoded under it makes no format error (SPEC §8.3), only wrong calls.
* `tool_call_fixes` — the same, with edits narrowed to the action space of a policy that
  cannot copy text out of its context (the CPU default, LEARNING.md): an edit is a named
  fix `{suspect, fix, nth}` of a line the last `run_tests` listed, and only a fix with a
  site on that line *as it now stands* (`nth` among those sites) — invalid-action
  masking: every edit it admits applies. Edits that need copied text (`old` strings,
  paths, hunks; ~99% of them failed for the CPU default's SFT policy) are outside it, and
  before any listing there is no edit at all. Nothing hidden is used: the suspicious
  lines and their text are in the observation, `rlvr.agent.fixes.sites` is a function of
  that text, and the edits since (`last_suspects`) are in the transcript.

* `tool_call.<format>` — `tool_call` in another tool-call format (`tool_call.hermes`,
  `tool_call.llama3_json`): the format's own grammar (`rlvr.toolcalls`) over the same
  schemas, for a policy that speaks through its chat template. `tool_call_fixes` reads
  rlvr's transcript layout and has no other-format form. `check_grammar_format` refuses a
  grammar of one format for a policy of another (its turns could never parse).

Reasoning may hold any text but the special tokens' spellings (the parser reads text, so
`<tool_call>` spelled with ordinary tokens would open a second call); the markers in the
grammar are the special tokens themselves.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from rlvr.agent.fixes import FIXES, FixError, apply_fix, sites
from rlvr.agent.observations import SuspiciousLine, suspicious_lines
from rlvr.agent.tools import TOOL_SCHEMAS, parse_action
from rlvr.chat_format import IM_END, IM_START
from rlvr.engines.grammars import register_grammar
from rlvr.errors import ConfigError
from rlvr.toolcalls import DEFAULT_FORMAT, FORMATS, get_format

# run_tests observations the executor treats as infrastructure failures: they clear the
# suspects (an ordinary error observation leaves them as they were)
_INFRA = ("this is not your fault", "no sandbox to run tests in")


def tool_call(transcript: str | None = None) -> str:
    """The `tool_call` grammar (the transcript plays no part)."""
    return turn_grammar(TOOL_SCHEMAS)


def tool_call_fixes(transcript: str | None = None) -> str:
    """The `tool_call_fixes` grammar after `transcript` (the turn's decoded prompt)."""
    return turn_grammar(fix_schemas(last_suspects(transcript or "")))


register_grammar("tool_call", tool_call, context_free=True)
register_grammar("tool_call_fixes", tool_call_fixes, context_free=False)


def _format_grammar(format: str):
    def source(transcript: str | None = None) -> str:
        """`tool_call` in tool-call format `format`."""
        return turn_grammar(TOOL_SCHEMAS, format)
    return source


for _name in FORMATS:
    if _name != DEFAULT_FORMAT:
        register_grammar(f"tool_call.{_name}", _format_grammar(_name), context_free=True)


def check_grammar_format(grammar: str, format: str, where: str = "decoding.grammar") -> None:
    """A ConfigError naming `where` when `grammar` constrains turns to another tool-call
    format than the policy's `format` ("" = unconstrained: any format)."""
    if not grammar:
        return
    speaks = grammar.split(".", 1)[1] if "." in grammar else DEFAULT_FORMAT
    if speaks != format:
        fix = "tool_call" if format == DEFAULT_FORMAT else f"tool_call.{format}"
        raise ConfigError(f"{where}: grammar {grammar!r} is the {speaks} tool-call format's; "
                          f"this policy speaks {format} (use {fix!r}, or \"\" for none)")


def turn_grammar(schemas: Mapping[str, Mapping[str, Any]], format: str = DEFAULT_FORMAT) -> str:
    """Reasoning, one canonical call to a tool of `schemas` (name -> args schema), the end, in
    tool-call format `format` (`rlvr.toolcalls`; each format builds its own grammar)."""
    return get_format(format).grammar(schemas)


def last_suspects(transcript: str) -> list[SuspiciousLine]:
    """The suspicious lines `suspect` ranks address after this transcript, as they stand:
    those of the last `run_tests` call that ran (an ordinary error observation leaves the
    previous ones, an infrastructure failure clears them), each line's text brought up to
    date by the edits of it that applied since (`_edited`), as far as the transcript says —
    so an undo right after a failed try is admitted on the line as it now is."""
    suspects: list[SuspiciousLine] = []
    segments = transcript.split(IM_START)
    for i, seg in enumerate(segments[:-1]):
        nxt = segments[i + 1]
        if not seg.startswith("assistant\n") or not nxt.startswith("tool\n") \
                or not ("run_tests" in seg or ("edit" in seg and suspects)):
            continue
        call = parse_action(seg[len("assistant\n"):].split(IM_END, 1)[0]).call
        shown = nxt[len("tool\n"):].split(IM_END, 1)[0]
        if call is None:
            continue
        if call.name == "edit" and shown.startswith("edited "):
            suspects = [_edited(s, rank, call.args) for rank, s in enumerate(suspects, 1)]
        elif call.name == "run_tests" and not (shown.startswith("error:")
                                               and not any(m in shown for m in _INFRA)):
            suspects = suspicious_lines(shown)
    return suspects


def _edited(s: SuspiciousLine, rank: int, args: Mapping[str, Any]) -> SuspiciousLine:
    """`s` after an edit that applied, if it addressed this line (by rank, or by path and
    line number) with a named fix or an `old` -> `new` within the line; else `s`."""
    if args.get("suspect", rank) != rank or args.get("path", s.path) != s.path \
            or args.get("line", s.line) != s.line or not ("suspect" in args or "line" in args):
        return s
    text = s.text
    if "fix" in args:
        try:
            text = apply_fix(text, args["fix"], args.get("nth", 1))
        except FixError:
            return s
    elif "old" in args and text.count(args["old"]) == 1:
        text = text.replace(args["old"], args["new"], 1)
    return dataclasses.replace(s, text=text)


def fix_schemas(suspects: Sequence[SuspiciousLine]) -> dict[str, dict[str, Any]]:
    """TOOL_SCHEMAS with `edit` narrowed to the named fixes that apply to `suspects`: per
    rank, the fixes with a site on the line (grouped by their number of sites, which bounds
    `nth`; the canonical call omits `nth` = 1). No applicable fix: no `edit` tool."""
    schemas = {k: v for k, v in TOOL_SCHEMAS.items() if k != "edit"}
    forms = []
    for rank, s in enumerate(suspects, 1):
        by_count: dict[int, list[str]] = {}
        for fix in FIXES:
            n = len(sites(s.text, fix))
            if n:
                by_count.setdefault(n, []).append(fix)
        for n, fixes in sorted(by_count.items()):
            props = {"suspect": {"const": rank}, "fix": {"enum": fixes}}
            if n > 1:
                props["nth"] = {"enum": list(range(2, n + 1))}
            forms.append({"type": "object", "properties": props,
                          "required": ["suspect", "fix"], "additionalProperties": False})
    if forms:  # anyOf: disjoint by construction (the parser still checks edit's oneOf)
        schemas = {**schemas, "edit": {"anyOf": forms}}
        schemas = {k: schemas[k] for k in TOOL_SCHEMAS if k in schemas}  # the contract's order
    return schemas
