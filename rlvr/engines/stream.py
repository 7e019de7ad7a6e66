"""Continuous batching for `TorchEngine`: sequences join and leave a running decode.

Why. `TorchEngine.generate` decodes one batch until its longest sample stops; the slots of
samples that stopped early idle (or are compacted away), and a sequence that becomes ready
meanwhile (an episode whose tool call returned) waits for the next call. Here, as in vLLM's
scheduler, the decode never drains: `add` queues a prompt, each `step` first prefills what
is queued (identical prompts once, reusing cross-turn KV from the engine's prefix cache),
then samples one token for every live sequence and runs one decode forward for those that
go on. A sequence that stops leaves at once (its KV harvested into the prefix cache, its
`Sample` returned), so G x groups-in-flight share every forward pass whatever their lengths.

What stays as in `generate` (SPEC §3):
* a sequence's token t is drawn with uniform t of its own stream, keyed (seed, sample_seed),
  so it does not depend on when it joined or on what else is decoding;
* its logprobs are those of the processed distribution it was drawn from (grammar mask,
  temperature, top-k, top-p: `sampling.process`), equal to `TorchEngine.score` to float
  rounding;
* with the same (prompt, sample_seed, max_new_tokens) it samples the ids `generate` samples
  (the decode attends over one padded KV per sequence instead of a shared prompt KV merged
  by log-sum-exp: same math, other fp32 summation orders; tests hold the ids equal).

Layout. Live sequences occupy slots 0..n-1 of per-layer K/V buffers [slots, kv_heads, L, d]
holding prompt + generated KV contiguously; a sequence that stops is replaced by the last
live one (one slot copied), and both dimensions double when full. A decode step attends
each slot to its own positions 0..pos (a padding bias masks the rest). Fast (Llama-family)
decoder only; `backend="hf"` engines refuse to stream.

Determinism is the caller's: which sequences are live at each step decides the batches,
so a scheduler must `add` at points fixed by its own logical state (the collector's
continuous schedule does), never by thread timing.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Hashable

import numpy as np
import torch

from rlvr.engines.base import Sample, SamplingParams
from rlvr.engines.fast_decoder import FastDecoder
from rlvr.engines.model_dir import eval_mode
from rlvr.engines.sampling import check_params, process, sample, sample_uniforms

# Slot-buffer lengths start at this many positions and double when a sequence outgrows them.
KV_BLOCK = 256


@dataclass
class _Sequence:
    key: Hashable
    prompt: list[int]
    limit: int                 # max new tokens
    noise: np.ndarray          # [limit] its uniforms
    matcher: Any = None        # grammar state (None without a grammar)
    prefill_tokens: int = 0    # prompt tokens its prefill computed
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


class DecodeStream:
    """A running decode that sequences join (`add`) and leave (`step` returns them). One
    `SamplingParams` for all (their `max_new_tokens` caps each sequence's own limit)."""

    def __init__(self, engine, params: SamplingParams, *, seed: int, max_slots: int = 0):
        """`engine`: the `TorchEngine` whose model, prefix cache, grammars and counters the
        stream uses (`TorchEngine.stream` opens it)."""
        if engine.backend != "fast":
            raise ValueError("continuous batching needs the torch engine's fast decoder "
                             f"(Llama-family models); this engine runs backend {engine.backend!r}")
        if isinstance(max_slots, bool) or not isinstance(max_slots, int) or max_slots < 0:
            raise ValueError(f"max_slots must be an int >= 0 (0 = no bound), got {max_slots!r}")
        check_params(params, engine.vocab_size)
        self.engine, self.params, self.seed, self.max_slots = engine, params, seed, max_slots
        self.grammar = engine.grammar(params.grammar)
        self.stop_ids = frozenset(params.stop_token_ids)
        self.cache = engine.prefix_cache
        if self.cache.max_tokens:
            engine.check_cache_weights()
        self.dec = FastDecoder(engine.model, engine.prefill_chunk_tokens)
        self.dev = self.dec.dev
        self.queue: list[_Sequence] = []
        self._added = 0
        self.live: list[_Sequence] = []            # slot i holds live[i]
        self.pos = torch.zeros(0, dtype=torch.long)   # [n] tokens with KV per slot
        self.logits: torch.Tensor | None = None       # [n, V] next-token logits per slot
        self.K: list[torch.Tensor] = []
        self.V: list[torch.Tensor] = []
        self.stats = {"samples": 0, "prefill_tokens_requested": 0, "prefill_tokens_computed": 0,
                      "prefill_tokens_saved": 0, "prefill_tokens_reused": 0,
                      "prefix_cache_hits": 0, "generated_tokens": 0, "decode_steps": 0,
                      "slot_steps": 0, "prefill_seconds": 0.0, "decode_seconds": 0.0}

    @property
    def active(self) -> int:
        """Sequences queued or decoding."""
        return len(self.queue) + len(self.live)

    def add(self, key: Hashable, prompt, *, sample_seed: int, max_new_tokens: int) -> None:
        """Queue a sequence; it is prefilled and samples its first token at the next `step`."""
        self._added += 1
        prompt = self.engine.check_prompt(self._added - 1, prompt)
        cap = self.params.max_new_tokens
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) \
                or not 1 <= max_new_tokens <= cap:
            raise ValueError(f"max_new_tokens must be an int in 1..{cap} (params.max_new_tokens),"
                             f" got {max_new_tokens!r}")
        noise = sample_uniforms(self.seed, sample_seed, max_new_tokens)
        matcher = self.grammar.start([prompt])[0] if self.grammar is not None else None
        self.queue.append(_Sequence(key=key, prompt=prompt, limit=max_new_tokens,
                                    noise=noise, matcher=matcher))

    def step(self) -> list[tuple[Hashable, Sample]]:
        """Admit queued sequences, sample one token for every live one, retire those that
        stopped (returned, in slot order) and feed the others' tokens through the model."""
        with torch.inference_mode(), eval_mode(self.engine.model):
            self._admit()
            if not self.live:
                return []
            t0 = time.perf_counter()
            tok, lp = self._sample()
            done = self._record(tok, lp)
            out = self._retire(done, tok)
            if self.live:
                self.logits = self._forward(tok)
            self.stats["decode_seconds"] += time.perf_counter() - t0
            return out

    def close(self) -> None:
        """Add this stream's counters to the engine's (`TorchEngine.stats`)."""
        for k, v in self.stats.items():
            self.engine.stats[k] = self.engine.stats.get(k, 0) + v
        self.engine.stats["prefix_cache_tokens"] = self.cache.tokens
        self.engine.stats["prefix_cache_entries"] = len(self.cache)
        self.engine.last_stats = dict(self.stats)
        self.queue, self.live, self.K, self.V = [], [], [], []

    # ---- admission ------------------------------------------------------------------------
    def _admit(self) -> None:
        room = len(self.queue) if not self.max_slots else self.max_slots - len(self.live)
        joining, self.queue = self.queue[:max(room, 0)], self.queue[max(room, 0):]
        if not joining:
            return
        t0 = time.perf_counter()
        if self.cache.max_tokens:
            self.cache.begin_call()
        unique: dict[tuple[int, ...], int] = {}
        for s in joining:
            unique.setdefault(tuple(s.prompt), len(unique))
        prompts = [list(p) for p in unique]
        hits = [self.cache.lookup(p) for p in prompts]
        first = self.dec.prefill(prompts, hits)  # [U, V]; dec.Kp/Vp [U, kv, L, d] per layer
        n0 = len(self.live)
        self._reserve(n0 + len(joining), max(len(s.prompt) for s in joining) + 1)
        rows = [unique[tuple(s.prompt)] for s in joining]
        seen: set[int] = set()
        for j, (s, u) in enumerate(zip(joining, rows)):
            n = len(s.prompt)
            for K, V, Kp, Vp in zip(self.K, self.V, self.dec.Kp, self.dec.Vp):
                K[n0 + j, :, :n] = Kp[u, :, :n]
                V[n0 + j, :, :n] = Vp[u, :, :n]
            s.prefill_tokens = 0 if u in seen else n - hits[u][1]
            seen.add(u)
        self.live.extend(joining)
        self.pos = torch.cat([self.pos, torch.tensor([len(s.prompt) for s in joining])])
        new = first[torch.tensor(rows, device=first.device)]
        self.logits = new if self.logits is None or n0 == 0 else torch.cat([self.logits, new])
        requested = sum(len(s.prompt) for s in joining)
        reused = sum(c for _, c in hits)
        saved = requested - sum(len(p) for p in prompts)
        st = self.stats
        st["prefill_tokens_requested"] += requested
        st["prefill_tokens_saved"] += saved
        st["prefill_tokens_reused"] += reused
        st["prefill_tokens_computed"] += requested - saved - reused
        st["prefix_cache_hits"] += sum(c > 0 for _, c in hits)
        st["prefill_seconds"] += time.perf_counter() - t0

    def _reserve(self, slots: int, length: int) -> None:
        """Grow the K/V buffers (doubling) to hold `slots` sequences of `length` positions."""
        if not self.K:
            shape = (max(slots, 1), self.dec.nkv, max(length, KV_BLOCK), self.dec.d)
            self.K = [torch.zeros(shape, dtype=self.dec.dtype, device=self.dev)
                      for _ in self.dec.layers]
            self.V = [torch.zeros_like(k) for k in self.K]
            return
        S, L = self.K[0].shape[0], self.K[0].shape[2]
        if slots <= S and length <= L:
            return
        while S < slots:
            S *= 2
        while L < length:
            L *= 2

        def grown(buf: torch.Tensor) -> torch.Tensor:
            new = buf.new_zeros(S, buf.shape[1], L, buf.shape[3])
            new[:buf.shape[0], :, :buf.shape[2]] = buf
            return new
        self.K = [grown(k) for k in self.K]
        self.V = [grown(v) for v in self.V]

    # ---- one token ------------------------------------------------------------------------
    def _sample(self) -> tuple[list[int], list[float]]:
        n = len(self.live)
        masks = None
        if self.grammar is not None:
            masks = torch.full((n, self.grammar.words), -1, dtype=torch.int32)
            self.grammar.fill_rows([(s.matcher, i) for i, s in enumerate(self.live)], masks)
            masks = masks.to(self.dev)
        lp = process(self.logits, self.params, masks)
        u = torch.tensor([s.noise[len(s.tokens)] for s in self.live], dtype=torch.float32,
                         device=self.dev)
        tok = sample(lp, u)
        chosen = lp.gather(1, tok[:, None]).squeeze(1)
        self.stats["decode_steps"] += 1
        self.stats["slot_steps"] += n
        return tok.tolist(), chosen.tolist()

    def _record(self, tok: list[int], lp: list[float]) -> list[int]:
        """Append each slot's token; the slots whose sequence stopped (stop id or limit)."""
        stops = self.stop_ids
        if self.grammar is not None:
            self.grammar.advance([s.matcher for s in self.live], tok)
        done = []
        for i, (s, t, p) in enumerate(zip(self.live, tok, lp)):
            s.tokens.append(t)
            s.logprobs.append(p)
            if t in stops or len(s.tokens) == s.limit:
                done.append(i)
        return done

    def _retire(self, done: list[int], tok: list[int]) -> list[tuple[Hashable, Sample]]:
        """Harvest the stopped sequences' KV, free their slots (the last live slot moves into
        each hole, highest hole first; `tok`, the step's token per slot, moves with it) and
        return their samples."""
        out = []
        if done and self.cache.max_tokens:
            self.cache.begin_call()
        stops = self.stop_ids
        for i in done:
            s = self.live[i]
            n = len(s.tokens)
            tokens = s.prompt + s.tokens[:n - 1]  # the last token was never fed
            if self.cache.wants(tokens):
                m = len(tokens)
                self.cache.insert(tokens, torch.stack([K[i, :, :m].clone() for K in self.K]),
                                  torch.stack([V[i, :, :m].clone() for V in self.V]))
            out.append((s.key, Sample(token_ids=s.tokens, logprobs=s.logprobs,
                                      finish_reason="stop" if s.tokens[-1] in stops else "length",
                                      prefill_tokens=s.prefill_tokens)))
            self.stats["samples"] += 1
            self.stats["generated_tokens"] += n
        for i in sorted(done, reverse=True):
            last = len(self.live) - 1
            if i != last:
                for buf in (*self.K, *self.V):
                    buf[i] = buf[last]
                self.live[i] = self.live[last]
                self.pos[i] = self.pos[last]
                tok[i] = tok[last]
            self.live.pop()
            tok.pop()
        self.pos = self.pos[:len(self.live)]
        return out

    def _forward(self, tok: list[int]) -> torch.Tensor:
        """Feed token tok[i] to slot i at position pos[i]; logits [n, V] for the next step."""
        d, nkv, rep, dec = self.dec.d, self.dec.nkv, self.dec.rep, self.dec
        n = len(tok)
        pos = self.pos.to(self.dev)
        self._reserve(n, int(self.pos.max()) + 1)
        x = dec.embed(torch.tensor(tok, device=self.dev))
        cos, sin = dec.rotary(x, pos[:, None])
        cos, sin = cos[:, 0], sin[:, 0]
        Lk = int(self.pos.max()) + 1
        keys = torch.arange(Lk, device=self.dev)
        bias = torch.zeros(n, 1, 1, Lk, device=self.dev).masked_fill_(
            (keys[None, :] > pos[:, None])[:, None, None, :], float("-inf"))
        slots = torch.arange(n, device=self.dev)
        for plan, K, V in zip(dec.layers, self.K, self.V):
            q, k, v = dec.qkv(plan, x, (n,))
            q, k = dec.rope(q, k, cos, sin)  # [n, heads, d]
            K[slots, :, pos] = k
            V[slots, :, pos] = v
            s = torch.matmul((q * dec.scale).view(n, nkv, rep, d),
                             K[:n, :, :Lk].transpose(-1, -2)).float() + bias
            p = torch.softmax(s, dim=-1)
            o = torch.matmul(p.to(dec.dtype), V[:n, :, :Lk])  # [n, nkv, rep, d]
            x = x + plan.o_proj(o.reshape(n, dec.nh * d))
            x = x + plan.mlp(plan.ln2(x))
        self.pos += 1
        return dec.lm_head(dec.norm(x)).float()

