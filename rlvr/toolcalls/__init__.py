"""Tool-call formats: how a model writes one action, as a small registry.

One module per format — `rlvr_format` (the CPU default's, `rlvr.chat_format`), `hermes`
(Qwen2.5/Qwen3 and most open models), `llama3_json` (Llama 3.x) — each a parser, a canonical
writer and an llguidance grammar of one turn (`base.ToolCallFormat`). The registry
(`FORMATS`, `get_format`, `detect_format`) sits below the engines, the agent and the
teachers, so all of them can name a format. One call per turn in every format (base.py).
"""
from __future__ import annotations

from rlvr.toolcalls.base import ACTION_ERRORS, ParsedAction, ToolCall, ToolCallFormat
from rlvr.toolcalls.registry import DEFAULT_FORMAT, FORMATS, detect_format, get_format

__all__ = ["ACTION_ERRORS", "DEFAULT_FORMAT", "FORMATS", "ParsedAction", "ToolCall",
           "ToolCallFormat", "detect_format", "get_format"]
