"""`vllm` TokenEngine: a client of a vLLM OpenAI-compatible server, token ids in and out.

Why token ids end to end (SPEC §3 token exactness): RL trains on the ids the engine really
sampled and on their behaviour logprobs. So prompts go to `/v1/completions` as a list of
ints (no chat template, no re-tokenization), and outputs come back as ids too:
`return_token_ids` gives `choices[i].token_ids`, and `return_tokens_as_token_ids` makes
the logprob entries read `token_id:<id>`, which we cross-check against them.

Which logprobs: the server runs with `--logprobs-mode processed_logprobs` (vllm_server.py),
so `logprobs.token_logprobs[t]` is log π_behaviour(token_t | prefix) under the distribution
the token was drawn from: logits / temperature, then top-k / top-p masks, renormalized.
(The default `raw_logprobs` would return the untempered model distribution, and the ratio
π_θ/π_old would then be computed against a distribution nobody sampled from.) At
temperature 0 (below vLLM's 1e-5) vLLM samples greedily but reports the untempered
log_softmax; the project convention (rlvr/engines/sampling.py) is that greedy behaviour is
the point mass on the argmax, so we report 0.0 for those tokens, as TorchEngine does.
`score` applies `sampling.process_logits`, the same function TorchEngine and the trainer
use, to the raw distribution vLLM returns; its top-k/top-p conventions are the same as
vLLM's sampler (keep ties at the k-th logit; drop a token iff the mass strictly above it
already reaches top_p), so only float rounding separates them.

Stopping: `ignore_eos` is set and `stop_token_ids` carries exactly
`SamplingParams.stop_token_ids`, so only the tokens the caller names end a sample (the
model's EOS and its generation_config play no part; the server also runs with
`--generation-config vllm`), and the stop token is part of `token_ids` with its logprob.

Seeds: every sample is its own request (`n = 1`) whose seed is a hash of (seed, i), or of
(seed, sample_seeds[i]) when the caller passes per-prompt seeds, as TorchEngine does: a
sample depends only on its prompt and its own key, never on the rest of the batch, and a
call is deterministic for a given `seed` (measured: identical ids; logprobs equal to ~1e-6,
batch composition changes float summation order). Samples are NOT the torch engine's
for the same seed (different random streams); only their distribution is.

Prefill sharing: requests are sent concurrently and batched by the server; vLLM's
automatic prefix cache shares the prompt's full KV blocks between the G members of a
group (block size 128 on CPU by default; `server.block_size` lowers it) — measured: 8
members of a 396-token prompt computed 396 + 7 × 12 prompt tokens.
`Sample.prefill_tokens` is the server-reported `prompt_tokens - cached_tokens` of that
sample's request (`--enable-prompt-tokens-details`). (One request with `n = G` would also
share the prefix, but vLLM then reports one child's cached count for the whole group.)

Several servers (`servers: N` launched, or `base_urls` attached; issue 38): a GRPO
group's members, and each of their later turns, go to the server that sampled their
longest earlier prefix, so one server's prefix cache holds the group's prompt; a new group
goes to the server with the fewest requests in flight (rlvr/engines/vllm_route.py). Since a
sample depends on its prompt and seed only, which server answers never changes it, and a
request of a server that fails is re-queued on another (counted in
`last_stats["requeued"]`). A weight sync fans out to every server at once; a server it
misses stops taking requests until a later sync reaches it, so no call mixes policies.
Off loopback the servers need a bearer token (`server.token_env`, vllm_server.py).

Policy versions: `sync_weights(path, version, step)` (the TokenEngine protocol) moves the
server to a new policy directory (restart on the new dir, in-place weight reload, or a LoRA
adapter; see vllm_server.py) and only then changes `policy_version` and `policy_step`,
which every Sample carries in `extras`. A state dict cannot cross into the server: the
trainer saves a directory first.
"""
from __future__ import annotations

import hashlib
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import httpx

from rlvr.config import parse
from rlvr.errors import ConfigError
from rlvr.engines.base import Sample, SamplingParams, WeightSource, check_policy_step
from rlvr.engines.grammars import grammar_source, is_context_free
from rlvr.engines.model_dir import load_tokenizer
from rlvr.engines.vllm_route import PrefixRouter
from rlvr.engines.vllm_server import (
    VllmError,
    VllmServer,
    VllmServerParams,
    VllmUpdateError,
    auth_headers,
)

