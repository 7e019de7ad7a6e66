"""Text to token ids the way a chat transcript needs it, for both codecs (`ChatCodec`,
`TemplateCodec`): observations and prompts are plain text in which no special token is ever
matched (a file may well contain "<|im_end|>"), and a teacher's action text is plain text
except for the format's markers, which the policy samples as single tokens."""
from __future__ import annotations

import json
import re
from typing import Callable, Mapping, Sequence


def plain_tokenizer(backend, special: Callable[[str], bool] = lambda content: True):
    """A copy of `backend` (a `tokenizers.Tokenizer`) that matches none of its added tokens
    whose content `special` accepts inside text: they are marked special (a chat token may be
    saved as an ordinary added token, which `encode_special_tokens` would still match) and
    special tokens are encoded as text."""
    from tokenizers import Tokenizer

    spec = json.loads(backend.to_str())
    for added in spec.get("added_tokens", []):
        if special(added.get("content", "")):
            added["special"] = True
    plain = Tokenizer.from_str(json.dumps(spec))
    plain.encode_special_tokens = True
    return plain


class MarkedText:
    """Action text -> ids: each marker (longest first where two overlap) by its id, the text
    between by `encode_text`."""

    def __init__(self, markers: Mapping[str, int], encode_text: Callable[[str], list[int]]):
        self.markers = dict(markers)
        self.encode_text = encode_text
        self._pattern = (re.compile("|".join(map(re.escape, sorted(self.markers, key=len,
                                                                   reverse=True))))
                         if self.markers else None)

    def __call__(self, text: str) -> list[int]:
        if self._pattern is None:
            return self.encode_text(text)
        ids: list[int] = []
        last = 0
        for m in self._pattern.finditer(text):
            ids += self.encode_text(text[last:m.start()])
            ids.append(self.markers[m.group()])
            last = m.end()
        return ids + self.encode_text(text[last:])


def marker_ids(added: Mapping[str, int], markers: Sequence[str]) -> dict[str, int]:
    """The markers that are added tokens of the vocabulary, with their ids."""
    return {m: added[m] for m in markers if m in added}
