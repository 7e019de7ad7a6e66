"""`openai` TextEngine: any OpenAI-compatible chat endpoint as a *teacher* (text in, text out).

A teacher writes demonstrations for rejection-sampling SFT (SPEC §6); the harness
tokenizes its text as a segment of the transcript (`Transcript.append_teacher`).

Why re-tokenizing teacher text is fine for SFT and never for RL:
* SFT imitates the *text*. The loss is the policy's cross-entropy on the tokenization of
  the text we train on, and that tokenization is whatever our tokenizer produces for it —
  the teacher's own token ids (from another vocabulary, often another model) never enter
  the loss, so there is nothing to be exact about.
* RL needs the policy's *own sampled ids* and their behaviour logprobs: the importance ratio
  π_θ(o_t)/π_old(o_t) and the KL are per sampled token. Re-tokenizing a sampled text can give
  different ids than were sampled (BPE is not injective: "ab" may be sampled as "a"+"b" but
  re-encode as "ab"), so the ratio would be computed for tokens nobody sampled, with no
  stored behaviour logprob, and the gradient would push on the wrong tokens. Hence teacher
  text is SFT data only, and policy rollouts go through a TokenEngine (`torch`, `vllm`).

Reliability: transport errors, timeouts, HTTP 408/409/429 and 5xx are retried with
exponential backoff (honouring `Retry-After`); other 4xx are the caller's fault and raise at
once. Every failure is a named `TeacherError` subclass carrying status and server message,
so a collector can tell an infrastructure failure (`TeacherUnavailable`) from a bad
configuration (`TeacherAuthError`, `TeacherRequestError`) or a bad answer
(`TeacherResponseError`). Requests carry `seed`; providers treat it as best effort, so a
teacher's text is recorded, never assumed reproducible.

Tools. Given the policy's tool-call format (`tool_call_format`), the teacher is sent the
agent's tools as JSON schemas (`tools=`), the history in the API's own tool-call form (each
valid call of an earlier turn as `tool_calls`, its observation as the `tool` message answering
it), and its answer's `tool_calls` are written in the policy's format (`rlvr.toolcalls`), so a
demonstration tokenizes as the policy's own turn would. Several calls in one answer are all
written: the episode's one-call rule then records `multiple_tool_calls`. Without a format the
teacher is text in, text out (the system prompt describes the syntax).
"""
from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass, field
from typing import Sequence

import httpx

from rlvr.agent.tools import openai_tools, parse_action
from rlvr.config import parse
from rlvr.errors import ConfigError, RlvrError
from rlvr.toolcalls import get_format
from rlvr.toolcalls.base import ToolCallFormat

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class TeacherError(RlvrError):
    """Base of every teacher-endpoint failure."""


class TeacherAuthError(TeacherError):
    """HTTP 401/403: the API key is missing, wrong or lacks access to the model."""


class TeacherRequestError(TeacherError):
    """HTTP 4xx other than auth/rate limits: the request itself is wrong (model name, args)."""


class TeacherUnavailable(TeacherError):
    """The endpoint kept failing (transport error, timeout, 429, 5xx) through every retry."""


class TeacherResponseError(TeacherError):
    """A 200 response without usable text (not JSON, no choices, empty or filtered content)."""


@dataclass
class OpenAITeacherParams:
    """The teacher section of params.yaml (e.g. `synthesize.teacher` or `sft.teacher`)."""

    base_url: str = "https://api.openai.com/v1"  # up to and including /v1
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"  # name of the env var holding the key; "" = no auth
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens_field: str = "max_tokens"  # some providers want "max_completion_tokens"
    timeout_s: float = 120.0
    max_retries: int = 4
    backoff_s: float = 1.0  # first retry delay; doubles each retry
    max_backoff_s: float = 30.0
    extra_body: dict[str, str] = field(default_factory=dict)  # provider-specific string fields


