"""`TorchEngine`: the in-process policy engine (CPU default, GPU capable).

What it guarantees (SPEC §3):
* every sampled token comes with `log π_behaviour(token | prefix)` under the processed
  distribution it was drawn from (`sampling.process_logits`), and `score` recomputes the
  same numbers from a teacher-forced forward pass of the HF model (within 1e-4 in fp32);
* identical prompts in one call (the G members of a group) are prefilled once;
* sample i draws from its own random stream, seeded from (seed, i) — or (seed,
  sample_seeds[i]) — so it does not depend on which other prompts share the batch.

How it is fast. Hugging Face `generate` recomputes a shared prompt G times and, per step,
re-concatenates the whole KV cache (`DynamicCache` grows by `torch.cat`), rebuilds a 4-D
mask and runs a stack of generic logits processors. For Llama-family models (llama, qwen2,
qwen3, mistral without sliding window) the engine instead runs its own decode step on the
model's own modules (norms, projections, MLP, rotary):
* the prompt KV is kept once per *unique* prompt ([U, kv_heads, L, d]) and each group's G
  slots attend to it with one batched matmul — no copy of the prompt KV per sample;
* the generated part of the KV lives in a per-slot buffer written in place (allocated in
  blocks that double when full, never per step);
* the two attention parts are merged with the log-sum-exp trick (as flash-decoding does);
* the prompt is prefilled right-padded with a causal SDPA (no padding mask needed; each
  group's decode masks its own padding);
* finished samples are compacted out of the batch once half of the slots are idle;
* on small models q/k/v and gate/up run as single matmuls and RMSNorm as one op (a decode
  step of a tiny model is bound by per-op overhead, not FLOPs).
Other architectures fall back to the model's own forward with a `DynamicCache`, left
padding, attention mask and position ids (still prefix-shared). `backend="hf"` forces it.
`generate` decodes one batch until its last sample stops; `stream` instead opens a decode
that sequences join and leave while it runs (continuous batching, `rlvr.engines.stream`).

Cross-turn KV reuse (fast path only). A multi-turn episode calls `generate` once per turn
with the whole transcript as the prompt, and turn t+1's prompt starts with turn t's prompt
and its sampled ids. So after each call the engine keeps, per sample, the KV of prompt +
completion (all but the last sampled token, which was never fed) in `_PrefixCache`, an LRU
bounded by resident tokens (`prefix_cache_tokens`; 0 = off). The next call looks up, per
unique prompt, the longest entry that is a strict prefix of it, copies that KV and
prefills only the rest (a position's KV depends only on the tokens up to it). An entry
that a new one extends is dropped, so an episode holds one entry. Sampled ids are those of
a full re-prefill; logprobs agree to float rounding (the reused KV of a completion was
computed one token at a time, not by the chunked prefill: ~1e-6 in fp32). Which KV is
reused is a function of the episodes' own history, not of older cache contents, so a
resumed run still reproduces an uninterrupted one bit for bit (`_PrefixCache` says how).
Counters: prefill_tokens_requested = computed + saved (identical prompts of the call) +
reused (from the cache); prefix_cache_hits / _evicted_tokens per call; prefix_cache_tokens
/ _entries are levels (`stats` keeps the last). The cache is keyed to
the weights: `sync_weights` and `close` clear it, and every call also checks the
parameters' storage and in-place version counters, so an optimizer step on a model shared
through `from_model` cannot serve stale KV either. Memory per cached token: 2 x layers x
kv_heads x head_dim x dtype bytes (2 KiB for the CPU-default test model, ~12 KiB for a
Qwen2.5-0.5B in bf16).
"""
from __future__ import annotations

import inspect
import sys
import time
from contextlib import contextmanager
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from rlvr.engines.base import Sample, SamplingParams, WeightSource, check_policy_step
from rlvr.engines.constraint import TokenGrammar
from rlvr.engines.model_dir import Policy, load_policy
from rlvr.engines.sampling import check_params, process, sample, sample_uniforms
from rlvr.engines.logprobs import sequence_logprobs

FAST_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")
# Fuse q/k/v and gate/up into single matmuls (a weight copy per generate call) only for
# models this small, where per-op overhead, not FLOPs, bounds a decode step.
FUSE_MAX_PARAMS = 200_000_000
# Generated-token KV buffers start this long and double when full (no per-step allocation).
SUFFIX_BLOCK = 256
# Default bound of the cross-turn prefix cache, in resident tokens (a cohort of 64 episodes
# of 2k-token transcripts; 256 MiB for the CPU-default model). 0 turns the cache off.
PREFIX_CACHE_TOKENS = 131072
# A prefill chunk whose suffix queries attend to reused KV needs an explicit mask of
# n x suffix x total positions; keep it within this multiple of `prefill_chunk_tokens`.
MASKED_CHUNK_FACTOR = 2048
# Stats that are levels (resident cache size), not per-call amounts: `stats` keeps the last.
GAUGES = ("prefix_cache_tokens", "prefix_cache_entries")


