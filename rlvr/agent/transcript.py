"""Token-exact transcripts, built incrementally and never re-tokenized (SPEC §3).

A transcript is four aligned lists, one entry per token:

* `token_ids`  — exactly what the policy saw and produced;
* `loss_mask`  — 1 on tokens the acting engine produced (reasoning, tool call, end-of-turn),
                 0 on everything the harness wrote (system/user prompt, role headers,
                 observations);
* `logprobs`   — the behaviour log-probability for tokens a `TokenEngine` sampled (as it
                 reported them at sampling time), 0.0 on harness tokens, NaN on tokens of a
                 *text* teacher (it exposes no distribution over our vocabulary);
* `turn_ids`   — -1 for the initial prompt, t for the action of turn t and the observation
                 that answers it.

Harness segments are tokenized one segment at a time: special tokens are appended by id,
text is encoded with special-token recognition OFF, so an observation that contains the
string "<|im_end|>" (policy code can print anything) stays plain text and cannot forge a
turn boundary.

Why a text teacher's tokens may train SFT but never RL: SFT maximises log π_θ(action) for
whatever token sequence represents the teacher's text — any faithful tokenization of the
text is a valid target, and the segment tokenization used here is the same one the policy
sees in its own transcripts. RL needs the ratio π_θ/π_behaviour on the ids *the behaviour
policy sampled* with the logprob *it* assigned; a teacher has neither (hence NaN), so its
rows are rejected by the RL trainer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from rlvr.agent.token_text import MarkedText, plain_tokenizer
from rlvr.chat_format import EOS, IM_END, IM_START, SPECIAL_TOKENS, TOOL_CALL, TOOL_CALL_END
from rlvr.engines.model_dir import load_tokenizer
from rlvr.toolcalls.rlvr_format import RLVR

PROMPT_TURN = -1


class ChatCodec:
    """The tokenizer side of the chat format, as the harness needs it.

    Built from a transformers tokenizer (or a `tokenizers.Tokenizer`). Two independent
    backend copies are kept: `plain` never matches special tokens in text; `action` matches
    only `<tool_call>`/`</tool_call>` (used for a text teacher's action, so it is tokenized
    the way the policy would write it).
    """

    def __init__(self, tokenizer, name: str = ""):
        from tokenizers import Tokenizer

        backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
        if not isinstance(backend, Tokenizer):
            raise TypeError("ChatCodec needs a fast (tokenizers-backed) tokenizer")
        self.name = name
        self.plain = plain_tokenizer(backend, lambda content: content in SPECIAL_TOKENS)
        self.decoder = Tokenizer.from_str(backend.to_str())
        ids = {}
        for tok in SPECIAL_TOKENS:
            tid = backend.token_to_id(tok)
            if tid is None:
                raise ValueError(f"tokenizer {name!r} lacks the special token {tok!r}")
            ids[tok] = tid
        self.eos = ids[EOS]
        self.im_start = ids[IM_START]
        self.im_end = ids[IM_END]
        self.tool_call = ids[TOOL_CALL]
        self.tool_call_end = ids[TOOL_CALL_END]
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        self._cache: dict[str, list[int]] = {}
        # a teacher's action text: `<tool_call>` / `</tool_call>` by id, the rest plain
        self.encode_action = MarkedText({TOOL_CALL: self.tool_call,
                                         TOOL_CALL_END: self.tool_call_end}, self.encode_text)

    # the face every codec shares with `TemplateCodec` (rlvr.agent.template_codec)
    format = RLVR
    thinking = False
    template_hash = ""

    @property
    def end_of_turn(self) -> int:
        return self.im_end

    @property
    def end_ids(self) -> tuple[int]:
        """The ids that end a turn validly (`<|endoftext|>` stops it as a format error)."""
        return (self.im_end,)

    def describe(self) -> str:
        """rlvr's own ChatML: nothing beyond the prompt's fingerprint to record."""
        return ""

    @classmethod
    def from_model_dir(cls, model_dir: Path | str) -> "ChatCodec":
        return cls(load_tokenizer(model_dir), name=str(model_dir))

    @property
    def stop_ids(self) -> tuple[int, int]:
        """Generation stops on the end-of-turn token (and on eos, which is a format error)."""
        return (self.im_end, self.eos)

    # ---- encoding --------------------------------------------------------------------------
    def encode_text(self, text: str) -> list[int]:
        """Plain text: special-token strings inside it are NOT turned into special ids."""
        if not text:
            return []
        return self.plain.encode(text, add_special_tokens=False).ids

    def _cached(self, key: str, build) -> list[int]:
        ids = self._cache.get(key)
        if ids is None:
            ids = self._cache[key] = list(build())
        return list(ids)

    def header(self, role: str) -> list[int]:
        """`<|im_start|>{role}\\n`"""
        return self._cached(f"h:{role}", lambda: [self.im_start, *self.encode_text(f"{role}\n")])

    def newline(self) -> list[int]:
        return self._cached("nl", lambda: self.encode_text("\n"))

    def decode(self, ids: Sequence[int]) -> str:
        return self.decoder.decode(list(ids), skip_special_tokens=False)

    # ---- segments ------------------------------------------------------------------------
    def initial_prompt(self, system: str, user: str) -> list[int]:
        """system + user messages + the first assistant header."""
        return [*self.header("system"), *self.encode_text(system), self.im_end, *self.newline(),
                *self.header("user"), *self.encode_text(user), self.im_end, *self.newline(),
                *self.header("assistant")]

    def observation_segment(self, observation: str, *, close_turn: bool) -> list[int]:
        """What follows an assistant turn: (its `<|im_end|>` when the policy did not sample
        one) + newline + the tool message + the next assistant header."""
        head = [self.im_end] if close_turn else []
        return [*head, *self.newline(), *self.header("tool"), *self.encode_text(observation),
                self.im_end, *self.newline(), *self.header("assistant")]


@dataclass
class Transcript:
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_ids: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.token_ids)

    def append_context(self, ids: Sequence[int], turn: int) -> None:
        """Harness-written tokens: never trained on."""
        self._extend(ids, [0] * len(ids), [0.0] * len(ids), turn)

    def append_sampled(self, ids: Sequence[int], logprobs: Sequence[float], turn: int) -> None:
        """Ids a TokenEngine sampled, with the behaviour logprobs it reported."""
        if len(ids) != len(logprobs):
            raise ValueError(f"{len(ids)} sampled ids but {len(logprobs)} logprobs")
        self._extend(ids, [1] * len(ids), [float(x) for x in logprobs], turn)

    def append_teacher(self, ids: Sequence[int], turn: int) -> None:
        """A text teacher's action tokens: trainable for SFT, no behaviour logprob."""
        self._extend(ids, [1] * len(ids), [math.nan] * len(ids), turn)

    def _extend(self, ids, mask, lps, turn: int) -> None:
        self.token_ids.extend(int(i) for i in ids)
        self.loss_mask.extend(mask)
        self.logprobs.extend(lps)
        self.turn_ids.extend([turn] * len(ids))

    def generated_ids(self) -> list[int]:
        return [t for t, m in zip(self.token_ids, self.loss_mask) if m]
