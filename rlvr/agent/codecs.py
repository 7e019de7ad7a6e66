"""Which codec a policy directory speaks through: rlvr's own, or its chat template's.

The choice travels with the directory, so every stage that loads a policy (rollout, SFT,
GRPO, evaluation, the gate) renders the same way without a param of its own:

1. the directory's chat card `rlvr_chat.json` (written by `init_policy` on import, copied
   forward by every trainer): the tool-call format and thinking mode chosen for it;
2. else its template, by inspection (`rlvr.toolcalls.detect_format`): a template that
   writes `<tool_call>` is `hermes`, one that writes Llama's `parameters` is `llama3_json`;
3. else the CPU default's ChatML template (`rlvr.engines.local_policy.CHAT_TEMPLATE`) is
   rlvr's own format;
4. else there is nothing to go on: a ChatFormatError naming the directory and the param.

The `rlvr` format is spoken by `ChatCodec` (rlvr's ChatML, tools described in the system
prompt); any other by `TemplateCodec` (the model's own template, tools as JSON schemas).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from rlvr.agent.template_codec import (ChatTemplateError, TemplateCodec, generation_stop_ids,
                                       template_hash, template_text)
from rlvr.agent.tools import openai_tools
from rlvr.agent.transcript import ChatCodec
from rlvr.artifacts.io import write_text
from rlvr.engines.local_policy import CHAT_TEMPLATE
from rlvr.engines.model_dir import load_tokenizer
from rlvr.toolcalls import DEFAULT_FORMAT, detect_format, get_format

CHAT_CARD = "rlvr_chat.json"
AUTO = "auto"


class ChatFormatError(ChatTemplateError):
    """A policy directory whose tool-call format cannot be decided, or is contradicted by its
    own template."""


@dataclass(frozen=True)
class ChatSetup:
    """How a policy directory is spoken to (its chat card)."""

    tool_call_format: str
    thinking: bool = False
    template_hash: str = ""  # the template that was inspected ("" for the rlvr format)

    @property
    def templated(self) -> bool:
        return self.tool_call_format != DEFAULT_FORMAT


def resolve_chat(model_dir: Path | str, tool_call_format: str = AUTO, *,
                 thinking: bool = False, tokenizer=None) -> ChatSetup:
    """The setup of `model_dir` given the configured `tool_call_format` ("auto" = the card,
    then the template): a ChatFormatError naming what is missing or contradictory."""
    d = Path(model_dir)
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(d)
    template = template_text(tokenizer)
    declared = detect_format(template)
    thash = template_hash(template) if template else ""
    if tool_call_format != AUTO:
        fmt = get_format(tool_call_format).name
        if fmt != DEFAULT_FORMAT and declared and declared != fmt:
            raise ChatFormatError(f"{d}: tool-call format {fmt!r} does not match what its chat "
                                  f"template declares ({declared!r})")
        if fmt != DEFAULT_FORMAT and not template:
            raise ChatFormatError(f"{d}: tool-call format {fmt!r} needs a chat template to "
                                  "render with; the tokenizer has none")
        return ChatSetup(fmt, thinking, thash if fmt != DEFAULT_FORMAT else "")
    card = read_chat_card(d)
    if card is not None:
        return card
    if declared:
        return ChatSetup(declared, thinking, thash)
    if template == CHAT_TEMPLATE:
        return ChatSetup(DEFAULT_FORMAT, False, "")
    what = "no chat template" if not template else "a chat template that declares no tool calls"
    raise ChatFormatError(f"{d}: no tool-call format: the tokenizer has {what} and none is "
                          "configured (set policy.tool_call_format to one of rlvr, hermes, "
                          "llama3_json)")


def read_chat_card(model_dir: Path | str) -> ChatSetup | None:
    path = Path(model_dir) / CHAT_CARD
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        setup = ChatSetup(str(data["tool_call_format"]), bool(data.get("thinking", False)),
                          str(data.get("template_hash", "")))
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise ChatFormatError(f"{path}: not a chat card ({type(exc).__name__}: {exc})") from None
    get_format(setup.tool_call_format)
    return setup


def write_chat_card(model_dir: Path | str, setup: ChatSetup) -> None:
    write_text(Path(model_dir) / CHAT_CARD, json.dumps(asdict(setup), indent=1, sort_keys=True)
               + "\n")


def load_codec(model_dir: Path | str, setup: ChatSetup | None = None, *,
               tokenizer=None) -> ChatCodec | TemplateCodec:
    """The codec of policy directory `model_dir` (its resolved setup unless `setup`; its
    tokenizer unless one already loaded from it is given)."""
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model_dir)
    setup = setup or resolve_chat(model_dir, tokenizer=tokenizer)
    if not setup.templated:
        try:
            return ChatCodec(tokenizer, name=str(model_dir))
        except ValueError as exc:
            raise ChatFormatError(f"{model_dir}: {exc}") from None
    codec = TemplateCodec(tokenizer, get_format(setup.tool_call_format), openai_tools(),
                          thinking=setup.thinking, stop_ids=generation_stop_ids(model_dir),
                          name=str(model_dir))
    if setup.template_hash and setup.template_hash != codec.template_hash:
        raise ChatFormatError(f"{model_dir}: its chat template ({codec.template_hash}) is not "
                              f"the one its chat card was written for "
                              f"({setup.template_hash})")
    return codec