@dataclass
class _Layout:
    """Decode slots: U groups x G slots, flattened as slot = u * G + g. A slot holds one
    sample or is a dummy (sample index = B, the trash row)."""

    U: int
    G: int
    slot_sample: torch.Tensor  # [S] long, sample index per slot (B for dummies)

    @property
    def S(self) -> int:
        return self.U * self.G


class TorchEngine:
    """`TokenEngine` over a local HF causal-LM directory (see the module docstring)."""

    name = "torch"

    def __init__(self, model_dir: Path | str | None = None, *, device: str = "cpu",
                 dtype: str = "float32", policy_version: str | None = None,
                 policy_step: int = 0, share_prefix: bool = True, backend: str = "auto",
                 prefill_chunk_tokens: int = 16384, compact_below: float = 0.5,
                 prefix_cache_tokens: int = PREFIX_CACHE_TOKENS, policy: Policy | None = None):
        if policy is None:
            if model_dir is None:
                raise ValueError("TorchEngine needs a model_dir (or a loaded policy)")
            policy = load_policy(model_dir, device=device, dtype=dtype, version=policy_version)
        self.model = policy.model
        self.tokenizer = policy.tokenizer
        self.model_dir = policy.model_dir
        self.policy_version = policy_version or policy.version
        self.policy_step = check_policy_step(policy_step)
        self.share_prefix = share_prefix
        self.prefill_chunk_tokens = prefill_chunk_tokens
        self.compact_below = compact_below
        self.vocab_size = int(self.model.config.vocab_size)
        if backend not in ("auto", "fast", "hf"):
            raise ValueError(f"backend must be auto|fast|hf, got {backend!r}")
        fast_ok = _FastDecoder.supports(self.model)
        if backend == "fast" and not fast_ok:
            raise ValueError(f"model_type {self.model.config.model_type!r} has no fast decode "
                             f"path (supported: {', '.join(FAST_MODEL_TYPES)}); use backend='hf'")
        self.backend = "fast" if (backend == "fast" or (backend == "auto" and fast_ok)) else "hf"
        if isinstance(prefix_cache_tokens, bool) or not isinstance(prefix_cache_tokens, int) \
                or prefix_cache_tokens < 0:
            raise ValueError(f"prefix_cache_tokens must be an int >= 0 (0 = off), "
                             f"got {prefix_cache_tokens!r}")
        # only the fast decoder reads cached KV; the HF fallback re-prefills every turn
        self.prefix_cache = _PrefixCache(prefix_cache_tokens if self.backend == "fast" else 0)
        self._weights_key: tuple = ()
        self._grammars: dict[str, TokenGrammar] = {}
        self.stats: dict[str, float] = {}
        self.last_stats: dict[str, float] = {}

    @classmethod
    def from_model(cls, model, tokenizer=None, *, policy_version: str, policy_step: int = 0,
                   **opts) -> "TorchEngine":
        """Wrap an already-loaded model (e.g. the trainer's current policy). The engine runs it
        in eval mode (no dropout) and restores its train/eval state after each call."""
        return cls(policy=Policy(model=model, tokenizer=tokenizer, model_dir=Path("<memory>"),
                                 version=policy_version), policy_version=policy_version,
                   policy_step=policy_step, **opts)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def sync_weights(self, source: WeightSource, policy_version: str, policy_step: int) -> None:
        """Load new weights in place (same architecture, strict names and shapes) and stamp
        them. `source` is a state dict (the in-process trainer's tensors; copied, so the
        trainer may keep updating its own) or a policy directory whose weights are loaded."""
        step = check_policy_step(policy_step)
        if isinstance(source, Mapping):
            state = source
        else:
            dtype = str(next(self.model.parameters()).dtype).removeprefix("torch.")
            state = load_policy(source, device=str(self.device), dtype=dtype).model.state_dict()
            self.model_dir = Path(source)
        with torch.no_grad():
            self.model.load_state_dict(state)
        self.prefix_cache.clear()  # KV of the old weights
        self.policy_version = policy_version
        self.policy_step = step

    def close(self) -> None:
        """Drop the prefix cache's KV; the model itself lives in this process (and may be the
        trainer's), so nothing else is released."""
        self.prefix_cache.clear()

    def _check_cache_weights(self) -> None:
        """Clear the prefix cache if any parameter was replaced or changed in place since the
        last call (an optimizer step on a `from_model` model the trainer shares, a
        `load_state_dict` outside `sync_weights`): its KV would be silently stale."""
        key = tuple((p.data_ptr(), p._version) for p in self.model.parameters())
        if key != self._weights_key:
            self.prefix_cache.clear()
            self._weights_key = key

    def grammar(self, name: str) -> TokenGrammar | None:
        """Grammar `name` compiled for this engine's tokenizer (once), or None for ""."""
        if not name:
            return None
        if name not in self._grammars:
            if self.tokenizer is None:
                raise ValueError(f"decoding.grammar {name!r} needs the policy's tokenizer; "
                                 "this engine was built without one")
            self._grammars[name] = TokenGrammar(name, self.tokenizer, self.vocab_size)
        return self._grammars[name]

    # ---- generation ---------------------------------------------------------------------
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, *, seed: int,
                 sample_seeds: Sequence[int] | None = None) -> list[Sample]:
        """One sample per prompt. Sample i's random stream is keyed by (seed, i), or by
        (seed, sample_seeds[i]) when given — use that to make an episode's turn reproducible
        whatever else is in the batch."""
        with torch.inference_mode(), _eval_mode(self.model):
            return self._generate(prompts, params, seed, sample_seeds)

    def _generate(self, prompts, params, seed, sample_seeds) -> list[Sample]:
        check_params(params, self.vocab_size)
        prompts = [self._check_prompt(i, p) for i, p in enumerate(prompts)]
        B, T = len(prompts), params.max_new_tokens
        if sample_seeds is not None and len(sample_seeds) != B:
            raise ValueError(f"sample_seeds has {len(sample_seeds)} entries for {B} prompts")
        if B == 0:
            return []
        t0 = time.perf_counter()
        groups = _group_prompts(prompts, self.share_prefix)
        unique = [prompts[g[0]] for g in groups]
        if T == 0:
            self.last_stats = {}
            return [Sample(token_ids=[], logprobs=[], finish_reason="length") for _ in prompts]
        dev = self.device
        cache = self.prefix_cache
        evicted0 = cache.evicted_tokens
        if self.backend == "fast":
            decoder = _FastDecoder(self.model, self.prefill_chunk_tokens)
            if cache.max_tokens:
                self._check_cache_weights()
                cache.begin_call()
            hits = [cache.lookup(u) for u in unique]  # (entry | None, reused tokens)
            first_logits = decoder.prefill(unique, hits)  # [U, V] fp32
        else:
            decoder, hits = _HFDecoder(self.model), [(None, 0)] * len(unique)
            first_logits = decoder.prefill(unique)
        reused = [c for _, c in hits]
        t_prefill = time.perf_counter()

        G = max(len(g) for g in groups)
        slot_sample = torch.full((len(groups) * G,), B, dtype=torch.long)
        for u, members in enumerate(groups):
            slot_sample[u * G: u * G + len(members)] = torch.tensor(members)
        layout = _Layout(U=len(groups), G=G, slot_sample=slot_sample.to(dev))
        decoder.start(G, T)
        logits = first_logits.repeat_interleave(G, dim=0)

        keys = sample_seeds if sample_seeds is not None else range(B)
        noise = np.stack([sample_uniforms(seed, k, T) for k in keys]
                         + [np.zeros(T, np.float32)])
        noise = torch.from_numpy(noise).to(dev)
        out_tok = torch.zeros(B + 1, T, dtype=torch.long, device=dev)
        out_lp = torch.zeros(B + 1, T, dtype=torch.float32, device=dev)
        length = torch.full((B + 1,), T, dtype=torch.long, device=dev)
        stop_ids = torch.tensor(sorted(set(params.stop_token_ids)), dtype=torch.long, device=dev)
        finished = layout.slot_sample == B  # dummies never produce anything
        slot_noise = noise[layout.slot_sample]
        grammar = self.grammar(params.grammar)
        matchers = grammar.start(prompts) if grammar is not None else None
        steps = slot_steps = 0
        for t in range(T):
            live = None
            if grammar is not None:  # each live slot's mask; idle slots' rows stay all-allowed
                live = torch.nonzero(~finished & (layout.slot_sample < B)).squeeze(1).tolist()
                owners = layout.slot_sample[live].tolist()
                masks = torch.full((layout.S, grammar.words), -1, dtype=torch.int32)
                grammar.fill_rows([(matchers[i], slot) for i, slot in zip(owners, live)], masks)
                lp = process(logits, params, masks.to(dev))
            else:
                lp = process(logits, params)
            tok = sample(lp, slot_noise[:, t])
            out_tok[layout.slot_sample, t] = tok
            out_lp[layout.slot_sample, t] = lp.gather(1, tok[:, None]).squeeze(1)
            if live is not None:
                grammar.advance([matchers[i] for i in owners], tok[live].tolist())
            steps, slot_steps = steps + 1, slot_steps + layout.S
            if stop_ids.numel():
                hit = torch.isin(tok, stop_ids) & ~finished
                length[layout.slot_sample[hit]] = t + 1
                finished |= hit
            if t == T - 1:
                break
            n_active = int((~finished).sum())
            if n_active == 0:
                break
            if n_active <= self.compact_below * layout.S and layout.S - n_active >= 2:
                if cache.max_tokens:  # finished slots leave the batch: keep their KV first
                    self._harvest(decoder, layout, finished, prompts, out_tok, length, B)
                layout, src = _compact(layout, finished, B)
                decoder.select(layout.U, layout.G, src)
                tok, finished, slot_noise = tok[src], finished[src], slot_noise[src]
            logits = decoder.step(tok, t)
        if cache.max_tokens:
            self._harvest(decoder, layout, layout.slot_sample < B, prompts, out_tok, length, B)
        t_end = time.perf_counter()

        lengths = length[:B].tolist()
        toks, lps = out_tok[:B].tolist(), out_lp[:B].tolist()
        prefill_by_sample = [0] * B
        for g, c in zip(groups, reused):
            prefill_by_sample[g[0]] = len(prompts[g[0]]) - c
        stop_set = set(params.stop_token_ids)
        samples = []
        for i in range(B):
            n = lengths[i]  # a stop token is always the last kept token
            stopped = toks[i][n - 1] in stop_set
            samples.append(Sample(token_ids=toks[i][:n], logprobs=lps[i][:n],
                                  finish_reason="stop" if stopped else "length",
                                  prefill_tokens=prefill_by_sample[i]))
        requested = sum(len(p) for p in prompts)
        shared = requested - sum(len(u) for u in unique)
        # requested = computed + saved (identical prompts of this call, one prefill)
        #           + reused (KV of unique prompts' prefixes, from the prefix cache)
        self.last_stats = {
            "samples": B, "unique_prompts": len(unique),
            "prefill_tokens_requested": requested,
            "prefill_tokens_computed": requested - shared - sum(reused),
            "prefill_tokens_saved": shared,
            "prefill_tokens_reused": sum(reused), "prefix_cache_hits": sum(c > 0 for c in reused),
            "prefix_cache_evicted_tokens": cache.evicted_tokens - evicted0,
            "prefix_cache_tokens": cache.tokens, "prefix_cache_entries": len(cache),
            "generated_tokens": sum(len(s.token_ids) for s in samples),
            "decode_steps": steps, "slot_steps": slot_steps,
            "prefill_seconds": t_prefill - t0, "decode_seconds": t_end - t_prefill,
        }
        for k, v in self.last_stats.items():
            self.stats[k] = v if k in GAUGES else self.stats.get(k, 0) + v
        return samples

    def stream(self, params: SamplingParams, *, seed: int, max_slots: int = 0):
        """A `DecodeStream` (continuous batching: sequences join and leave a running
        decode, `rlvr.engines.stream`) over this engine's model and prefix cache; at most
        `max_slots` sequences decode at once (0 = no bound). Fast decoder only."""
        from rlvr.engines.stream import DecodeStream

        return DecodeStream(self, params, seed=seed, max_slots=max_slots)

    def _harvest(self, decoder: "_FastDecoder", layout: _Layout, which: torch.Tensor,
                 prompts: list[list[int]], out_tok: torch.Tensor, length: torch.Tensor,
                 B: int) -> None:
        """Put the KV of prompt + completion of the real slots in `which` into the prefix
        cache. The last sampled token of a sample was never fed, so it has no KV; the
        generated KV of a slot at step j is that of its sample's token j."""
        slots = torch.nonzero(which & (layout.slot_sample < B)).squeeze(1).tolist()
        if not slots:
            return
        owners = layout.slot_sample[slots].tolist()
        lens = length[owners].tolist()
        toks = out_tok[owners].tolist()
        for slot, i, n, tk in zip(slots, owners, lens, toks):
            tokens = prompts[i] + tk[:n - 1]
            if self.prefix_cache.wants(tokens):
                k, v = decoder.kv(slot, slot // layout.G, len(prompts[i]), n - 1)
                self.prefix_cache.insert(tokens, k, v)

    # ---- scoring ------------------------------------------------------------------------
    def score(self, prompt: Sequence[int], completion: Sequence[int],
              params: SamplingParams) -> list[float]:
        return self.score_batch([prompt], [completion], params)[0]

    def score_batch(self, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                    params: SamplingParams, *, batch_size: int = 16) -> list[list[float]]:
        """Teacher-forced processed logprobs of each completion after its prompt, with the
        model's own forward (left padding + attention mask + position ids), in batches."""
        check_params(params, self.vocab_size)
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
        out: list[list[float]] = []
        with torch.inference_mode(), _eval_mode(self.model):
            for start in range(0, len(prompts), batch_size):
                out.extend(self._score_chunk(prompts[start:start + batch_size],
                                             completions[start:start + batch_size], params))
        return out

    def _score_chunk(self, prompts, completions, params) -> list[list[float]]:
        """The trainer's code path (`rlvr.engines.logprobs.sequence_logprobs`), left-padded,
        with the LM head applied to the completion positions only."""
        seqs = [self._check_prompt(i, p) + self._check_ids(f"completion {i}", c)
                for i, (p, c) in enumerate(zip(prompts, completions))]
        ids, mask, pos = _left_pad(seqs, self.device)
        L = ids.shape[1]
        only = torch.zeros(len(seqs), L - 1, dtype=torch.bool, device=ids.device)
        for i, c in enumerate(completions):
            only[i, L - 1 - len(c): L - 1] = True  # next-token slots that predict c
        grammar = self.grammar(params.grammar)
        allowed = None
        if grammar is not None:  # each completion is one constrained sample: replay its masks
            allowed = torch.cat([grammar.replay(c, p) for p, c in zip(prompts, completions)]
                                ).to(ids.device)
        lp = sequence_logprobs(self.model, ids, mask, params, position_ids=pos,
                               only=only, allowed=allowed).logprobs  # [n, L-1]
        return [lp[i, L - 1 - len(c): L - 1].tolist() if c else []
                for i, c in enumerate(completions)]

    def _check_prompt(self, i: int, prompt: Sequence[int]) -> list[int]:
        if not len(prompt):
            raise ValueError(f"prompt {i} is empty (a prompt needs at least one token)")
        return self._check_ids(f"prompt {i}", prompt)

    def _check_ids(self, what: str, ids: Sequence[int]) -> list[int]:
        out = [int(t) for t in ids]
        bad = [t for t in out if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"{what}: token id(s) {bad[:5]} outside the vocabulary "
                             f"(size {self.vocab_size})")
        return out


# ---- cross-turn prefix cache ---------------------------------------------------------------
@dataclass
class _Entry:
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


class _PrefixCache:
    """LRU of `_Entry`s bounded by resident tokens (`max_tokens`; 0 = off).

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
        self.entries: OrderedDict[int, _Entry] = OrderedDict()
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

    def lookup(self, prompt: Sequence[int]) -> tuple[_Entry | None, int]:
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
        self.entries[self._next] = _Entry(tokens=q, hashes=h, k=k, v=v, call=self.call)
        self._next += 1
        self.tokens += n
        while self.tokens > self.max_tokens:
            _, old = self.entries.popitem(last=False)
            self.tokens -= len(old.tokens)
            self.evicted_tokens += len(old.tokens)
        self._idx = None


# ---- helpers ------------------------------------------------------------------------------
@contextmanager
def _eval_mode(model):
    """Run without dropout; give every module back the train/eval flag it had."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


def _group_prompts(prompts: list[list[int]], share: bool) -> list[list[int]]:
    """Sample indices grouped by identical prompt (first-appearance order)."""
    if not share:
        return [[i] for i in range(len(prompts))]
    index: dict[tuple[int, ...], int] = {}
    groups: list[list[int]] = []
    for i, p in enumerate(prompts):
        key = tuple(p)
        if key not in index:
            index[key] = len(groups)
            groups.append([])
        groups[index[key]].append(i)
    return groups


def _compact(layout: _Layout, finished: torch.Tensor, B: int) -> tuple[_Layout, torch.Tensor]:
    """Drop finished slots: keep groups with an active slot, pack their active slots.
    Returns the new layout and, per new slot, the old slot it continues (dummies repeat a
    live slot of their group, so their state stays valid)."""
    active = (~finished).view(layout.U, layout.G).cpu()
    counts = active.sum(1)
    keep = torch.nonzero(counts).squeeze(1)
    G = int(counts.max())
    src, owner = [], []
    old_samples = layout.slot_sample.cpu()
    for u in keep.tolist():
        live = (torch.nonzero(active[u]).squeeze(1) + u * layout.G).tolist()
        src.extend(live + [live[0]] * (G - len(live)))
        owner.extend(old_samples[live].tolist() + [B] * (G - len(live)))
    dev = layout.slot_sample.device
    new = _Layout(U=len(keep), G=G, slot_sample=torch.tensor(owner, device=dev))
    return new, torch.tensor(src, device=dev)


def _left_pad(seqs: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    L = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), L, dtype=torch.long)
    mask = torch.zeros(len(seqs), L, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, L - len(s):] = torch.tensor(s)
        mask[i, L - len(s):] = 1
    pos = (mask.cumsum(-1) - 1).clamp_(min=0)
    return ids.to(device), mask.to(device), pos.to(device)