GREEDY_EPS = 1e-5  # vLLM's _SAMPLING_EPS: below it a request is sampled greedily


class VllmRequestError(VllmError):
    """The server refused a request (HTTP 4xx), e.g. a prompt longer than max_model_len."""


class VllmServerError(VllmError):
    """The server failed (HTTP 5xx, or unreachable after retries)."""


class VllmResponseError(VllmError):
    """A response is not the shape we asked for (missing ids/logprobs, inconsistent ids)."""


@dataclass
class VllmEngineParams:
    """`rollout.vllm` in params.yaml (and `grpo.engine_options`)."""

    base_url: str = ""  # "" = launch and own a server (see `server`); else use that one
    # several servers to attach to (N `vllm serve` processes, possibly on other hosts); a
    # group goes to one of them (rlvr/engines/vllm_route.py). Exclusive with base_url
    base_urls: list[str] = field(default_factory=list)
    servers: int = 1  # servers to launch and own when no URL is given (each on a free port)
    served_model_name: str = "policy"
    request_timeout_s: float = 600.0
    max_concurrency: int = 64  # requests in flight per server; each batches up to max_num_seqs
    retries: int = 2  # on connection errors/timeouts only; seeded requests are idempotent
    server: VllmServerParams = field(default_factory=VllmServerParams)

    def urls(self, where: str = "vllm") -> list[str]:
        """The servers to attach to ([] = launch `servers` of them). Named ConfigError on a
        contradiction."""
        if self.base_url and self.base_urls:
            raise ConfigError(f"{where}.base_url and {where}.base_urls: give one of them")
        if self.servers < 1:
            raise ConfigError(f"{where}.servers: {self.servers} (at least 1)")
        urls = [self.base_url] if self.base_url else list(self.base_urls)
        if urls and self.servers != 1:
            raise ConfigError(f"{where}.servers: {self.servers} servers to launch, but "
                              f"{where}.base_url(s) attaches to running ones")
        if len(set(urls)) != len(urls):
            raise ConfigError(f"{where}.base_urls: a server is listed twice ({urls})")
        return urls


