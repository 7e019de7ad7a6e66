"""Grammar-constrained decoding: a token may be sampled only if the turn stays inside a grammar.

Why. A small policy's tool-call format is the most fragile thing it has: one turn in five of
the CPU default's SFT policy did not parse, the invalid-action limit ended ~90% of its
episodes, and a few GRPO updates at a high learning rate broke the format outright
(LEARNING.md). Deployments constrain tool calls to their schema (vLLM's structured outputs,
llama.cpp grammars); so do we, with the same library as vLLM's `guidance` backend.

The grammar is part of the behaviour distribution. A sampled token's recorded logprob is
under the *masked* distribution (disallowed tokens at -inf, then temperature / top-k /
top-p: `rlvr.engines.sampling`), so a trainer must apply the same mask at every policy
token or its ratio compares two different distributions. It re-derives the masks from the
sampled tokens themselves (`TokenGrammar.replay`): a matcher is a deterministic function of
the tokens it consumed, so the replayed masks are the sampler's, bit for bit (a test
compares them), and nothing the size of [tokens, vocabulary] is stored in a passport.

Masks are llguidance bitmasks: int32 words [..., W], W = ceil(V / 32), bit j of word w set iff
token 32·w + j is allowed (`sampling.allowed_mask` unpacks them).

Grammars are named (`Decoding.grammar`) and registered by the module that defines them
(`rlvr.engines.grammars`; the tool-call grammars belong to the agent's tool contract and
register themselves), not by the engines. A turn's grammar may depend on its prompt (the
state the agent has seen): the sampler and the trainer both derive it from the same prompt
tokens.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Sequence

import torch

from rlvr.engines.grammars import check_grammar, grammar_source, is_context_free
from rlvr.errors import ConfigError


def mask_words(vocab_size: int) -> int:
    """W: int32 words of one token bitmask over a vocabulary of `vocab_size`."""
    return (vocab_size + 31) // 32


class GrammarError(RuntimeError):
    """A token sequence the grammar does not admit, or a matcher in an error state: the
    tokens were not sampled under this grammar (or the grammar / tokenizer changed)."""


class TokenGrammar:
    """Grammar `name` for one tokenizer and a model vocabulary of `vocab_size` (which may
    exceed the tokenizer's: those ids are never allowed). A turn's grammar is a function of
    its prompt (`rlvr.engines.grammars`); each distinct source is compiled once (an LRU of
    `cache_size`), and each sample gets a copy of that pristine matcher (`start`)."""

    def __init__(self, name: str, tokenizer, vocab_size: int, cache_size: int = 256):
        import llguidance
        import llguidance.hf

        self.name = check_grammar(name)
        if not name:
            raise ConfigError("TokenGrammar needs a grammar name (\"\" means unconstrained)")
        self.vocab_size = int(vocab_size)
        self.words = mask_words(self.vocab_size)
        self.context_free = is_context_free(name)
        self._hf = tokenizer
        self._tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=self.vocab_size)
        self._compiled: OrderedDict[str, Any] = OrderedDict()
        self._cache_size = cache_size
        # one worker thread: a decode step's masks cost ~0.1 ms per sample, and a thread
        # pool competes with torch's own threads for the cores of a CPU box
        self._executor = llguidance.LLExecutor(num_threads=1)
        self._pristine(grammar_source(name))  # a grammar that does not compile fails here

    def source(self, prompt: Sequence[int]) -> str:
        """The Lark source of the turn that follows `prompt` (token ids)."""
        if self.context_free:
            return grammar_source(self.name)
        return grammar_source(self.name, self._hf.decode(list(prompt), skip_special_tokens=False))

    def _pristine(self, source: str):
        import llguidance

        m = self._compiled.get(source)
        if m is None:
            m = llguidance.LLMatcher(self._tokenizer, source, log_level=0)
            if m.is_error():
                raise ConfigError(f"grammar {self.name!r} does not compile for this tokenizer: "
                                  f"{m.get_error()}")
            self._compiled[source] = m
            if len(self._compiled) > self._cache_size:
                self._compiled.popitem(last=False)
        else:
            self._compiled.move_to_end(source)
        return m

    def start(self, prompts: Sequence[Sequence[int]]) -> list:
        """One matcher per prompt, at the start of that turn's grammar."""
        return [self._pristine(self.source(p)).deep_copy() for p in prompts]

    def fill_rows(self, rows: Sequence[tuple[Any, int]], out: torch.Tensor) -> torch.Tensor:
        """Write the next-token bitmask of each (matcher, row) of `rows` into that row of
        `out` ([n, W] int32, CPU, contiguous; rows not named are left as they are), computed
        in parallel; returns `out`."""
        if out.dtype != torch.int32 or out.device.type != "cpu" or not out.is_contiguous() \
                or out.dim() != 2 or out.shape[1] != self.words:
            raise ValueError(f"fill_rows: out must be a contiguous CPU int32 tensor [n, "
                             f"{self.words}], got {out.dtype} {tuple(out.shape)} on {out.device}")
        if rows:
            self._executor.unsafe_compute_mask_ptr(list(rows), out.data_ptr(), self.words * 4,
                                                   out.shape[0])
        for m, row in rows:
            if m.is_error():
                raise GrammarError(f"grammar {self.name!r}: row {row}: {m.get_error()}")
        return out

    def advance(self, matchers: Sequence, tokens: Sequence[int]) -> None:
        """Each matcher consumes its sampled token (one that its last mask allowed)."""
        for i, (m, t) in enumerate(zip(matchers, tokens)):
            if not m.consume_token(int(t)):
                raise GrammarError(f"grammar {self.name!r}: matcher {i} refused token "
                                   f"{int(t)}: {m.get_error()}")

    def replay(self, tokens: Sequence[int], prompt: Sequence[int] = ()) -> torch.Tensor:
        """[n, W] int32: the bitmask the sampler applied before each of the n tokens of one
        grammar-constrained sample (a turn) after `prompt`, recomputed from a fresh matcher.
        A token its mask did not allow raises GrammarError naming its position: a sample
        not drawn under this grammar cannot be scored as if it were."""
        tokens = [int(t) for t in tokens]
        out = torch.zeros(len(tokens), self.words, dtype=torch.int32)
        if not tokens:
            return out
        m = self.start([prompt])[0]
        # one call: the mask now, then after each of tokens[:-1] (the matcher rolls back)
        self._executor.unsafe_compute_mask_ptr_with_draft_token(
            [(m, 0, tokens[:-1])], out.data_ptr(), self.words * 4, len(tokens))
        ids = torch.tensor(tokens, dtype=torch.long)
        word = out.gather(1, (ids // 32)[:, None]).squeeze(1)
        allowed = ((word >> (ids % 32).to(torch.int32)) & 1).bool()
        if not bool(allowed.all()):
            pos = int((~allowed).nonzero()[0])
            raise GrammarError(f"grammar {self.name!r}: token {tokens[pos]} at position {pos} "
                               f"of {len(tokens)} is outside the grammar (not sampled under it)")
        return out