def _cache_kwarg(model) -> str:
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class _HFDecoder:
    """Generic path: the model's own forward with a DynamicCache (any causal LM)."""

    def __init__(self, model):
        from transformers import DynamicCache

        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.cache_kw = _cache_kwarg(model)

    def prefill(self, prompts: list[list[int]]) -> torch.Tensor:
        dev = next(self.model.parameters()).device
        ids, self.mask, pos = _left_pad(prompts, dev)
        self.pos = pos[:, -1] + 1
        out = self.model(input_ids=ids, attention_mask=self.mask, position_ids=pos,
                         use_cache=True, logits_to_keep=1, **{self.cache_kw: self.cache})
        return out.logits[:, -1].float()

    def start(self, G: int, T: int) -> None:
        if G > 1:
            self.cache.batch_repeat_interleave(G)
            self.mask = self.mask.repeat_interleave(G, dim=0)
            self.pos = self.pos.repeat_interleave(G, dim=0)

    def select(self, U: int, G: int, src: torch.Tensor) -> None:
        self.cache.batch_select_indices(src)
        self.mask, self.pos = self.mask[src], self.pos[src]

    def step(self, tok: torch.Tensor, t: int) -> torch.Tensor:
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(tok), 1)], dim=1)
        out = self.model(input_ids=tok[:, None], attention_mask=self.mask,
                         position_ids=(self.pos + t)[:, None], use_cache=True,
                         **{self.cache_kw: self.cache})
        return out.logits[:, -1].float()


