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

from dataclasses import asdict, dataclass, field
from typing import Protocol, Sequence, runtime_checkable


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    max_new_tokens: int = 128
    stop_token_ids: tuple[int, ...] = ()

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
