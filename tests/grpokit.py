"""Shared pieces of the GRPO tests (test_grpo*.py and the rank worker): small loop params and
budgets, a deterministic stand-in for the enclave, and an engine wrapper that forces the
correct edit into half of each group, so a group is informative without a trained policy."""
from __future__ import annotations

import functools

from rlvr.agent.episode import Budgets
from rlvr.agent.rollout import RolloutParams
from rlvr.agent.tools import format_tool_call
from rlvr.engines.base import Sample, SamplingParams
from rlvr.sandbox.params import SandboxParams
from rlvr.train.grpo_config import GRPOParams, parse_grpo_params

from agentkit import WrappedEngine

SANDBOX = SandboxParams(backend="bwrap", workers=1)
# The correct edit of agentkit's count task and the submit after it, as (tool, args,
# reasoning): written in each policy's own tool-call format (`codec.format`).
FIX_CALL = ("edit", {"path": "mini/core.py", "old": "if v <= limit:", "new": "if v < limit:"},
            "Flip the comparison.")
SUBMIT_CALL = ("submit", {}, "Done.")
FIX = format_tool_call(*FIX_CALL)        # in the rlvr format (the CPU default's)
SUBMIT = format_tool_call(*SUBMIT_CALL)
# The update tests' scoring distribution (a temperature, so processed != raw logprobs).
SCORING = SamplingParams(temperature=0.8)
# Room for the forced edit, then a submit, in one episode.
FORCED_BUDGETS = {"max_turns": 3, "max_new_tokens_per_turn": 80,
                  "max_new_tokens_per_episode": 200}


def small_rollout(**budgets) -> RolloutParams:
    b = {"max_turns": 3, "max_new_tokens_per_turn": 24, "max_new_tokens_per_episode": 60,
         **budgets}
    return RolloutParams(workers=1, budgets=Budgets(**b))


def small_params(**kw) -> GRPOParams:
    base = {"steps": 1, "group_size": 2, "groups_per_step": 2, "tasks_per_draw": 2,
            "max_draws": 2, "consensus_runs": 1, "learning_rate": 1e-2}
    return parse_grpo_params({**base, **kw})


def fake_verifier(tasks, patches):
    """A deterministic stand-in for the enclave (test_grpo's last test uses the real one): a
    diff passes iff it makes count_below's comparison strict."""
    return [{"task_id": p["task_id"], "candidate_id": p["candidate_id"], "origin": p["origin"],
             "success": "+        if v < limit:" in p["patch"],
             "reason": "none" if "+        if v < limit:" in p["patch"] else "tests_failed",
             "runs": 1, "verifier_version": "test-fake", "safety_flags": [], "seed": 0}
            for p in patches]


def verifiable(task, enclave):
    """`task` with the FAIL_TO_PASS / PASS_TO_PASS ids its hidden suite really has (agentkit's
    tasks carry placeholders, enough for the fake verifier): the tests the unfixed repository
    fails, and the others the reference passes, as curation derives them."""
    pristine = enclave.run_suite(task, "", seed=0)
    fixed = enclave.run_suite(task, task.reference_patch, seed=0)
    f2p = tuple(sorted(t for t, o in pristine.outcomes.items() if o != "passed"))
    return task.with_(fail_to_pass=f2p,
                      pass_to_pass=tuple(sorted(t for t in fixed.outcomes if t not in f2p)))


class ForcedFix(WrappedEngine):
    """The trained torch engine, except that at turn 0 the prompts at even batch positions
    (= even sample indices of each group: the collector batches a wave's episodes in group,
    then sample order) get the correct edit, and an episode that made it then submits.
    Forced tokens carry the engine's own logprobs (`score`), so the trainer sees genuine
    behaviour logprobs. `kill_at_start`: raise when that many groups were started (a
    killed run); `starts` counts the turn-0 calls (one per group) this wrapper served.

    Any codec (`ChatCodec`, `TemplateCodec`): the actions are written in `codec.format` and
    end with `codec.end_of_turn`; a prompt is a first turn's while it holds at most two
    end-of-turn tokens (the system and the user message each end with one, in the rlvr
    ChatML and in a model template's alike; every later turn adds the assistant's and the
    observation's)."""

    def __init__(self, inner, codec, kill_at_start: int | None = None):
        super().__init__(inner)
        self.codec, self.kill_at_start = codec, kill_at_start
        self.calls = self.starts = 0
        eot = codec.end_of_turn
        self.fix, self.submit = (codec.encode_action(codec.format.write(*FIX_CALL)) + [eot],
                                 codec.encode_action(codec.format.write(*SUBMIT_CALL)) + [eot])
        self.name = "forced-fix"

    def _first_turn(self, prompt) -> bool:
        eot = self.codec.end_of_turn
        return sum(1 for t in prompt if t == eot) <= 2

    def _has_fix(self, prompt) -> bool:
        n, f = len(prompt), self.fix[:-1]
        return any(list(prompt[i:i + len(f)]) == f for i in range(n - len(f) + 1))

    def generate(self, prompts, params: SamplingParams, *, seed, sample_seeds=None):
        self.calls += 1
        if all(self._first_turn(p) for p in prompts):
            if self.kill_at_start is not None and self.starts == self.kill_at_start:
                raise KeyboardInterrupt("killed")
            self.starts += 1
        forced = {}
        for i, p in enumerate(prompts):
            first = self._first_turn(p)
            if first and i % 2 == 0:
                forced[i] = self.fix
            elif not first and self._has_fix(p):
                forced[i] = self.submit
        rest = [i for i in range(len(prompts)) if i not in forced]
        real = self.inner.generate([prompts[i] for i in rest], params, seed=seed,
                                   sample_seeds=[sample_seeds[i] for i in rest]
                                   if sample_seeds is not None else None) if rest else []
        out: list = [None] * len(prompts)
        for i, s in zip(rest, real):
            out[i] = s
        for i, ids in forced.items():
            out[i] = Sample(list(ids), self.inner.score(prompts[i], ids, params), "stop")
        return out


def recording_norms(backend) -> list[float]:
    """Make `backend.step` append the (pre-clip) gradient norm it returns."""
    norms: list[float] = []
    step = backend.step

    def recording(lr):
        norms.append(step(lr))
        return norms[-1]

    backend.step = recording
    return norms


def forced(codec, **kw):
    """`wrap_engine` for `train_grpo`: the sampler wrapped in `ForcedFix`."""
    return functools.partial(ForcedFix, codec=codec, **kw)