class OpenAIEngine:
    """TextEngine over `POST {base_url}/chat/completions`."""

    name = "openai"

    def __init__(
        self,
        params: OpenAITeacherParams,
        *,
        transport: httpx.BaseTransport | None = None,
        sleep=time.sleep,
        tool_call_format: str | None = None,
    ) -> None:
        if not params.model:
            raise ConfigError("teacher.model: must name the model to call")
        if params.max_retries < 0 or params.backoff_s < 0 or params.timeout_s <= 0:
            raise ConfigError("teacher: max_retries and backoff_s must be >= 0, timeout_s > 0")
        self.params = params
        self.format = get_format(tool_call_format) if tool_call_format is not None else None
        self.policy_version = f"openai:{params.model}"
        headers = {"Content-Type": "application/json"}
        if params.api_key_env:
            key = os.environ.get(params.api_key_env, "")
            if not key:
                raise ConfigError(
                    f"teacher.api_key_env: environment variable {params.api_key_env} is not set "
                    "(set it, or api_key_env: '' for an endpoint without auth)"
                )
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(
            base_url=params.base_url.rstrip("/"), headers=headers,
            timeout=params.timeout_s, transport=transport,
        )
        self._sleep = sleep
        self._jitter = random.Random()
        self.requests = 0  # HTTP attempts made, retries included

    @classmethod
    def from_options(cls, options: dict, where: str = "rollout.engine_options",
                     tool_call_format: str | None = None) -> "OpenAIEngine":
        """From a plain mapping of OpenAITeacherParams fields (a stage's `engine_options`),
        validated like params.yaml: a bad key is a ConfigError naming `<where>.<key>`."""
        return cls(parse(OpenAITeacherParams, dict(options), where),
                   tool_call_format=tool_call_format)

    def for_task(self, task) -> "OpenAIEngine":
        """Stateless across episodes: every episode talks to the same endpoint (the
        `Teacher` protocol; the task is already in the messages it is sent)."""
        return self

    def chat(self, messages: Sequence[dict], *, seed: int, max_tokens: int) -> str:
        body = {
            "model": self.params.model,
            "messages": (_tool_messages(messages, self.format) if self.format is not None
                         else [_message(i, m) for i, m in enumerate(messages)]),
            "seed": int(seed),
            self.params.max_tokens_field: int(max_tokens),
            "temperature": float(self.params.temperature),
            "top_p": float(self.params.top_p),
            **self.params.extra_body,
        }
        if self.format is None:
            return _content(self._post("/chat/completions", body))
        body["tools"] = openai_tools()
        return _action(self._post("/chat/completions", body), self.format)

    def _post(self, path: str, body: dict) -> dict:
        last, last_retry_after = "", None
        for attempt in range(self.params.max_retries + 1):
            if attempt:
                self._sleep(self._delay(attempt, last_retry_after))
                last_retry_after = None
            self.requests += 1
            try:
                resp = self._client.post(path, json=body)
            except httpx.TransportError as exc:  # connect/read errors and timeouts
                last = f"{type(exc).__name__}: {exc}"
                continue
            if resp.status_code == 200:
                try:
                    return resp.json()
                except ValueError:
                    raise TeacherResponseError(
                        f"{self.params.model}: response is not JSON: {resp.text[:200]!r}"
                    ) from None
            message = _error_message(resp)
            if resp.status_code in (401, 403):
                raise TeacherAuthError(
                    f"{self.params.model} at {self.params.base_url}: HTTP {resp.status_code}: "
                    f"{message} "
                    f"(check {self.params.api_key_env or 'the API key'})"
                )
            if resp.status_code in RETRY_STATUS or resp.status_code >= 500:
                last = f"HTTP {resp.status_code}: {message}"
                last_retry_after = _retry_after(resp)
                continue
            raise TeacherRequestError(
                f"{self.params.model} at {self.params.base_url}: HTTP {resp.status_code}: {message}"
            )
        raise TeacherUnavailable(
            f"{self.params.model} at {self.params.base_url}: gave up after "
            f"{self.params.max_retries + 1} attempts; last: {last}"
        )

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.params.max_backoff_s)
        base = min(self.params.backoff_s * 2 ** (attempt - 1), self.params.max_backoff_s)
        return base * self._jitter.uniform(0.5, 1.0)  # jitter: parallel workers spread out

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "OpenAIEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _message(i: int, m: dict) -> dict:
    if not isinstance(m, dict) or not isinstance(m.get("role"), str) \
            or not isinstance(m.get("content"), str):
        raise TeacherRequestError(f"message {i}: needs string 'role' and 'content', got {m!r:.120}")
    return {"role": m["role"], "content": m["content"]}


