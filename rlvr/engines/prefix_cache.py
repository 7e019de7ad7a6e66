"""The cross-turn prefix cache of `TorchEngine`'s fast decoder: the KV of earlier turns'
prompts + completions, so the next turn of an episode prefills only what is new.

Why a module of its own. `TorchEngine.generate` and the continuous decode
(`rlvr.engines.stream`) both look entries up before a prefill and store them after a sample
stops; neither owns the cache's rules, which decide bit-for-bit reproducibility of a resumed
run (`PrefixCache` says how).
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch


@dataclass
class CacheEntry:
    """The KV of one token sequence: k and v [layers, kv_heads, len(tokens), head_dim],
    stored by generate call number `call`; `hashes[j]` is `_prefix_hashes`' hash of
    tokens[:j] (so prefix tests are one comparison before the exact check)."""

    tokens: np.ndarray  # int64 [n]
    hashes: np.ndarray  # uint64 [n + 1]
    k: torch.Tensor
    v: torch.Tensor
    call: int


_HASH_BASE = np.uint64(0x100000001B3)  # FNV prime; arithmetic wraps modulo 2**64
_POWERS = np.ones(1, dtype=np.uint64)


def _prefix_hashes(q: np.ndarray) -> np.ndarray:
    """h[j] = sum_{i<j} (q[i] + 1) * B**i mod 2**64 for j = 0..len(q): the hash of every
    prefix at once (numpy, no Python loop)."""
    global _POWERS
    if len(_POWERS) < len(q):
        n = max(len(q), 2 * len(_POWERS))
        _POWERS = np.concatenate([[np.uint64(1)], np.cumprod(np.full(n - 1, _HASH_BASE))])
    with np.errstate(over="ignore"):
        terms = (q.astype(np.uint64) + np.uint64(1)) * _POWERS[:len(q)]
        return np.concatenate([np.zeros(1, np.uint64), np.cumsum(terms, dtype=np.uint64)])


def _is_prefix(short: np.ndarray, long: np.ndarray) -> bool:
    return len(short) <= len(long) and np.array_equal(short, long[:len(short)])


class PrefixCache:
    """LRU of `CacheEntry`s bounded by resident tokens (`max_tokens`; 0 = off).

    Only an entry whose tokens are a *strict prefix* of a prompt serves it (the longest such
    one). Storing an entry replaces one of the same tokens and drops every entry of an
    earlier call that it extends or that extends it (entries of one call may nest: a sample
    that stopped early is a prefix of a sibling's longer one, and each serves its own
    next turn). Why so strict: a resumed run (a wave replayed with a cold
    cache, `rlvr.agent.collector`) must compute what the uninterrupted run computed, bit
    for bit. An episode's own last-turn entry is stored in both runs; an entry of an
    earlier wave could only serve a prompt that extends it, i.e. a transcript that
    replicated an old one (greedy decoding of a re-drawn task), and then the episode's own
    entry of the same tokens replaced it, or, if longer, the old one was dropped when the
    own entry was stored. Old entries are never touched, so the LRU evicts them before any
    of the current wave's. (Not covered: a *first* prompt that itself extends an earlier
    episode's transcript; the collector never builds one.) A common prefix that is not a
    whole entry (a shared system prompt) is therefore not reused. Lookups scan the entries
    by hash of every prefix of the query (vectorized), then check the candidates' tokens.
    """

    def __init__(self, max_tokens: int):
        self.max_tokens = max_tokens
        self.entries: OrderedDict[int, CacheEntry] = OrderedDict()
        self.tokens = 0
        self.evicted_tokens = 0  # dropped for the budget (not: superseded by an extension)
        self.call = 0
        self._next = 0
        self._idx: tuple[list[int], np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.entries)

    def clear(self) -> None:
        self.entries.clear()
        self.tokens = 0
        self._idx = None

    def begin_call(self) -> None:
        self.call += 1

    def lookup(self, prompt: Sequence[int]) -> tuple[CacheEntry | None, int]:
        """The longest entry that is a strict prefix of `prompt` and its length (the
        reused tokens; the last prompt token is always run, its logits start the decode).
        (None, 0) when there is none."""
        if not self.entries:
            return None, 0
        q = np.asarray(prompt, dtype=np.int64)
        h = _prefix_hashes(q)
        keys, lens, sigs = self._index()
        hit = np.flatnonzero((lens < len(q)) & (h[np.minimum(lens, len(q))] == sigs))
        for j in hit[np.argsort(-lens[hit], kind="stable")]:  # longest first
            e = self.entries[keys[j]]
            if _is_prefix(e.tokens, q):  # a hash collision is not a hit
                self.entries.move_to_end(keys[j])
                return e, len(e.tokens)
        return None, 0

    def _index(self) -> tuple[list[int], np.ndarray, np.ndarray]:
        """Keys, lengths and whole-sequence hashes of the entries (rebuilt after a change)."""
        if self._idx is None:
            es = list(self.entries.items())
            self._idx = ([k for k, _ in es],
                         np.fromiter((len(e.tokens) for _, e in es), np.int64, len(es)),
                         np.fromiter((e.hashes[-1] for _, e in es), np.uint64, len(es)))
        return self._idx

    def wants(self, tokens: Sequence[int]) -> bool:
        """Whether `insert(tokens, ...)` can keep anything: on and within the budget."""
        return 0 < len(tokens) <= self.max_tokens

    def insert(self, tokens: Sequence[int], k: torch.Tensor, v: torch.Tensor) -> None:
        """Store the KV of `tokens` as most recently used (class docstring for what it
        replaces), then evict least recently used entries until the budget holds."""
        q = np.asarray(tokens, dtype=np.int64)
        h = _prefix_hashes(q)
        n = len(q)
        keys, lens, sigs = self._index()
        # same tokens, or (earlier calls) q extends the entry: hash of q's prefix matches
        near = np.flatnonzero((lens <= n) & (h[np.minimum(lens, n)] == sigs))
        drop = [keys[j] for j in near
                if (lens[j] == n or self.entries[keys[j]].call < self.call)
                and _is_prefix(self.entries[keys[j]].tokens, q)]
        drop += [key for key, length in zip(keys, lens.tolist()) if length > n
                 and (e := self.entries[key]).call < self.call and e.hashes[n] == h[n]
                 and _is_prefix(q, e.tokens)]  # (earlier calls) the entry extends q
        for key in drop:
            self.tokens -= len(self.entries.pop(key).tokens)
        self.entries[self._next] = CacheEntry(tokens=q, hashes=h, k=k, v=v, call=self.call)
        self._next += 1
        self.tokens += n
        while self.tokens > self.max_tokens:
            _, old = self.entries.popitem(last=False)
            self.tokens -= len(old.tokens)
            self.evicted_tokens += len(old.tokens)
        self._idx = None