class _FastDecoder:
    """Llama-family decode with a shared prompt KV per unique prompt (module docstring)."""

    @staticmethod
    def supports(model) -> bool:
        cfg = model.config
        if getattr(cfg, "model_type", None) not in FAST_MODEL_TYPES:
            return False
        if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or ())):
            return False
        if getattr(cfg, "use_sliding_window", False) or (
                cfg.model_type == "mistral" and getattr(cfg, "sliding_window", None)):
            return False
        inner = getattr(model, "model", None)
        needed = ("embed_tokens", "layers", "norm", "rotary_emb")
        if inner is None or not all(hasattr(inner, a) for a in needed) or not hasattr(model, "lm_head"):
            return False
        attn = inner.layers[0].self_attn
        return all(hasattr(attn, a) for a in ("q_proj", "k_proj", "v_proj", "o_proj", "scaling",
                                              "head_dim"))

    def __init__(self, model, chunk_tokens: int):
        inner = model.model
        cfg = model.config
        p = next(model.parameters())
        self.dev, self.dtype = p.device, p.dtype
        self.embed, self.rotary, self.lm_head = inner.embed_tokens, inner.rotary_emb, model.lm_head
        attn = inner.layers[0].self_attn
        self.rope = sys.modules[type(attn).__module__].apply_rotary_pos_emb
        self.d, self.scale = attn.head_dim, attn.scaling
        self.nh, self.nkv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.rep = self.nh // self.nkv
        self.chunk_tokens = chunk_tokens
        fuse = sum(q.numel() for q in model.parameters()) <= FUSE_MAX_PARAMS
        self.layers = [_LayerPlan(layer, fuse, self.dtype) for layer in inner.layers]
        self.norm = _rms_norm(inner.norm, self.dtype)

    def _qkv(self, plan: "_LayerPlan", x: torch.Tensor, shape: tuple[int, ...]):
        """Layer input -> q [*shape, nh, d], k and v [*shape, nkv, d], before rotary."""
        q, k, v = plan.qkv(plan.ln1(x))
        q = q.view(*shape, self.nh, self.d)
        k = k.view(*shape, self.nkv, self.d)
        v = v.view(*shape, self.nkv, self.d)
        if plan.q_norm is not None:
            q, k = plan.q_norm(q), plan.k_norm(k)
        return q, k, v

    def prefill(self, prompts: list[list[int]],
                prefixes: Sequence[tuple["_Entry | None", int]]) -> torch.Tensor:
        """KV of every prompt into Kp (right-padded) and the logits after its last token.
        `prefixes[u]` = (cache entry, c): the first c tokens of prompt u share the entry's
        tokens, so their KV is copied and only the rest is computed."""
        U = len(prompts)
        lens = torch.tensor([len(p) for p in prompts])
        L = int(lens.max())
        self.lens = lens.to(self.dev)
        self.Kp = [torch.zeros(U, self.nkv, L, self.d, dtype=self.dtype, device=self.dev)
                   for _ in self.layers]
        self.Vp = [torch.zeros_like(k) for k in self.Kp]
        cached = [c for _, c in prefixes]
        for u, (entry, c) in enumerate(prefixes):
            if c:
                for layer, (Kp, Vp) in enumerate(zip(self.Kp, self.Vp)):
                    Kp[u, :, :c] = entry.k[layer, :, :c]
                    Vp[u, :, :c] = entry.v[layer, :, :c]
        logits = None
        suffix = [len(p) - c for p, c in zip(prompts, cached)]
        order = sorted(range(U), key=lambda i: -suffix[i])
        start = 0
        while start < U:  # chunks of similar suffix length (sorted), bounded work
            idx = self._chunk(order, start, suffix, lens.tolist(), cached)
            start += len(idx)
            chunk_logits = self._prefill_chunk([prompts[i] for i in idx],
                                               [cached[i] for i in idx], idx)
            if logits is None:
                logits = chunk_logits.new_empty(U, chunk_logits.shape[-1])
            logits[torch.tensor(idx, device=self.dev)] = chunk_logits
        keypos = torch.arange(L, device=self.dev)
        self.bias = torch.zeros(U, 1, 1, L, dtype=torch.float32, device=self.dev).masked_fill_(
            (keypos[None, :] >= self.lens[:, None])[:, None, None, :], float("-inf"))
        return logits

    def _chunk(self, order, start, suffix, lens, cached) -> list[int]:
        """The next prompts of `order` for one prefill: padded suffix tokens within
        `chunk_tokens` and, where reused KV needs an explicit mask, its size within
        MASKED_CHUNK_FACTOR times that."""
        Sc = suffix[order[start]]
        n, Lc, masked = 1, lens[order[start]], cached[order[start]] > 0
        while start + n < len(order) and (n + 1) * Sc <= self.chunk_tokens:
            i = order[start + n]
            Lc2, masked2 = max(Lc, lens[i]), masked or cached[i] > 0
            if masked2 and (n + 1) * Sc * Lc2 > self.chunk_tokens * MASKED_CHUNK_FACTOR:
                break
            n, Lc, masked = n + 1, Lc2, masked2
        return order[start:start + n]

    def _prefill_chunk(self, prompts, cached, idx) -> torch.Tensor:
        """Prefill the uncached suffix of n prompts (rows idx of Kp); logits [n, V]. With no
        reused KV this is a plain causal SDPA over the prompts; otherwise suffix query j of
        row r (position c_r + j) attends to keys 0..c_r + j of its row of Kp, which holds the
        reused KV and, written layer by layer, the suffix's own."""
        n = len(prompts)
        suf = [len(p) - c for p, c in zip(prompts, cached)]
        Sc, Lc = max(suf), max(len(p) for p in prompts)
        ids = torch.zeros(n, Sc, dtype=torch.long)
        for r, (p, c) in enumerate(zip(prompts, cached)):
            ids[r, :len(p) - c] = torch.tensor(p[c:])  # right padding
        c_t = torch.tensor(cached, device=self.dev)
        idx_t = torch.tensor(idx, device=self.dev)
        x = self.embed(ids.to(self.dev))
        pos = c_t[:, None] + torch.arange(Sc, device=self.dev)[None, :]
        cos, sin = self.rotary(x, pos)
        masked = any(cached)
        if masked:
            allowed = (torch.arange(Lc, device=self.dev)[None, None, :]
                       <= pos[:, :, None])[:, None]  # [n, 1, Sc, Lc]
            rows = torch.tensor([i for i, s in zip(idx, suf) for _ in range(s)], device=self.dev)
            qry = torch.tensor([j for s in suf for j in range(s)], device=self.dev)
            keyp = torch.tensor([c + j for c, s in zip(cached, suf) for j in range(s)],
                                device=self.dev)
            src = torch.tensor([r for r, s in enumerate(suf) for _ in range(s)], device=self.dev)
        for plan, Kp, Vp in zip(self.layers, self.Kp, self.Vp):
            q, k, v = self._qkv(plan, x, (n, Sc))
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            q, k = self.rope(q, k, cos, sin)
            if masked:
                Kp[rows, :, keyp] = k[src, :, qry]
                Vp[rows, :, keyp] = v[src, :, qry]
                o = F.scaled_dot_product_attention(q, Kp[idx_t, :, :Lc], Vp[idx_t, :, :Lc],
                                                   attn_mask=allowed, scale=self.scale,
                                                   enable_gqa=self.rep > 1)
            else:
                Kp[idx_t, :, :Sc] = k
                Vp[idx_t, :, :Sc] = v
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale,
                                                   enable_gqa=self.rep > 1)
            x = x + plan.o_proj(o.transpose(1, 2).reshape(n, Sc, self.nh * self.d))
            x = x + plan.mlp(plan.ln2(x))
        last = x[torch.arange(n, device=self.dev), torch.tensor(suf, device=self.dev) - 1]
        return self.lm_head(self.norm(last)).float()

    def kv(self, slot: int, u: int, prompt_len: int, n_gen: int):
        """Copies of slot's KV: its group's prompt then its first n_gen generated tokens,
        as K and V [layers, kv_heads, prompt_len + n_gen, d]."""
        k = torch.stack([torch.cat([Kp[u, :, :prompt_len], Ks[slot, :, :n_gen]], dim=1)
                         for Kp, Ks in zip(self.Kp, self.Ks)])
        v = torch.stack([torch.cat([Vp[u, :, :prompt_len], Vs[slot, :, :n_gen]], dim=1)
                         for Vp, Vs in zip(self.Vp, self.Vs)])
        return k, v

    def start(self, G: int, T: int) -> None:
        U = len(self.lens)
        self.U, self.G, self.T = U, G, T
        cap = min(T, SUFFIX_BLOCK)  # grown by doubling: most turns stop long before T
        self.Ks = [torch.zeros(U * G, self.nkv, cap, self.d, dtype=self.dtype, device=self.dev)
                   for _ in self.layers]
        self.Vs = [torch.zeros_like(k) for k in self.Ks]
        self.pos = self.lens.repeat_interleave(G)

    def _grow(self) -> None:
        cap = min(self.T, 2 * self.Ks[0].shape[2])
        def grown(buf):
            new = buf.new_zeros(*buf.shape[:2], cap, self.d)
            new[:, :, :buf.shape[2]] = buf
            return new
        self.Ks = [grown(k) for k in self.Ks]
        self.Vs = [grown(v) for v in self.Vs]

    def select(self, U: int, G: int, src: torch.Tensor) -> None:
        groups = src.view(U, G)[:, 0] // self.G
        if U != self.U:
            self.Kp = [k.index_select(0, groups) for k in self.Kp]
            self.Vp = [v.index_select(0, groups) for v in self.Vp]
            self.bias = self.bias.index_select(0, groups)
        self.Ks = [k.index_select(0, src) for k in self.Ks]
        self.Vs = [v.index_select(0, src) for v in self.Vs]
        self.pos = self.pos.index_select(0, src)
        self.U, self.G = U, G

    def step(self, tok: torch.Tensor, t: int) -> torch.Tensor:
        """Feed the token sampled at step t (position prompt_len + t); logits for step t+1."""
        U, G, S, nkv, rep, d = self.U, self.G, len(tok), self.nkv, self.rep, self.d
        if t >= self.Ks[0].shape[2]:
            self._grow()
        x = self.embed(tok)
        cos, sin = self.rotary(x, (self.pos + t)[:, None])
        cos, sin = cos[:, 0], sin[:, 0]  # [S, d]
        for plan, Kp, Vp, Ks, Vs in zip(self.layers, self.Kp, self.Vp, self.Ks, self.Vs):
            q, k, v = self._qkv(plan, x, (S,))
            q, k = self.rope(q, k, cos, sin)  # [S, heads, d]
            Ks[:, :, t] = k
            Vs[:, :, t] = v
            q = q * self.scale
            # generated part: each slot against its own keys  -> [S, nkv, rep, t+1]
            s_s = torch.matmul(q.view(S, nkv, rep, d), Ks[:, :, :t + 1].transpose(-1, -2)).float()
            m_s = s_s.amax(-1, keepdim=True)
            e_s = (s_s - m_s).exp()
            z_s = e_s.sum(-1, keepdim=True)
            o_s = torch.matmul(e_s.to(self.dtype), Vs[:, :, :t + 1]).float()
            # prompt part: all G slots of a group against the group's keys at once
            qp = q.view(U, G, nkv, rep, d).permute(0, 2, 1, 3, 4).reshape(U, nkv, G * rep, d)
            s_p = torch.matmul(qp, Kp.transpose(-1, -2)).float() + self.bias
            m_p = s_p.amax(-1, keepdim=True)
            e_p = (s_p - m_p).exp()
            z_p = _to_slots(e_p.sum(-1, keepdim=True), U, G, nkv, rep)
            o_p = _to_slots(torch.matmul(e_p.to(self.dtype), Vp).float(), U, G, nkv, rep)
            m_p = _to_slots(m_p, U, G, nkv, rep)
            m = torch.maximum(m_p, m_s)
            a_p, a_s = (m_p - m).exp(), (m_s - m).exp()
            o = (o_p * a_p + o_s * a_s) / (z_p * a_p + z_s * a_s)
            x = x + plan.o_proj(o.to(self.dtype).reshape(S, self.nh * d))
            x = x + plan.mlp(plan.ln2(x))
        return self.lm_head(self.norm(x)).float()


