"""The tool-call formats by name, and which one a chat template speaks."""
from __future__ import annotations

from rlvr.errors import UnknownToolCallFormat
from rlvr.toolcalls.base import ToolCallFormat
from rlvr.toolcalls.hermes import HERMES
from rlvr.toolcalls.llama3_json import LLAMA3_JSON
from rlvr.toolcalls.rlvr_format import RLVR

DEFAULT_FORMAT = "rlvr"
FORMATS: dict[str, ToolCallFormat] = {f.name: f for f in (RLVR, HERMES, LLAMA3_JSON)}


def get_format(name: str) -> ToolCallFormat:
    """The format registered under `name`; an UnknownToolCallFormat naming the known ones."""
    try:
        return FORMATS[name]
    except (KeyError, TypeError):
        raise UnknownToolCallFormat(f"unknown tool-call format {name!r} (known: "
                                    f"{', '.join(FORMATS)})") from None


def detect_format(chat_template: str | None) -> str | None:
    """The format a chat template's text asks its model for, by inspection: a template that
    writes `<tool_call>` is `hermes` (Qwen2.5, Qwen3, Hermes); one that writes
    `"parameters"`, `<|python_tag|>` or an `ipython` role is `llama3_json` (Llama 3.x);
    anything else (no template, a template without tool calls) is None — the caller then
    needs a configured format."""
    if not chat_template:
        return None
    if "<tool_call>" in chat_template:
        return HERMES.name
    if any(cue in chat_template for cue in ('"parameters"', "<|python_tag|>", "ipython")):
        return LLAMA3_JSON.name
    return None
