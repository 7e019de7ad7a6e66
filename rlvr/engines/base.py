"""Inference engines behind small protocols, used explicitly (`isinstance` on these
runtime-checkable protocols; nothing probes for optional methods or signatures).

* `TokenEngine` — the *policy* side: token-id prompts in, sampled token ids and their
  behaviour log-probabilities out. RL trains on exactly these ids and logprobs (SPEC §3
  token exactness), so an engine must report the logprob of the distribution it actually
  sampled from (after temperature / top-k / top-p), at sampling time. It states which
  policy it serves (`policy_version`, a weights hash; `policy_step`, an ordinal, 0 for the
  initial policy), how it moves to new weights (`sync_weights`) and `close`.
* `Teacher` / `TextEngine` — a *teacher* for demonstrations: bound to one episode's task
  (`Teacher.for_task`), it answers chat messages with text. Its text is tokenized by the
  harness as a segment, which is acceptable for SFT (we imitate the text) and never for RL
  (the ratio needs the policy's own sampled ids). No teacher is a TokenEngine.

Backends: `torch` (CPU default, KV cache, prefix-shared group prefill), `vllm` (client of a
`vllm serve` process in its own venv), `openai` (any OpenAI-compatible chat endpoint, a
teacher, in `rlvr.teachers`), `scripted` (a systematic debugging teacher, `rlvr.teachers`).
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping, Protocol, Sequence, Union, runtime_checkable

from rlvr.engines.grammars import check_grammar
from rlvr.errors import ConfigError


@dataclass(frozen=True)
class Decoding:
    """The decoding knobs, defined and validated here only: `rollout.decoding` in params.yaml,
    `EpisodeConfig.decoding`, and the first three fields of every `SamplingParams`. How they
    shape the distribution a token is drawn from is `rlvr/engines/sampling.py`."""

    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0  # 1 = off
    top_k: int = 0  # 0 = off
    # A grammar every sampled turn must stay inside ("" = none; `tool_call`: reasoning + one
    # schema-valid tool call + end of turn; `tool_call_fixes`: that, with edits narrowed to
    # named fixes that apply to the listed suspicious lines; rlvr/agent/grammar.py registers
    # both in rlvr/engines/grammars.py). Part of the behaviour distribution: the trainer
    # replays its mask. Token engines honour it; a text teacher's demonstrations are
    # canonical calls already.
    grammar: str = ""

    def __post_init__(self) -> None:
        """Refuse knobs that have no meaning, naming the field (a ConfigError: exit 2)."""
        check_grammar(self.grammar)
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ConfigError(f"decoding.temperature: must be a finite number >= 0, got {self.temperature!r}")
        if not (0.0 < self.top_p <= 1.0):
            raise ConfigError(f"decoding.top_p: must be in (0, 1], got {self.top_p!r}")
        if self.top_k < 0:
            raise ConfigError(f"decoding.top_k: must be >= 0 (0 = off), got {self.top_k!r}")

    def knobs(self) -> dict:
        """temperature, top_p, top_k and grammar alone (also of a SamplingParams)."""
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


# New weights for a TokenEngine: a state dict (parameter name -> tensor, e.g. the in-process
# trainer's model) or a policy directory (an HF model directory; a PEFT adapter directory for
# a vLLM server that serves LoRA adapters). Each engine says which it takes.
WeightSource = Union[Mapping[str, Any], str, os.PathLike]


class AdapterWeights(dict):
    """A state dict holding a LoRA run's adapter tensors only (names as in the served
    model's `state_dict()`): an engine serving that very adapted model loads them over its
    adapters and leaves every other weight as it is. A plain mapping must hold every weight."""


def check_policy_step(step: int) -> int:
    """`step` if it is a policy ordinal (an int >= 0), else a ValueError naming it."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"policy_step must be an int >= 0 (0 = the initial policy), got {step!r}")
    return step


@runtime_checkable
class TokenEngine(Protocol):
    name: str
    policy_version: str  # hash of the weights it samples from; every Sample is drawn from it
    policy_step: int  # ordinal of those weights: 0 = the initial policy, +1 per training step

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        *,
        seed: int,
        sample_seeds: Sequence[int] | None = None,
    ) -> list[Sample]:
        """One sample per prompt, all prompts batched. Identical prompts (the G members of
        a group) share one prefill. Sample i's random stream is keyed by (seed, i), or by
        (seed, sample_seeds[i]) when given, so it does not depend on the rest of the batch;
        deterministic for a given `seed`."""
        ...

    def score(
        self, prompt: Sequence[int], completion: Sequence[int], params: SamplingParams
    ) -> list[float]:
        """Teacher-forced log-probabilities of `completion` after `prompt` under the same
        processed distribution `generate` samples from (for checks and the trainer)."""
        ...

    def sync_weights(self, source: WeightSource, policy_version: str, policy_step: int) -> None:
        """Sample from the weights `source` from now on, stamped `policy_version` and
        `policy_step`; both change only once the new weights serve. `torch` loads a state
        dict in place (or a policy directory's weights); `vllm` moves its server to a new
        policy directory (restart, in-place reload or a LoRA adapter, per its params)."""
        ...

    def close(self) -> None:
        """Release what the engine holds (a server it launched, connections); a no-op for
        an in-process engine."""
        ...


@runtime_checkable
class TokenStream(Protocol):
    """A running decode that sequences join and leave (continuous batching). Each sequence
    samples as `TokenEngine.generate` would sample it alone with the same seeds."""

    active: int  # sequences queued or decoding

    def add(self, key: Any, prompt: Sequence[int], *, sample_seed: int,
            max_new_tokens: int) -> None:
        """Queue a sequence; it joins at the next `step`."""
        ...

    def step(self) -> list[tuple[Any, Sample]]:
        """One token for every live sequence; the (key, sample) of those that stopped."""
        ...

    def close(self) -> None:
        ...


@runtime_checkable
class StreamingEngine(TokenEngine, Protocol):
    """A token engine that can also decode continuously (`rlvr.engines.stream`)."""

    def stream(self, params: SamplingParams, *, seed: int, max_slots: int = 0) -> TokenStream:
        ...


@runtime_checkable
class TextEngine(Protocol):
    """A teacher bound to one episode: chat messages in, the next action's text out."""

    name: str
    policy_version: str

    def chat(self, messages: Sequence[dict], *, seed: int, max_tokens: int) -> str: ...


@runtime_checkable
class Teacher(Protocol):
    """What a rollout is given when the actor is a teacher: it binds itself to each
    episode's task (`for_task` receives the task as `agent.episode.teacher_view` shows it:
    no hidden tests, no reference) — a stateless teacher returns itself — and is closed at
    the end of the run."""

    name: str
    policy_version: str

    def for_task(self, task: Any) -> TextEngine: ...

    def close(self) -> None: ...