_RMS_NORMS = ("LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "MistralRMSNorm")


def _rms_norm(module, dtype):
    """One fused op instead of HF's six for the standard RMSNorm in fp32; else the module."""
    if dtype == torch.float32 and type(module).__name__ in _RMS_NORMS:
        w, eps = module.weight, module.variance_epsilon
        return lambda x: F.rms_norm(x, (w.shape[-1],), w, eps)
    return module


def _fused_linear(mods):
    """Linears sharing one input as one matmul (weights concatenated for this generate call;
    cheap for the small models it is used on). Returns h -> tuple of outputs."""
    weight = torch.cat([m.weight for m in mods])
    bias = None
    if any(m.bias is not None for m in mods):
        bias = torch.cat([m.bias if m.bias is not None else m.weight.new_zeros(m.out_features)
                          for m in mods])
    sizes = [m.out_features for m in mods]
    return lambda h: F.linear(h, weight, bias).split(sizes, dim=-1)


class _LayerPlan:
    """A decoder layer as the few calls the fast path makes (norms, qkv, o_proj, MLP)."""

    def __init__(self, layer, fuse: bool, dtype):
        attn, mlp = layer.self_attn, layer.mlp
        self.ln1 = _rms_norm(layer.input_layernorm, dtype)
        self.ln2 = _rms_norm(layer.post_attention_layernorm, dtype)
        self.o_proj = attn.o_proj
        self.q_norm = _rms_norm(attn.q_norm, dtype) if hasattr(attn, "q_norm") else None
        self.k_norm = _rms_norm(attn.k_norm, dtype) if hasattr(attn, "k_norm") else None
        gated = all(hasattr(mlp, a) for a in ("gate_proj", "up_proj", "down_proj", "act_fn"))
        if fuse:
            self.qkv = _fused_linear([attn.q_proj, attn.k_proj, attn.v_proj])
        else:
            self.qkv = lambda h: (attn.q_proj(h), attn.k_proj(h), attn.v_proj(h))
        if fuse and gated:
            gate_up, act, down = _fused_linear([mlp.gate_proj, mlp.up_proj]), mlp.act_fn, mlp.down_proj

            def fused_mlp(h):
                g, u = gate_up(h)
                return down(act(g) * u)
            self.mlp = fused_mlp
        else:
            self.mlp = mlp


def _to_slots(a: torch.Tensor, U: int, G: int, nkv: int, rep: int) -> torch.Tensor:
    """[U, nkv, G*rep, k] (group layout) -> [U*G, nkv, rep, k] (slot layout)."""
    return a.view(U, nkv, G, rep, -1).permute(0, 2, 1, 3, 4).reshape(U * G, nkv, rep, -1)

