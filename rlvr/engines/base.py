"""Inference engines behind two small protocols.

* `TokenEngine` — the *policy* side: token-id prompts in, sampled token ids and their
  behaviour log-probabilities out. RL trains on exactly these ids and logprobs (SPEC §3
  token exactness), so an engine must report the logprob of the distribution it actually
  sampled from (after temperature / top-k / top-p), at sampling time.
* `TextEngine` — a *teacher* for demonstrations: chat messages in, text out. Its text is
  tokenized by the harness as a segment, which is acceptable for SFT (we imitate the
  text) and never for RL (the ratio needs the policy's own sampled ids).

Backends: `torch` (CPU default, KV cache, prefix-shared group prefill), `vllm` (client of a
`vllm serve` process in its own venv), `openai` (any OpenAI-compatible chat endpoint, a
teacher, in `rlvr.teachers`), `scripted` (a systematic debugging teacher, `rlvr.teachers`).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Protocol, Sequence, runtime_checkable

from rlvr.errors import ConfigError


@dataclass(frozen=True)
class Decoding:
    """The decoding knobs, defined and validated here only: `rollout.decoding` in params.yaml,
    `EpisodeConfig.decoding`, and the first three fields of every `SamplingParams`. How they
    shape the distribution a token is drawn from is `rlvr/engines/sampling.py`."""

    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0  # 1 = off
    top_k: int = 0  # 0 = off

    def __post_init__(self) -> None:
        """Refuse knobs that have no meaning, naming the field (a ConfigError: exit 2)."""
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ConfigError(f"decoding.temperature: must be a finite number >= 0, got {self.temperature!r}")
        if not (0.0 < self.top_p <= 1.0):
            raise ConfigError(f"decoding.top_p: must be in (0, 1], got {self.top_p!r}")
        if self.top_k < 0:
            raise ConfigError(f"decoding.top_k: must be >= 0 (0 = off), got {self.top_k!r}")

    def knobs(self) -> dict:
        """temperature, top_p and top_k alone (also of a SamplingParams)."""
        return {f.name: getattr(self, f.name) for f in fields(Decoding)}


@dataclass(frozen=True)
class SamplingParams(Decoding):
    """One `generate` / `score` call: the decoding knobs plus what this call may generate
    (`max_new_tokens`) and which sampled tokens end a sample (`stop_token_ids`)."""

    max_new_tokens: int = 128
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_new_tokens < 0:
            raise ConfigError(f"sampling.max_new_tokens: must be >= 0, got {self.max_new_tokens!r}")

    @classmethod
    def of(cls, decoding: Decoding, *, max_new_tokens: int,
           stop_token_ids: Sequence[int] = ()) -> "SamplingParams":
        """The params of one call under `decoding` (the harness builds every turn's here)."""
        return cls(**decoding.knobs(), max_new_tokens=int(max_new_tokens),
                   stop_token_ids=tuple(int(t) for t in stop_token_ids))

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Sample:
    """One sampled continuation. `logprobs[i]` is log π_behaviour(token_ids[i] | prefix)
    under the exact (temperature/top-k/top-p-processed) distribution it was drawn from."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" (a stop token was sampled; it is included) | "length"
    prefill_tokens: int = 0  # prompt tokens this sample's prefill actually computed
    extras: dict = field(default_factory=dict)


@runtime_checkable
class TokenEngine(Protocol):
    name: str
    policy_version: str

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        *,
        seed: int,
    ) -> list[Sample]:
        """One sample per prompt, all prompts batched. Identical prompts (the G members of
        a group) share one prefill. Deterministic for a given `seed`."""
        ...

    def score(
        self, prompt: Sequence[int], completion: Sequence[int], params: SamplingParams
    ) -> list[float]:
        """Teacher-forced log-probabilities of `completion` after `prompt` under the same
        processed distribution `generate` samples from (for checks and the trainer)."""
        ...


@runtime_checkable
class TextEngine(Protocol):
    name: str
    policy_version: str

    def chat(self, messages: Sequence[dict], *, seed: int, max_tokens: int) -> str: ...
