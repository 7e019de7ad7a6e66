"""One multi-turn episode as an explicit state machine (SPEC §3).

    start() -> [request() -> accept_sample()/accept_text() -> run_tool()]* -> finish()

The collector drives many episodes at once (batched generation, tools in a thread pool);
`rlvr.agent.drive.run_episode` drives one alone. The state machine owns every decision, so
the rules are the same on both paths:

* budgets (`Budgets`): max turns, max new tokens per turn and per episode, context window,
  tool timeout, observation cap, max invalid actions;
* an action is parsed with `tools.parse_action`; an invalid one gets an error observation and
  counts toward `max_invalid_actions`;
* the n-gram repetition guard watches the generated tokens;
* stop reasons: submitted | max_turns | max_tokens | repetition | invalid_action_limit |
  infra_error. `truncated` (source: max_turns | max_tokens | observation) is a collector
  limit; `terminated` an ending caused by the agent (submit, or a rule it broke);
  `infra_error` a sandbox failure — never a task failure.
* at the end, the workspace's diff is taken with `rlvr.tasks.patches.extract_patch` and
  checked by the static patch policy (host-side diffing; no policy code runs outside the
  sandbox, no verifier runs in the workspace, and the agent never imports the enclave).
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from rlvr.agent.executor import ToolExecutor, ToolResult, cap_text
from rlvr.agent.prompt import prompt_fingerprint, system_prompt, user_message
from rlvr.agent.repetition import RepetitionGuard, RepetitionParams
from rlvr.rl.reward import RewardParams
from rlvr.agent.tools import ParsedAction, ToolCall, parse_action, tools_fingerprint
from rlvr.agent.template_codec import TemplateCodec
from rlvr.agent.transcript import PROMPT_TURN, ChatCodec, Transcript
from rlvr.agent.workspace import Workspace
from rlvr.engines.base import Decoding, SamplingParams
from rlvr.sandbox.base import Limits, Sandbox
from rlvr.seeds import derive_seed
from rlvr.tasks.model import Task
from rlvr.tasks.patches import extract_patch

HARNESS_VERSION = "1"
ENV_NAME = "rlvr-repo-repair"


def env_version(codec: ChatCodec | TemplateCodec | None = None) -> str:
    """Harness + tool schemas + system prompt (+ for a model's own chat template: the tool-call
    format, the template's hash and the thinking mode): what the agent's world is made of."""
    described = codec.describe() if codec is not None else ""
    return (f"{HARNESS_VERSION}+tools.{tools_fingerprint()}+prompt."
            f"{prompt_fingerprint(bool(described))}" + (f"+{described}" if described else ""))


@dataclass(frozen=True)
class Budgets:
    """Deployment budgets (SPEC §3): identical in rollouts, evaluation and the gate."""

    max_turns: int = 12
    max_new_tokens_per_turn: int = 256
    max_new_tokens_per_episode: int = 1536
    max_context_tokens: int = 4096
    tool_timeout_s: float = 20.0  # CPU seconds per run_tests (sandbox.base.WAIT_FACTOR x: wall)
    observation_cap: int = 2000
    max_invalid_actions: int = 3

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_new_tokens_per_turn", "max_new_tokens_per_episode",
                     "max_context_tokens", "observation_cap", "max_invalid_actions"):
            if getattr(self, name) < 1:
                raise ValueError(f"budgets.{name} must be >= 1")
        if self.tool_timeout_s <= 0:
            raise ValueError("budgets.tool_timeout_s must be > 0")


@dataclass(frozen=True)
class EpisodeSpec:
    task: Task
    group_id: str
    trajectory_id: str
    sample_index: int
    reset_seed: int


@dataclass(frozen=True)
class EpisodeConfig:
    """Everything an episode needs besides its spec and engine."""

    codec: ChatCodec | TemplateCodec
    budgets: Budgets = Budgets()
    decoding: Decoding = Decoding()
    repetition: RepetitionParams = RepetitionParams()
    reward: RewardParams = RewardParams()
    sandbox: Sandbox | None = None
    limits: Limits = Limits()
    # run_tests through a per-episode warm pytest fork-server (rlvr.agent.warm_tests): the
    # observation is the cold path's byte for byte; False = a fresh sandboxed pytest per call
    warm_tests: bool = True
    workspace_parent: Path | None = None
    run_seed: int = 0

    def sampling(self, max_new_tokens: int) -> SamplingParams:
        """A turn's sampling params: the decoding, `max_new_tokens`, stopping at the codec's
        end-of-turn ids (every token engine's schedule samples turns with these)."""
        return SamplingParams.of(self.decoding, max_new_tokens=max_new_tokens,
                                 stop_token_ids=self.codec.stop_ids)


@dataclass
class TurnRecord:
    turn: int
    policy_version: str
    policy_step: int  # the acting engine's ordinal at sampling time (teachers: 0)
    sample_seed: int
    action_text: str
    action_valid: bool
    action_error_kind: str
    action_error: str
    tool_name: str
    tool_args: str
    finish_reason: str
    gen_tokens: int
    logprob_sum: float
    observation: str = ""
    observation_raw_chars: int = 0
    observation_truncated: bool = False
    tool_status: str = "none"
    tool_detail: str = ""
    gen_seconds: float = 0.0
    tool_seconds: float = 0.0
    sampled_by: str = ""  # the server that sampled the turn ("" = in process, or a teacher)


def teacher_view(task: Task) -> Task:
    """The task as a teacher may see it: no hidden tests, no test ids, no reference."""
    return task.with_(hidden_tests={}, reference_patch="", fail_to_pass=(), pass_to_pass=(),
                      quarantined=())


class Episode:
    def __init__(self, spec: EpisodeSpec, config: EpisodeConfig, *, engine_name: str):
        self.spec = spec
        self.cfg = config
        self.engine_name = engine_name
        self.codec = config.codec
        self.budgets = config.budgets
        self.transcript = Transcript()
        self.guard = RepetitionGuard(config.repetition)
        self.turns: list[TurnRecord] = []
        self.messages: list[dict] = []
        self.workspace: Workspace | None = None
        self.executor: ToolExecutor | None = None
        self.pending: ToolCall | None = None
        self.state = "new"  # new | generate | tool | done
        self.stop_reason = ""
        self.stop_detail = ""
        self.truncation_source = ""
        self.infra_error = False
        self.invalid_actions = 0
        self.generated = 0
        self.dropped_tokens = 0  # tokens of a segment that did not fit (length before truncation)
        self.prompt_tokens = 0
        self.initial_checksum = ""
        self.started_at = 0.0
        self.wall_seconds = 0.0
        self._t0 = 0.0
        self.patch = ""
        self.patch_check: dict = {}
        self.patch_ok = False
        self.patch_reason = ""

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        self.started_at = time.time()
        self._t0 = time.perf_counter()
        task = self.spec.task
        try:
            self.workspace = Workspace.create(task, self.cfg.workspace_parent)
            self.initial_checksum = self.workspace.checksum()
        except Exception as exc:  # noqa: BLE001 - disk, git, ...: infrastructure, not the task
            self.infra_failure(f"workspace setup failed: {type(exc).__name__}: {exc}")
            return
        self.executor = ToolExecutor(self.workspace, self.cfg.sandbox,
                                     timeout_s=self.budgets.tool_timeout_s,
                                     observation_cap=self.budgets.observation_cap,
                                     limits=self.cfg.limits, warm=self.cfg.warm_tests)
        user = user_message(task)
        system = system_prompt(bool(self.codec.describe()))
        prompt = self.codec.initial_prompt(system, user)
        self.transcript.append_context(prompt, PROMPT_TURN)
        self.prompt_tokens = len(prompt)
        self.messages = [{"role": "system", "content": system},
                         {"role": "user", "content": user}]
        self.state = "generate"
        if len(self.transcript) >= self.budgets.max_context_tokens:
            self._truncate("max_tokens", "the initial prompt fills the context window")

    @property
    def done(self) -> bool:
        return self.state == "done"

    def request(self) -> int:
        """Tokens the next turn may generate (> 0); the episode stops instead when none."""
        assert self.state == "generate", self.state
        b = self.budgets
        limits = {
            "per-turn": b.max_new_tokens_per_turn,
            "per-episode": b.max_new_tokens_per_episode - self.generated,
            "context": b.max_context_tokens - len(self.transcript),
        }
        return max(0, min(limits.values()))

    def limit_detail(self, n: int) -> str:
        b = self.budgets
        if n >= b.max_new_tokens_per_turn:
            return f"per-turn budget of {b.max_new_tokens_per_turn} tokens"
        if n >= b.max_new_tokens_per_episode - self.generated:
            return f"episode budget of {b.max_new_tokens_per_episode} generated tokens"
        return f"context window of {b.max_context_tokens} tokens"

    def turn_seed(self) -> int:
        """The sample seed of this episode's next turn: derive_seed(reset seed, "turn", t),
        whatever else shares the batch or the decode."""
        return derive_seed(self.spec.reset_seed, "turn", len(self.turns))

    def check_budget(self) -> int:
        """`request()`, stopping the episode (max_tokens) when nothing may be generated."""
        n = self.request()
        if n <= 0:
            self._truncate("max_tokens", f"no tokens left: {self.limit_detail(0)} used up")
        return n

    # ---- actions -------------------------------------------------------------------------
    def accept_sample(self, token_ids: Sequence[int], logprobs: Sequence[float], *,
                      limit: int, policy_version: str, policy_step: int, sample_seed: int,
                      gen_seconds: float = 0.0, sampled_by: str = "") -> None:
        """A TokenEngine's sample for this turn (cut to `limit` tokens / the first stop);
        `sampled_by` names the server that sampled it, when a server did."""
        ids, lps = list(token_ids), list(logprobs)
        stop_at = next((i for i, t in enumerate(ids) if t in self.codec.stop_ids), None)
        if stop_at is not None and stop_at < limit:
            ids, lps = ids[:stop_at + 1], lps[:stop_at + 1]
        else:
            ids, lps = ids[:limit], lps[:limit]
        turn = len(self.turns)
        self.transcript.append_sampled(ids, lps, turn)
        self._after_action(ids, limit, policy_version, policy_step, sample_seed, gen_seconds,
                           logprob_sum=float(sum(lps)), sampled_by=sampled_by)

    def accept_text(self, text: str, *, limit: int, policy_version: str, sample_seed: int,
                    gen_seconds: float = 0.0) -> None:
        """A TextEngine's action text: tokenized as a segment (+ the end-of-turn token).
        A teacher is no trained policy: its turns record policy_step 0."""
        ids = [*self.codec.encode_action(text), self.codec.end_of_turn]
        ids = ids[:limit]
        turn = len(self.turns)
        self.transcript.append_teacher(ids, turn)
        self._after_action(ids, limit, policy_version, 0, sample_seed, gen_seconds,
                           logprob_sum=math.nan)

    def _after_action(self, ids: list[int], limit: int, policy_version: str, policy_step: int,
                      sample_seed: int, gen_seconds: float, logprob_sum: float,
                      sampled_by: str = "") -> None:
        turn = len(self.turns)
        self.generated += len(ids)
        repeated = self.guard.feed(ids)
        ended = bool(ids) and ids[-1] in self.codec.stop_ids
        body = ids[:-1] if ended else ids
        text = self.codec.decode(body)
        if not ended:
            parsed = ParsedAction(None, "turn_too_long",
                                  f"the turn reached the {self.limit_detail(limit)}")
        elif ids[-1] not in self.codec.end_ids:
            parsed = ParsedAction(None, "no_end_of_turn",
                                  f"the turn must end with "
                                  f"{self.codec.decode([self.codec.end_of_turn])}, not "
                                  f"{self.codec.decode(ids[-1:])}")
        else:
            parsed = parse_action(text, self.codec.format.name)
        call = parsed.call
        record = TurnRecord(
            turn=turn, policy_version=policy_version, policy_step=policy_step,
            sample_seed=sample_seed, action_text=text,
            action_valid=parsed.valid, action_error_kind=parsed.error_kind,
            action_error=parsed.error, tool_name=call.name if call else "",
            tool_args=json.dumps(call.args, sort_keys=True, ensure_ascii=False) if call else "",
            finish_reason="stop" if ended else "length", gen_tokens=len(ids),
            logprob_sum=logprob_sum, gen_seconds=gen_seconds, sampled_by=sampled_by)
        self.turns.append(record)
        self.messages.append({"role": "assistant", "content": text})
        if repeated:
            self._stop("repetition", f"an n-gram repeated more than "
                       f"{self.cfg.repetition.threshold} times within "
                       f"{self.cfg.repetition.window} generated tokens")
            return
        if not ended:
            self._truncate("max_tokens", record.action_error)
            return
        if not parsed.valid:
            self.invalid_actions += 1
            record.tool_status = "invalid"
            if self.invalid_actions >= self.budgets.max_invalid_actions:
                self._stop("invalid_action_limit",
                           f"{self.invalid_actions} invalid actions (limit "
                           f"{self.budgets.max_invalid_actions})")
                return
            # (schema messages quote the offending value: the cap applies here too)
            message = f"error: invalid tool call ({parsed.error_kind}): {parsed.error}"
            shown, cut = cap_text(message, self.budgets.observation_cap)
            # a turn ended by end-of-text gets its end-of-turn from the harness (mask 0)
            self._observe(shown, ToolResult(shown, "invalid", len(message), cut, 0.0),
                          close_turn=ids[-1] not in self.codec.end_ids)
            return
        if call.name == "submit":
            record.tool_status = "submitted"
            self._stop("submitted", "")
            return
        self.pending = call
        self.state = "tool"

    def run_tool(self) -> None:
        """Execute the pending tool call (thread-safe w.r.t. other episodes)."""
        assert self.state == "tool" and self.pending is not None and self.executor is not None
        call, self.pending = self.pending, None
        result = self.executor.execute(call)
        record = self.turns[-1]
        record.tool_status = result.status
        record.tool_detail = result.detail
        record.tool_seconds = result.latency_s
        if result.status == "infra_error":
            record.observation = result.observation
            record.observation_raw_chars = result.raw_chars
            record.observation_truncated = result.truncated
            self.infra_failure(result.detail or result.observation)
            return
        self._observe(result.observation, result, close_turn=False)

    def _observe(self, observation: str, result: ToolResult, *, close_turn: bool) -> None:
        record = self.turns[-1]
        record.observation = observation
        record.observation_raw_chars = result.raw_chars or len(observation)
        record.observation_truncated = result.truncated
        self.messages.append({"role": "tool", "content": observation})
        if len(self.turns) >= self.budgets.max_turns:
            self._truncate("max_turns", f"{self.budgets.max_turns} turns used")
            return
        segment = self.codec.observation_segment(observation, close_turn=close_turn)
        if len(self.transcript) + len(segment) + 1 > self.budgets.max_context_tokens:
            self.dropped_tokens = len(segment)
            self._truncate("observation", f"the observation ({len(segment)} tokens) does not "
                           f"fit the context window of {self.budgets.max_context_tokens}")
            return
        self.transcript.append_context(segment, record.turn)
        self.state = "generate"

    # ---- stopping ------------------------------------------------------------------------
    def _truncate(self, source: str, detail: str) -> None:
        reason = "max_turns" if source == "max_turns" else "max_tokens"
        self.truncation_source = source
        self._stop(reason, detail)

    def infra_failure(self, detail: str) -> None:
        """Stop on an infrastructure failure (workspace, sandbox, teacher endpoint): never a
        task failure, so the rollout carries no outcome."""
        self.infra_error = True
        self._stop("infra_error", detail)

    def _stop(self, reason: str, detail: str) -> None:
        self.stop_reason = reason
        self.stop_detail = detail
        self.state = "done"

    @property
    def terminated(self) -> bool:
        return self.stop_reason in ("submitted", "repetition", "invalid_action_limit")

    @property
    def truncated(self) -> bool:
        return bool(self.truncation_source)

    def finish(self) -> None:
        """Extract the workspace diff (host side) and release the workspace."""
        assert self.state == "done"
        if self.workspace is not None:
            try:
                patch, check = extract_patch(self.workspace.repo, self.spec.task)
                self.patch = patch
                self.patch_check = _as_dict(check)
                self.patch_ok = bool(self.patch_check.get("ok", False))
                self.patch_reason = str(self.patch_check.get("reason", ""))
            except Exception as exc:  # noqa: BLE001 - a broken extraction is recorded, not fatal
                self.patch, self.patch_ok = "", False
                self.patch_reason = "extraction_error"
                self.patch_check = {"ok": False, "reason": "extraction_error",
                                    "detail": f"{type(exc).__name__}: {exc}"}
            finally:
                if self.executor is not None:
                    self.executor.close()  # the warm test server dies with the episode
                self.workspace.close()
        self.wall_seconds = time.perf_counter() - self._t0


def _as_dict(obj: Any) -> dict:
    if dataclasses.is_dataclass(obj):
        return {k: _jsonable(v) for k, v in dataclasses.asdict(obj).items()}
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    return {"ok": bool(getattr(obj, "ok", False)), "reason": str(getattr(obj, "reason", ""))}


def _jsonable(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return str(v)