def _tool_messages(messages: Sequence[dict], fmt: ToolCallFormat) -> list[dict]:
    """The episode's history in the API's tool-call form: a valid call of an earlier turn as
    `tool_calls` (its text before the call as content), the observation after it as the
    `tool` message answering it; an invalid turn's text as content, its error observation
    as a user message (there is no call for it to answer)."""
    out: list[dict] = []
    pending = ""
    for i, m in enumerate(_message(i, m) for i, m in enumerate(messages)):
        if m["role"] == "assistant":
            parsed = parse_action(m["content"], fmt.name)
            if parsed.valid:
                pending = f"call_{i}"
                reasoning = m["content"][:_call_start(m["content"], fmt)].strip()
                out.append({"role": "assistant", "content": reasoning or None, "tool_calls": [
                    {"id": pending, "type": "function", "function": {
                        "name": parsed.call.name,
                        "arguments": json.dumps(parsed.call.args, ensure_ascii=False)}}]})
                continue
            pending = ""
        elif m["role"] == "tool":
            out.append({"role": "tool", "tool_call_id": pending, "content": m["content"]}
                       if pending else {"role": "user", "content": m["content"]})
            pending = ""
            continue
        out.append(m)
    return out


def _call_start(text: str, fmt: ToolCallFormat) -> int:
    """Where the call of a valid turn starts (its first marker; the whole text for a format
    without markers)."""
    hits = [text.find(m) for m in fmt.markers[:1] if m in text]
    return hits[0] if hits else 0


def _action(data: dict, fmt: ToolCallFormat) -> str:
    """An answer's text and `tool_calls`, as the policy would write them in `fmt`."""
    message = _choice(data).get("message") or {}
    reasoning = _text(message.get("content")) or ""
    calls = message.get("tool_calls") or []
    if not calls:
        if not reasoning:
            raise TeacherResponseError(f"message has neither text nor tool calls: "
                                       f"{str(message)[:200]}")
        return reasoning  # no call: the episode records missing_tool_call
    written = []
    for k, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise TeacherResponseError(f"tool call {k} has no function name: {str(call)[:200]}")
        raw = fn.get("arguments")
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError:
            args = raw  # written as a string: the episode records bad_call
        written.append(fmt.write(fn["name"], args if args is not None else {},
                                 reasoning if k == 0 else ""))
    return "\n".join(written)


def _choice(data: dict) -> dict:
    choices = data.get("choices") if isinstance(data, dict) else None
    if not choices:
        raise TeacherResponseError(f"response has no choices: {str(data)[:200]}")
    choice = choices[0]
    if choice.get("finish_reason") == "content_filter":
        raise TeacherResponseError(
            "the provider filtered the answer (finish_reason content_filter)")
    return choice


def _text(content) -> str | None:
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else None


def _content(data: dict) -> str:
    choice = _choice(data)
    content = _text((choice.get("message") or {}).get("content"))
    if not content:
        raise TeacherResponseError(f"choice has no text content: {str(choice)[:200]}")
    return content


def _error_message(resp: httpx.Response) -> str:
    try:
        err = resp.json().get("error")
    except (ValueError, AttributeError):
        return resp.text[:300]
    if isinstance(err, dict):
        return str(err.get("message", err))[:300]
    return str(err)[:300] if err else resp.text[:300]


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
