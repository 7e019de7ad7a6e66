"""The special tokens of the shared chat / tool-call format, defined once.

Every part that speaks the format takes them from here: the local policy's tokenizer (which
gives them the fixed ids 0..4, in `SPECIAL_TOKENS` order), the harness codec that appends
them by id, and the tool-call parser. Format (CONTRIBUTING.md, "Shared chat / tool-call
format"): `<|im_start|>{role}\n{content}<|im_end|>\n` per message; an assistant turn is short
reasoning text plus one `<tool_call>{json}</tool_call>`, ended by `<|im_end|>`.
"""
from __future__ import annotations

EOS = "<|endoftext|>"  # also the pad token; ending a turn with it is a format error
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"  # end of turn: generation stops on it
TOOL_CALL = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
SPECIAL_TOKENS = (EOS, IM_START, IM_END, TOOL_CALL, TOOL_CALL_END)
