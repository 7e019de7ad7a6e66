"""`TorchEngine`: the in-process policy engine (CPU default, GPU capable).

What it guarantees (SPEC §3):
* every sampled token comes with `log π_behaviour(token | prefix)` under the processed
  distribution it was drawn from (`sampling.process_logits`), and `score` recomputes the
  same numbers from a teacher-forced forward pass of the HF model (within 1e-4 in fp32);
* identical prompts in one call (the G members of a group) are prefilled once;
* sample i draws from its own random stream, seeded from (seed, i) — or (seed,
  sample_seeds[i]) — so it does not depend on which other prompts share the batch.

How it is fast. For Llama-family models (llama, qwen2, qwen3, mistral without sliding
window) the engine runs its own decode step on the model's own modules
(`rlvr.engines.fast_decoder`: one prompt KV per unique prompt that its G slots attend to
together, generated KV in per-slot buffers, single fused matmuls on small models), and
compacts finished samples out of the batch once half of the slots are idle. Other
architectures fall back to the model's own forward with a `DynamicCache`, left padding,
attention mask and position ids (`rlvr.engines.hf_decoder`; still prefix-shared).
`backend="hf"` forces it.
`generate` decodes one batch until its last sample stops; `stream` instead opens a decode
that sequences join and leave while it runs (continuous batching, `rlvr.engines.stream`).

Cross-turn KV reuse (fast path only). A multi-turn episode calls `generate` once per turn
with the whole transcript as the prompt, and turn t+1's prompt starts with turn t's prompt
and its sampled ids. So after each call the engine keeps, per sample, the KV of prompt +
completion (all but the last sampled token, which was never fed) in a `PrefixCache`
(`rlvr.engines.prefix_cache`), an LRU bounded by resident tokens (`prefix_cache_tokens`; 0 =
off). The next call looks up, per unique prompt, the longest entry that is a strict prefix
of it, copies that KV and prefills only the rest (a position's KV depends only on the tokens
up to it). An entry that a new one extends is dropped, so an episode holds one entry.
Sampled ids are those of a full re-prefill; logprobs agree to float rounding (the reused KV
of a completion was computed one token at a time, not by the chunked prefill: ~1e-6 in
fp32). Which KV is reused is a function of the episodes' own history, not of older cache
contents, so a resumed run still reproduces an uninterrupted one bit for bit (`PrefixCache`
says how). Counters: prefill_tokens_requested = computed + saved (identical prompts of the
call) + reused (from the cache); prefix_cache_hits / _evicted_tokens per call;
prefix_cache_tokens / _entries are levels (`stats` keeps the last). The cache is keyed to
the weights: `sync_weights` and `close` clear it, and every call also checks the parameters'
storage and in-place version counters, so an optimizer step on a model shared through
`from_model` cannot serve stale KV either. Memory per cached token: 2 x layers x kv_heads x
head_dim x dtype bytes (2 KiB for the CPU-default test model, ~12 KiB for a Qwen2.5-0.5B in
bf16).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import torch

from rlvr.engines.base import AdapterWeights, Sample, SamplingParams, WeightSource, check_policy_step
from rlvr.engines.constraint import TokenGrammar
from rlvr.engines.fast_decoder import FAST_MODEL_TYPES, FastDecoder
from rlvr.engines.hf_decoder import HFDecoder, left_pad
from rlvr.engines.logprobs import sequence_logprobs
from rlvr.engines.model_dir import Policy, eval_mode, load_policy
from rlvr.engines.prefix_cache import PrefixCache
from rlvr.engines.sampling import check_params, process, sample, sample_uniforms
from rlvr.engines.stream import DecodeStream

# Default bound of the cross-turn prefix cache, in resident tokens (a cohort of 64 episodes
# of 2k-token transcripts; 256 MiB for the CPU-default model). 0 turns the cache off.
PREFIX_CACHE_TOKENS = 131072
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
        fast_ok = FastDecoder.supports(self.model)
        if backend == "fast" and not fast_ok:
            raise ValueError(f"model_type {self.model.config.model_type!r} has no fast decode "
                             f"path (supported: {', '.join(FAST_MODEL_TYPES)}); use backend='hf'")
        self.backend = "fast" if (backend == "fast" or (backend == "auto" and fast_ok)) else "hf"
        if isinstance(prefix_cache_tokens, bool) or not isinstance(prefix_cache_tokens, int) \
                or prefix_cache_tokens < 0:
            raise ValueError(f"prefix_cache_tokens must be an int >= 0 (0 = off), "
                             f"got {prefix_cache_tokens!r}")
        # only the fast decoder reads cached KV; the HF fallback re-prefills every turn
        self.prefix_cache = PrefixCache(prefix_cache_tokens if self.backend == "fast" else 0)
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
            if isinstance(state, AdapterWeights):  # a LoRA run's update: its adapters alone
                own = self.model.state_dict()
                foreign = [k for k in state if k not in own or own[k].shape != state[k].shape]
                if foreign:
                    raise ValueError(f"sync_weights: adapter tensors this model lacks: {foreign[:4]}")
                self.model.load_state_dict(state, strict=False)
            else:
                self.model.load_state_dict(state)
        self.prefix_cache.clear()  # KV of the old weights
        self.policy_version = policy_version
        self.policy_step = step

    def close(self) -> None:
        """Drop the prefix cache's KV; the model itself lives in this process (and may be the
        trainer's), so nothing else is released."""
        self.prefix_cache.clear()

    def check_cache_weights(self) -> None:
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
        with torch.inference_mode(), eval_mode(self.model):
            return self._generate(prompts, params, seed, sample_seeds)

    def _generate(self, prompts, params, seed, sample_seeds) -> list[Sample]:
        check_params(params, self.vocab_size)
        prompts = [self.check_prompt(i, p) for i, p in enumerate(prompts)]
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
            decoder = FastDecoder(self.model, self.prefill_chunk_tokens)
            if cache.max_tokens:
                self.check_cache_weights()
                cache.begin_call()
            hits = [cache.lookup(u) for u in unique]  # (entry | None, reused tokens)
            first_logits = decoder.prefill(unique, hits)  # [U, V] fp32
        else:
            decoder, hits = HFDecoder(self.model), [(None, 0)] * len(unique)
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
        return DecodeStream(self, params, seed=seed, max_slots=max_slots)

    def _harvest(self, decoder: FastDecoder, layout: _Layout, which: torch.Tensor,
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
        with torch.inference_mode(), eval_mode(self.model):
            for start in range(0, len(prompts), batch_size):
                out.extend(self._score_chunk(prompts[start:start + batch_size],
                                             completions[start:start + batch_size], params))
        return out

    def _score_chunk(self, prompts, completions, params) -> list[list[float]]:
        """The trainer's code path (`rlvr.engines.logprobs.sequence_logprobs`), left-padded,
        with the LM head applied to the completion positions only."""
        seqs = [self.check_prompt(i, p) + self._check_ids(f"completion {i}", c)
                for i, (p, c) in enumerate(zip(prompts, completions))]
        ids, mask, pos = left_pad(seqs, self.device)
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

    def check_prompt(self, i: int, prompt: Sequence[int]) -> list[int]:
        """Prompt `i` as a list of ints, refused (naming it) when empty or outside the
        vocabulary: every way into the model (`generate`, `score`, a stream) checks here."""
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


# ---- helpers ------------------------------------------------------------------------------
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