# ------------------------------------------------------------------ pure functions
def request_seed(seed: int, key: int) -> int:
    """Seed of the request for sample key `key` (its index, or its sample seed) of a call
    seeded `seed`: a hash, so two samples never share a stream; < 2**62 fits vLLM's int64."""
    digest = hashlib.blake2b(f"rlvr-vllm:{seed}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 2


def completion_request(model: str, prompt: Sequence[int], params: SamplingParams, seed: int,
                       grammar: str = "") -> dict:
    """Body of a `/v1/completions` request sampling one continuation of a token-id prompt.
    `grammar`: the Lark source of `params.grammar` for this prompt (the same source
    TorchEngine compiles), sent as vLLM structured outputs (`structured_outputs.grammar`;
    vLLM routes a Lark grammar with embedded JSON schemas to its llguidance backend), whose
    bitmask vLLM applies to the logits before its sampler, so the processed logprobs it
    returns are under the masked distribution, as TorchEngine's are."""
    if not prompt:
        raise VllmRequestError("empty prompt: a completion needs at least one prompt token")
    if bool(params.grammar) != bool(grammar):
        raise VllmRequestError(f"decoding.grammar {params.grammar!r} needs its Lark source "
                               "for this prompt (and only then)")
    extra = {"structured_outputs": {"grammar": grammar}} if grammar else {}
    return {
        "model": model,
        "prompt": [int(t) for t in prompt],
        "n": 1,
        "max_tokens": int(params.max_new_tokens),
        "temperature": float(params.temperature),
        "top_p": float(params.top_p),
        "top_k": int(params.top_k),  # 0 = off, as in vLLM
        "seed": int(seed),
        "logprobs": 0,  # the sampled token's logprob only
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
        "stop_token_ids": [int(t) for t in params.stop_token_ids],
        "ignore_eos": True,
        "skip_special_tokens": False,
        "stream": False,
        **extra,
    }


def _token_id(token: str) -> int:
    if not isinstance(token, str) or not token.startswith("token_id:"):
        raise VllmResponseError(
            f"logprob token {token!r} is not 'token_id:<id>' (return_tokens_as_token_ids ignored?)"
        )
    return int(token.split(":", 1)[1])


def parse_choice(choice: dict, params: SamplingParams) -> Sample:
    """A `/v1/completions` choice -> Sample, checking ids, logprobs and the stop rule."""
    ids = choice.get("token_ids")
    lp = choice.get("logprobs") or {}
    logprobs = lp.get("token_logprobs")
    tokens = lp.get("tokens")
    if ids is None or logprobs is None or tokens is None:
        raise VllmResponseError(
            "choice lacks token_ids / logprobs.token_logprobs / logprobs.tokens "
            f"(keys: {sorted(choice)}); is the server a vLLM with return_token_ids support?"
        )
    ids = [int(t) for t in ids]
    if len(ids) != len(logprobs) or len(ids) != len(tokens):
        raise VllmResponseError(
            f"{len(ids)} token ids but {len(logprobs)} logprobs / {len(tokens)} logprob tokens"
        )
    if [_token_id(t) for t in tokens] != ids:
        raise VllmResponseError("token ids disagree between token_ids and logprobs.tokens")
    if any(v is None or not math.isfinite(v) for v in logprobs):
        raise VllmResponseError("a sampled token has no finite logprob")
    reason = choice.get("finish_reason")
    if reason == "stop":
        if not ids or ids[-1] not in set(params.stop_token_ids):
            raise VllmResponseError(
                f"finish_reason 'stop' but the last token {ids[-1:]} is not one of the stop "
                f"tokens {sorted(set(params.stop_token_ids))}"
            )
    elif reason != "length":  # "length" also covers hitting the server's max_model_len
        raise VllmResponseError(f"unexpected finish_reason {reason!r}")
    if params.temperature < GREEDY_EPS:
        logprobs = [0.0] * len(ids)  # greedy: point mass on the argmax (sampling.py convention)
    return Sample(token_ids=ids, logprobs=[float(v) for v in logprobs], finish_reason=reason)


def prefill_tokens(resp: dict, prompt_len: int) -> int:
    usage = resp.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    return int(usage.get("prompt_tokens", prompt_len)) - int(details.get("cached_tokens") or 0)


def prompt_logprob_rows(choice: dict, start: int, targets: Sequence[int]):
    """[len(targets), V] float tensor of raw log-probabilities at positions start.. of a
    `prompt_logprobs=-1` response (`{str(id): {"logprob": v, ...}}` per position)."""
    import torch

    rows = choice.get("prompt_logprobs")
    if rows is None:
        raise VllmResponseError("no prompt_logprobs in the response (server --max-logprobs -1?)")
    if len(rows) < start + len(targets):
        raise VllmResponseError(f"{len(rows)} prompt_logprobs rows, need {start + len(targets)}")
    picked = rows[start:start + len(targets)]
    if any(not row for row in picked):
        raise VllmResponseError("a prompt_logprobs row is empty")
    vocab = len(picked[0])
    out = torch.full((len(picked), vocab), float("-inf"), dtype=torch.float64)
    for j, (row, target) in enumerate(zip(picked, targets)):
        ids = [int(k) for k in row]
        if sorted(ids) != list(range(vocab)) or not 0 <= int(target) < vocab:
            raise VllmResponseError(
                f"prompt_logprobs row {start + j} is not the full distribution over {vocab} ids "
                f"with the target {target}; scoring needs prompt_logprobs=-1 (--max-logprobs -1)"
            )
        val = [v["logprob"] if isinstance(v, dict) else v for v in row.values()]
        out[j, torch.tensor(ids)] = torch.tensor(val, dtype=torch.float64)
    return out


# ------------------------------------------------------------------------ engine
@dataclass
class Endpoint:
    """One server the engine samples from: its client, its process when the engine owns
    it, and whether it takes requests (`live`: False once it failed, or missed a policy
    update, until a later update reaches it)."""

    index: int
    base_url: str
    client: httpx.Client
    server: VllmServer | None = None
    live: bool = True
    in_flight: int = 0
    failure: str = ""
    adapter: str = ""  # the LoRA adapter it serves the policy as ("" = the base model)


class VllmEngine:
    """TokenEngine backed by one or several vLLM servers (owned, see `launch`, or external
    via base_url / base_urls).

    Several servers (issue 38): a prompt goes to the server of its longest routed prefix,
    else to the one with the fewest requests in flight (vllm_route.py); a server that fails
    (connection errors after `retries`, or HTTP 5xx) leaves the rotation and its requests
    are re-queued on the others (`last_stats["requeued"]`), the call failing only when no
    server is left; `sync_weights` fans the update out to every server and only those it
    reached sample afterwards, so no group ever mixes policy versions. Every sample names
    its server (`extras["server"]`)."""

    name = "vllm"

    def __init__(
        self,
        base_url: str | Sequence[str],
        model: str = "policy",
        *,
        policy_version: str = "0",
        policy_step: int = 0,
        params: VllmEngineParams | None = None,
        server: VllmServer | Sequence[VllmServer] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.params = params or VllmEngineParams()
        self.model = model
        self.policy_version = policy_version
        self.policy_step = check_policy_step(policy_step)
        self.last_sync_seconds = 0.0
        self.last_sync_failures: dict[str, str] = {}
        self._tokenizer = None  # loaded on first use by a transcript-reading grammar
        self._transport = transport
        self._headers = auth_headers(self.params.server.token_env)
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        owned = [server] if isinstance(server, VllmServer) else list(server or [None] * len(urls))
        if not urls or len(owned) != len(urls):
            raise ValueError(f"{len(urls)} server URLs for {len(owned)} server processes")
        self.endpoints = [Endpoint(i, "", None, srv) for i, srv in enumerate(owned)]  # type: ignore[arg-type]
        for ep, url in zip(self.endpoints, urls):
            self._bind(ep, url)
        self.router = PrefixRouter(len(self.endpoints))
        self._lock = threading.Lock()
        self.last_stats: dict[str, float] = {}

    @property
    def base_url(self) -> str:
        """The first server's URL (the only one of a single-server engine)."""
        return self.endpoints[0].base_url

    @property
    def server(self) -> VllmServer | None:
        """The first owned server process (None when attached)."""
        return self.endpoints[0].server

    @classmethod
    def launch(
        cls,
        model_dir: str | Path,
        params: VllmEngineParams | None = None,
        *,
        policy_version: str = "0",
        policy_step: int = 0,
        repo_root: str | Path | None = None,
    ) -> "VllmEngine":
        """Start `params.servers` servers on `model_dir` (in parallel), or attach to
        params.base_url(s) after checking each answers and serves the same policy; return
        the client."""
        params = params or VllmEngineParams()
        urls = params.urls()
        if urls:
            engine = cls(urls, params.served_model_name, policy_version=policy_version,
                         policy_step=policy_step, params=params)
            if len(urls) > 1:
                engine.check_servers()
            return engine
        servers = [VllmServer(model_dir, params.server, served_model_name=params.served_model_name,
                              repo_root=repo_root) for _ in range(params.servers)]
        with ThreadPoolExecutor(max_workers=len(servers)) as pool:
            started = [pool.submit(s.start) for s in servers]
        errors = [f.exception() for f in started]
        if any(errors):
            for s in servers:
                s.stop()
            raise next(e for e in errors if e is not None)
        return cls([s.base_url for s in servers], params.served_model_name,
                   policy_version=policy_version, policy_step=policy_step, params=params,
                   server=servers)

    def _bind(self, endpoint: Endpoint, base_url: str) -> None:
        if endpoint.client is not None:
            endpoint.client.close()
        endpoint.base_url = base_url.rstrip("/")
        endpoint.client = httpx.Client(
            base_url=endpoint.base_url,
            timeout=self.params.request_timeout_s,
            transport=self._transport,
            headers=self._headers,
            limits=httpx.Limits(max_connections=max(1, self.params.max_concurrency)),
        )

    def check_servers(self, expect_root: str | None = None, *, down_ok: bool = False) -> None:
        """Before any work: every server answers `/v1/models` and serves this engine's model
        from the same directory (`expect_root`, when the caller knows which); a server of
        another policy is refused by name. `down_ok` (a client joining a running fleet, e.g.
        a rollout worker): a server that does not answer leaves the rotation instead, as it
        would mid-call; none answering is still an error."""
        roots = {}
        for ep in self.endpoints:
            try:
                resp = ep.client.get("/v1/models", timeout=30)
            except httpx.HTTPError as exc:
                why = f"vLLM server {ep.base_url} unreachable: {type(exc).__name__}: {exc}"
                if not down_ok:
                    raise VllmServerError(why) from exc
                self._retire(ep, why)
                continue
            if resp.status_code != 200:
                raise VllmServerError(f"vLLM server {ep.base_url}: GET /v1/models answered "
                                      f"HTTP {resp.status_code}: {resp.text[:200]}")
            served = {m.get("id"): m.get("root") for m in resp.json().get("data", [])}
            if self.model not in served:
                raise VllmRequestError(f"vLLM server {ep.base_url} serves {sorted(served)}, "
                                       f"not {self.model!r}")
            roots[ep.base_url] = served[self.model]
        self.live_endpoints()  # none answered: every failure named
        if len(set(roots.values())) > 1:
            raise VllmUpdateError(f"the servers serve different policies: {roots}")
        if expect_root is not None and set(roots.values()) != {expect_root}:
            raise VllmUpdateError(f"the servers serve {sorted(set(roots.values()))}, not the "
                                  f"policy {self.policy_version} at {expect_root}")

    # ---------------------------------------------------------------- HTTP
    def _post(self, path: str, body: dict, endpoint: Endpoint | None = None) -> dict:
        ep = endpoint or self.live_endpoints()[0]
        attempt = 0
        with self._lock:
            ep.in_flight += 1
        try:
            while True:
                try:
                    resp = ep.client.post(path, json=body)
                except (httpx.ConnectError, httpx.ReadError, httpx.TimeoutException,
                        httpx.RemoteProtocolError) as exc:
                    if attempt >= self.params.retries:
                        raise VllmServerError(
                            f"POST {ep.base_url}{path}: {type(exc).__name__}: {exc}"
                            f"{self._log_hint(ep)}") from exc
                    attempt += 1
                    time.sleep(0.5 * 2 ** attempt)
                    continue
                if resp.status_code >= 500:
                    raise VllmServerError(f"POST {ep.base_url}{path}: HTTP {resp.status_code}: "
                                          f"{resp.text[:500]}{self._log_hint(ep)}")
                if resp.status_code >= 400:
                    raise VllmRequestError(f"POST {ep.base_url}{path}: HTTP {resp.status_code}: "
                                           f"{resp.text[:500]}")
                try:
                    return resp.json()
                except ValueError as exc:
                    raise VllmResponseError(
                        f"POST {path}: body is not JSON: {resp.text[:200]}") from exc
        finally:
            with self._lock:
                ep.in_flight -= 1

    def _log_hint(self, ep: Endpoint) -> str:
        if ep.server is None:
            return ""
        return f"\n(server log {ep.server.log_path}):\n{ep.server.log_tail(15)}"

    def live_endpoints(self) -> list[Endpoint]:
        """The servers taking requests; none left is an error naming every server's failure."""
        live = [ep for ep in self.endpoints if ep.live]
        if not live:
            raise VllmServerError("no vLLM server left: " + "; ".join(
                f"{ep.base_url}: {ep.failure}" for ep in self.endpoints))
        return live

    def _retire(self, ep: Endpoint, why: str) -> None:
        """Take a server out of the rotation; its groups are routed afresh."""
        ep.live, ep.failure = False, why
        self.router.forget(ep.index)

    def _dispatch(self, prompts: Sequence[Sequence[int]], bodies: list[dict]) -> tuple[list, int]:
        """Every request answered by some live server, in prompt order, with the server that
        answered; a server failing mid-call is retired and its requests re-queued on the
        others. Returns (responses as (endpoint, body) pairs, requests re-queued)."""
        out: list = [None] * len(bodies)
        pending = list(range(len(bodies)))
        requeued = 0
        while pending:
            self.live_endpoints()  # names every failure when none is left
            with self._lock:
                loads = [ep.in_flight for ep in self.endpoints]
            targets = self.router.route([prompts[i] for i in pending],
                                        [ep.live for ep in self.endpoints], loads)
            workers = max(1, min(self.params.max_concurrency * len(self.endpoints), len(pending)))
            with ThreadPoolExecutor(max_workers=workers) as pool:
                futures = [(i, self.endpoints[t], pool.submit(
                    self._post, "/v1/completions", bodies[i], self.endpoints[t]))
                    for i, t in zip(pending, targets)]
            failed = []
            for i, ep, fut in futures:
                exc = fut.exception()
                if isinstance(exc, VllmServerError):
                    failed.append(i)
                    if ep.live:
                        self._retire(ep, str(exc).splitlines()[0])
                elif exc is not None:
                    raise exc
                else:
                    out[i] = (ep, fut.result())
            requeued += len(failed)
            pending = failed
        return out, requeued

    # ------------------------------------------------------------ protocol
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        *,
        seed: int,
        sample_seeds: Sequence[int] | None = None,
    ) -> list[Sample]:
        """One sample per prompt; sample i's stream is keyed by (seed, i), or by
        (seed, sample_seeds[i]) when given (as TorchEngine)."""
        # lazy: sampling imports torch (~1.5 s); the client's params and server need none of it
        from rlvr.engines.sampling import check_params

        check_params(params)
        if sample_seeds is not None and len(sample_seeds) != len(prompts):
            raise ValueError(f"sample_seeds has {len(sample_seeds)} entries for {len(prompts)} prompts")
        if not prompts:
            return []
        keys = list(sample_seeds) if sample_seeds is not None else list(range(len(prompts)))
        seeds = [request_seed(seed, int(k)) for k in keys]
        if params.max_new_tokens == 0:
            return [Sample(token_ids=[], logprobs=[], finish_reason="length") for _ in prompts]
        bodies = [completion_request(self.model, p, params, s, g)
                  for p, s, g in zip(prompts, seeds, self._grammars(prompts, params))]
        t0 = time.perf_counter()
        responses, requeued = self._dispatch(prompts, bodies)
        samples = []
        for prompt, s, (ep, resp) in zip(prompts, seeds, responses):
            choices = resp.get("choices") or []
            if len(choices) != 1:
                raise VllmResponseError(f"asked for one choice, got {len(choices)}")
            sample = parse_choice(choices[0], params)
            sample.prefill_tokens = prefill_tokens(resp, len(prompt))
            sample.extras.update(policy_version=self.policy_version,
                                 policy_step=self.policy_step, engine=self.name,
                                 request_seed=s, server=ep.base_url)
            samples.append(sample)
        self.last_stats = {
            "samples": len(samples),
            "generated_tokens": sum(len(x.token_ids) for x in samples),
            "prefill_tokens_requested": sum(len(p) for p in prompts),
            "prefill_tokens_computed": sum(x.prefill_tokens for x in samples),
            "requeued": requeued,
            "servers_live": sum(ep.live for ep in self.endpoints),
            "seconds": time.perf_counter() - t0,
        }
        return samples

    def _grammars(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[str]:
        """The Lark source of `params.grammar` for each prompt ("" without one). A grammar
        that reads the transcript needs the policy's tokenizer: that of the served
        directory (an attached engine has none)."""
        if not params.grammar:
            return [""] * len(prompts)
        if is_context_free(params.grammar):
            return [grammar_source(params.grammar)] * len(prompts)
        if self._tokenizer is None:
            if self.server is None:
                raise VllmRequestError(
                    f"decoding.grammar {params.grammar!r} reads the transcript, which needs the "
                    "policy's tokenizer; an engine attached to a server (base_url) has none")
            self._tokenizer = load_tokenizer(self.server.model_dir)
        return [grammar_source(params.grammar,
                               self._tokenizer.decode(list(p), skip_special_tokens=False))
                for p in prompts]

    def score(
        self, prompt: Sequence[int], completion: Sequence[int], params: SamplingParams
    ) -> list[float]:
        """Teacher-forced logprobs of `completion` under the processed distribution. The
        server returns the raw full-vocab distribution at every prompt position
        (`prompt_logprobs=-1`; vLLM never applies sampling transforms to prompt logprobs)
        and `sampling.process_logits` applies temperature / top-k / top-p, exactly as for
        TorchEngine. Cost grows with vocab x length: meant for checks, not training."""
        # lazy: sampling imports torch (~1.5 s); the client's params and server need none of it
        from rlvr.engines.sampling import check_params, process_logits

        check_params(params)
        if params.grammar:
            raise VllmRequestError(
                f"score under decoding.grammar {params.grammar!r}: the server returns raw "
                "distributions and this client holds no tokenizer to replay the grammar's "
                "masks; score with TorchEngine (or the trainer) on the same policy directory")
        completion = [int(t) for t in completion]
        if not completion:
            return []
        body = {
            "model": self.model,
            "prompt": [int(t) for t in prompt] + completion,
            "max_tokens": 1,
            "temperature": 0.0,
            "prompt_logprobs": -1,
            "ignore_eos": True,
        }
        choice = (self._post("/v1/completions", body).get("choices") or [None])[0]
        if choice is None:
            raise VllmResponseError("score: no choice in the response")
        rows = prompt_logprob_rows(choice, len(prompt), completion)
        processed = process_logits(rows.float(), params.temperature, params.top_k, params.top_p)
        return [float(processed[j, tok]) for j, tok in enumerate(completion)]

    # ------------------------------------------------------ policy updates
    def sync_weights(self, source: WeightSource, policy_version: str, policy_step: int) -> None:
        """Serve policy `policy_version` (ordinal `policy_step`) from the directory `source`
        (a model dir; a PEFT adapter dir in 'lora' mode), by the servers' update mode, on
        every server at once. A server the update does not reach leaves the rotation (it
        holds the old policy) until a later update reaches it; when none is reached the
        call fails and nothing changes. `policy_version` / `policy_step` change only on
        success; `last_sync_seconds` says how long it took, `last_sync_failures` which
        servers it missed and why."""
        step = check_policy_step(policy_step)
        if isinstance(source, Mapping):
            raise VllmUpdateError(
                "the vllm engine takes a policy directory, not a state dict: save the weights "
                "(save_pretrained) and pass that directory"
            )
        if any(ep.server is None for ep in self.endpoints):
            raise VllmUpdateError(
                "this engine is attached to an external server (base_url); update it there"
            )
        path, version = Path(source), policy_version
        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=len(self.endpoints)) as pool:
            done = [pool.submit(self._update, ep, path, version) for ep in self.endpoints]
        failures = {ep.base_url: f"{type(f.exception()).__name__}: {f.exception()}"
                    for ep, f in zip(self.endpoints, done) if f.exception() is not None}
        if len(failures) == len(self.endpoints):
            first = next(f.exception() for f in done)
            if len(self.endpoints) == 1:
                raise first
            raise VllmUpdateError(f"policy {version} reached no server: {failures}") from first
        if self.params.server.update == "lora":
            self.model = version
        for ep in self.endpoints:
            if ep.base_url in failures:
                self._retire(ep, f"missed policy {version}: {failures[ep.base_url]}")
            else:
                ep.live, ep.failure = True, ""
        self.policy_version = version
        self.policy_step = step
        self.last_sync_failures = failures
        self.last_sync_seconds = time.monotonic() - t0

    def _update(self, ep: Endpoint, path: Path, version: str) -> None:
        """Move one owned server to the policy in `path`, checking it serves it after."""
        server = ep.server
        mode = server.params.update
        if mode == "restart":
            server.restart(path)
            self._bind(ep, server.base_url)
            roots = {m.get("root") for m in server.served_models()}
            if str(Path(path).resolve()) not in roots:
                raise VllmUpdateError(f"server serves {sorted(map(str, roots))} after restart, not {path}")
        elif mode == "reload":
            server.reload_weights(path, version)
        elif mode == "lora":
            server.load_lora(version, path)
            old, ep.adapter = ep.adapter, version
            if old and old != version:
                server.unload_lora(old)
        else:  # pragma: no cover - guarded by the params Literal
            raise VllmUpdateError(f"unknown update mode {mode!r}")

    def close(self) -> None:
        for ep in self.endpoints:
            if ep.client is not None:
                ep.client.close()
            if ep.server is not None:
                ep.server.stop()

    def __enter__(self) -> "VllmEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_vllm_engine(model_dir: str | Path, *, policy_version: str = "0", policy_step: int = 0,
                     repo_root: str | Path | None = None, where: str = "rollout.engine_options",
                     **options) -> VllmEngine:
    """Launch (or attach to) vLLM servers for `model_dir` from a plain option mapping, e.g.
    a stage's `engine_options` (`rlvr.engines.build_engine("vllm", ...)` parses them itself). The
    options are VllmEngineParams fields (`server:` nested), validated like params.yaml: an
    unknown or mistyped key is a ConfigError naming `<where>.<key>`. Close the engine (or
    use it as a context manager) to stop owned servers."""
    params = parse(VllmEngineParams, options, where)
    params.urls(where)
    return VllmEngine.launch(model_dir, params, policy_version=policy_version,
                             policy_step=policy_step, repo_root=repo_root)
