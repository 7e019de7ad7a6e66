"""The harness's tokenizer side for a model that brings its own chat template (SPEC §3).

`ChatCodec` (transcript.py) speaks rlvr's own ChatML + `rlvr` tool-call format, the CPU
default's. A real instruct model (Qwen2.5/Qwen3, Llama 3.x) was trained on what *its* chat
template renders: tools declared as JSON schemas, calls in its own form, tool results in its
own wrapper. `TemplateCodec` renders every harness segment with that template
(`apply_chat_template(..., tools=...)`) and still never re-renders a transcript:

* the initial prompt is the template's rendering of [system, user] + the generation prompt;
* an observation segment is what the template writes *after* an assistant message's
  end-of-turn token for one tool message, through the next generation prompt. It is taken
  once, from a rendering with placeholder contents, so each observation costs one encode;
* the policy's sampled ids (and the end-of-turn token it sampled) are appended as sampled.

So what the policy saw is what is trained, even where the template is not prefix-stable
(Qwen3 drops earlier turns' reasoning and writes `<think>\\n\\n</think>` only into the
generation prompt): `rlvr policy check` reports every position where a full re-render of a
finished episode would differ, instead of hiding it.

Contents as the template writes them. Some templates transform a message's content: Llama
3.1's trims every message and writes a tool message's content as a JSON string. The codec
finds each role's transform once, by rendering a probe content, and applies it (one of:
as is, trimmed, JSON-escaped, both); a template that does something else is refused.

Tokenizing a rendered segment. A template's text holds added tokens (`<|im_start|>`,
`<tool_response>`, ...) and message contents. Added tokens are matched only in the
template's own text; a content (an observation: policy code can print `<|im_end|>`) is plain
text whatever it holds, so it cannot forge a turn boundary. Each stretch of text between two
added tokens is encoded whole — template text and content together — which is exactly how
the tokenizer splits a full rendering, so a segment's ids equal a re-render's wherever the
content holds no added-token string.

Thinking (`thinking`, recorded in the environment version): passed to the template as
`enable_thinking`. Whatever the policy samples — `<think>...</think>` included — is its
action: trained (loss mask 1) and rewarded only through the episode's outcome, like any
other reasoning; the tool-call parser skips the thinking. With thinking off, the empty
`<think>\\n\\n</think>` a Qwen3 template writes into the generation prompt is harness context
(mask 0).
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from rlvr.agent.token_text import MarkedText, marker_ids, plain_tokenizer
from rlvr.errors import ConfigError
from rlvr.toolcalls.base import ToolCallFormat

# Placeholders for message contents while rendering: private-use code points no template
# writes and no tokenizer normalizes away.
_SYSTEM, _USER, _ACTION, _OBSERVATION = (f"\ue000{k}\ue001" for k in ("S", "U", "A", "O"))
# A content that tells the transforms below apart (ends in spaces, holds a quote, a newline,
# a tab and a backslash).
_PROBE = ' probe "q" \\ a\n\tb  '
CONTENT_TRANSFORMS: dict[str, Callable[[str], str]] = {
    "as_is": lambda c: c,
    "trim": str.strip,
    "json": lambda c: json.dumps(c, ensure_ascii=False)[1:-1],
    "trim+json": lambda c: json.dumps(c.strip(), ensure_ascii=False)[1:-1],
}


class ChatTemplateError(ConfigError):
    """A model's chat template cannot serve as the harness's renderer (it raises, cannot
    render tools, or does not write a message's content verbatim)."""


def template_text(tokenizer) -> str | None:
    """The tokenizer's chat template (a named set: its `tool_use` one, else `default`)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("tool_use") or template.get("default")
    return template or None


def template_hash(template: str) -> str:
    return hashlib.sha256(template.encode()).hexdigest()[:12]


def generation_stop_ids(model_dir: Path | str | None) -> list[int]:
    """`eos_token_id` of the directory's generation_config.json (an id or a list): the ids the
    model was trained to stop on (Llama 3: `<|eot_id|>`, `<|eom_id|>`, `<|end_of_text|>`)."""
    if model_dir is None:
        return []
    path = Path(model_dir) / "generation_config.json"
    if not path.is_file():
        return []
    try:
        eos = json.loads(path.read_text()).get("eos_token_id")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as exc:
        raise ChatTemplateError(f"{path}: not a JSON object ({exc})") from None
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    if not all(isinstance(i, int) for i in eos):
        raise ChatTemplateError(f"{path}: eos_token_id must be an id or a list of ids")
    return eos


class TemplateCodec:
    """Harness segments rendered by the model's own chat template, in tool-call format `fmt`.

    The same face as `ChatCodec`: `initial_prompt`, `observation_segment`, `encode_action`,
    `decode`, `stop_ids`, `end_of_turn`, `end_ids`, `format`."""

    def __init__(self, tokenizer, fmt: ToolCallFormat, tools: Sequence[Mapping[str, Any]], *,
                 thinking: bool = False, stop_ids: Sequence[int] = (), name: str = ""):
        from tokenizers import Tokenizer

        self.name = name
        self.format = fmt
        self.thinking = bool(thinking)
        self.tools = [dict(t) for t in tools]
        self._hf = tokenizer
        template = template_text(tokenizer)
        if template is None:
            raise ChatTemplateError(f"{name or 'tokenizer'}: has no chat template")
        self.template = template
        self.template_hash = template_hash(template)
        if "tools" not in template:
            raise ChatTemplateError(f"chat template {self.template_hash} cannot render tools "
                                    "(it never reads `tools`)")
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if not isinstance(backend, Tokenizer):
            raise ChatTemplateError(f"{name or 'tokenizer'}: needs a fast (tokenizers-backed) "
                                    "tokenizer")
        self.added = {t.content: i for i, t in tokenizer.added_tokens_decoder.items()}
        self.plain = plain_tokenizer(backend)  # no added token is matched in text
        self.decoder = Tokenizer.from_str(backend.to_str())
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        self._split = re.compile("|".join(re.escape(t) for t in
                                          sorted(self.added, key=len, reverse=True)))
        self.end_of_turn = self._token_id(fmt.end_of_turn, f"the {fmt.name} format's "
                                          "end-of-turn token")
        self.end_ids = (self.end_of_turn, *(self._token_id(t, f"the {fmt.name} format's "
                                                           "end-of-message token")
                                            for t in getattr(fmt, "also_ends_turn", ())))
        eos = tokenizer.eos_token_id
        stops = [*self.end_ids, *stop_ids, *([eos] if eos is not None else [])]
        self.stop_ids = tuple(dict.fromkeys(int(i) for i in stops))
        # a teacher's action text: the format's markers (and thinking tags) that are added
        # tokens of this vocabulary by id, the rest plain
        self.encode_action = MarkedText(marker_ids(self.added, fmt.markers), self.encode_text)
        self._observation = self._observation_template()
        self.transforms = {role: self._content_transform(role)
                           for role in ("system", "user", "tool")}

    # ---- rendering ---------------------------------------------------------------------
    def render(self, messages: Sequence[Mapping[str, Any]], *,
               add_generation_prompt: bool) -> str:
        """The template's text for `messages` (a ChatTemplateError naming the template when
        it raises)."""
        try:
            return self._hf.apply_chat_template(
                list(messages), tools=self.tools, tokenize=False,
                add_generation_prompt=add_generation_prompt, enable_thinking=self.thinking)
        except Exception as exc:  # noqa: BLE001 - jinja raises anything a template raises
            raise ChatTemplateError(f"{self.name or 'tokenizer'}: chat template "
                                    f"{self.template_hash} raises: {type(exc).__name__}: "
                                    f"{exc}") from None

    def _observation_template(self) -> tuple[str, str]:
        """(text before, text after) the observation: from the end-of-turn token closing an
        assistant message through the next generation prompt."""
        text = self.render([{"role": "system", "content": _SYSTEM},
                            {"role": "user", "content": _USER},
                            {"role": "assistant", "content": _ACTION},
                            {"role": "tool", "content": _OBSERVATION}], add_generation_prompt=True)
        if _SYSTEM not in text:
            raise ChatTemplateError(f"chat template {self.template_hash} drops the system "
                                    "message")
        eot = self._decode_one(self.end_of_turn)
        at = text.find(_ACTION)
        end = text.find(eot, at) if at >= 0 else -1
        if at < 0 or end < 0:
            raise ChatTemplateError(f"chat template {self.template_hash} does not end an "
                                    f"assistant message with {eot!r} (tool-call format "
                                    f"{self.format.name!r} needs it)")
        tail = text[end + len(eot):]
        if tail.count(_OBSERVATION) != 1:
            raise ChatTemplateError(f"chat template {self.template_hash} does not write a tool "
                                    "message's content verbatim once")
        before, after = tail.split(_OBSERVATION)
        return before, after

    def _conversation(self, role: str, content: str) -> list[dict[str, str]]:
        contents = {"system": _SYSTEM, "user": _USER, "tool": _OBSERVATION, role: content}
        return [{"role": "system", "content": contents["system"]},
                {"role": "user", "content": contents["user"]},
                {"role": "assistant", "content": _ACTION},
                {"role": "tool", "content": contents["tool"]}]

    def _content_transform(self, role: str) -> Callable[[str], str]:
        """What the template does to a `role` message's content, found with a probe: the
        rendering with the probe must equal the rendering with the placeholder, the
        placeholder replaced by one transform of the probe."""
        placeholder = {"system": _SYSTEM, "user": _USER, "tool": _OBSERVATION}[role]
        text = self.render(self._conversation(role, placeholder), add_generation_prompt=True)
        probed = self.render(self._conversation(role, _PROBE), add_generation_prompt=True)
        head, _, tail = text.partition(placeholder)
        for name, transform in CONTENT_TRANSFORMS.items():
            if probed == head + transform(_PROBE) + tail:
                return transform
        raise ChatTemplateError(f"chat template {self.template_hash} changes a {role} "
                                "message's content in a way the harness cannot reproduce "
                                f"(known: {', '.join(CONTENT_TRANSFORMS)})")

    # ---- encoding ----------------------------------------------------------------------
    def encode_rendered(self, text: str, contents: Mapping[str, str]) -> list[int]:
        """Rendered template text with placeholders -> ids: added tokens matched in the
        template's text only, each placeholder replaced by its content as plain text."""
        pieces: list[tuple[bool, str]] = []  # (is_added_token, text)
        for chunk in re.split("(" + "|".join(map(re.escape, contents)) + ")", text) \
                if contents else [text]:
            if chunk in contents:
                pieces.append((False, contents[chunk]))
                continue
            last = 0
            for m in self._split.finditer(chunk):
                pieces.append((False, chunk[last:m.start()]))
                pieces.append((True, m.group()))
                last = m.end()
            pieces.append((False, chunk[last:]))
        ids: list[int] = []
        stretch = ""
        for special, piece in pieces:
            if special:
                ids += self.encode_text(stretch)
                stretch = ""
                ids.append(self.added[piece])
            else:
                stretch += piece
        return ids + self.encode_text(stretch)

    def encode_text(self, text: str) -> list[int]:
        """Plain text: no added token is matched inside it."""
        return self.plain.encode(text, add_special_tokens=False).ids if text else []

    def decode(self, ids: Sequence[int]) -> str:
        return self.decoder.decode(list(ids), skip_special_tokens=False)

    def _decode_one(self, token_id: int) -> str:
        return self.decoder.id_to_token(token_id)

    def _token_id(self, token: str, what: str) -> int:
        tid = self.added.get(token)
        if tid is None:
            raise ChatTemplateError(f"{self.name or 'tokenizer'}: lacks {what} {token!r}")
        return tid

    # ---- segments ----------------------------------------------------------------------
    def initial_prompt(self, system: str, user: str) -> list[int]:
        """The template's [system, user] + generation prompt (tools declared in it)."""
        text = self.render([{"role": "system", "content": _SYSTEM},
                            {"role": "user", "content": _USER}], add_generation_prompt=True)
        return self.encode_rendered(text, {_SYSTEM: self.transforms["system"](system),
                                           _USER: self.transforms["user"](user)})

    def observation_segment(self, observation: str, *, close_turn: bool) -> list[int]:
        """After an assistant turn: (its end-of-turn token when the policy did not sample
        one) + the template's tool message holding `observation` + the generation prompt."""
        before, after = self._observation
        head = [self.end_of_turn] if close_turn else []
        return head + self.encode_rendered(before + _OBSERVATION + after,
                                           {_OBSERVATION: self.transforms["tool"](observation)})

    def describe(self) -> str:
        """What rendered a transcript, as the environment version records it."""
        return (f"chat.{self.format.name}.{self.template_hash}"
                f"{'.think' if self.thinking else ''}")
