"""N-gram repetition guard over the tokens the acting engine generated (SPEC §3).

A degenerate policy loops ("assert x == assert x == ..."); rolling it out to the token budget
wastes generation and teaches nothing. The guard stops the episode (stop_reason
`repetition`, reward 0) as soon as one n-gram occurs more than `threshold` times among the
n-grams lying entirely inside the last `window` generated tokens. Only generated tokens are
counted (observations legitimately repeat, e.g. the same test output twice).

`RepetitionGuard` is incremental (O(1) per token); `first_repetition` is the same rule as a
pure function over a whole token stream, used by the passport's rebuild check.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class RepetitionParams:
    ngram: int = 8
    threshold: int = 6
    window: int = 256
    enabled: bool = True

    def __post_init__(self) -> None:
        if self.ngram < 1 or self.threshold < 1 or self.window < self.ngram:
            raise ValueError("repetition guard needs ngram >= 1, threshold >= 1, "
                             "window >= ngram")


class RepetitionGuard:
    def __init__(self, params: RepetitionParams):
        self.p = params
        self.tokens: list[int] = []
        self.counts: Counter = Counter()
        self.triggered_at: int | None = None

    def feed(self, ids: Sequence[int]) -> bool:
        """Add generated tokens; True once the rule has fired (it stays fired)."""
        n, w = self.p.ngram, self.p.window
        for tok in ids:
            self.tokens.append(int(tok))
            i = len(self.tokens) - 1
            if not self.p.enabled or self.triggered_at is not None:
                continue
            old_start = i - w  # the n-gram starting here just left the window
            if old_start >= 0 and old_start + n <= i:
                self.counts[tuple(self.tokens[old_start:old_start + n])] -= 1
            if i >= n - 1:
                gram = tuple(self.tokens[i - n + 1:i + 1])
                self.counts[gram] += 1
                if self.counts[gram] > self.p.threshold:
                    self.triggered_at = i
        return self.triggered_at is not None


def first_repetition(tokens: Sequence[int], params: RepetitionParams) -> int | None:
    """Index (into `tokens`) of the token at which the guard fires, or None."""
    guard = RepetitionGuard(params)
    guard.feed(tokens)
    return guard.triggered_at
