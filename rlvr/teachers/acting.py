"""Every acting engine by kind: the policy's token engines and the teachers.

`rollout.engine` names either a token engine (`torch`, `vllm`: `rlvr.engines.build_engine`,
a floor below the agent) or a teacher (`scripted`, `openai`: this floor, above the agent).
The one dispatch over both therefore lives here, and the agent's `roll_out` never builds an
engine by name: it is handed the engine, or `open_engine` to build one from its params.

* `KINDS` — every acting kind;
* `build_acting_engine(kind, model_dir, ...)` — the engine of that kind;
* `open_engine(params)` — the engine a `RolloutParams` names, at the policy step its
  checkpoint records.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

from rlvr.agent.rollout import RolloutParams
from rlvr.engines import TOKEN_ENGINES, build_engine, check_step, unknown_kind
from rlvr.engines.model_dir import checkpoint_policy_step
from rlvr.errors import ConfigError
from rlvr.teachers.openai import OpenAIEngine
from rlvr.teachers.scripted import ScriptedTeacher
from rlvr.toolcalls import DEFAULT_FORMAT

TEACHERS = {"openai": OpenAIEngine, "scripted": ScriptedTeacher}
KINDS = tuple(sorted({*TOKEN_ENGINES, *TEACHERS}))


def build_acting_engine(kind: str, model_dir: Path | str, *,
                        policy_version: str | None = None, policy_step: int = 0,
                        options: Mapping[str, Any] | None = None,
                        teacher: Mapping[str, Any] | None = None, max_turns: int | None = None,
                        where: str = "rollout", tool_call_format: str = DEFAULT_FORMAT):
    """The acting engine of kind `kind`: a token engine (`build_engine`, which reads
    `model_dir`'s weights) or a teacher (the other kinds only share the tokenizer of
    `model_dir` through the caller's codec, so it is not read here).

    * `policy_version` — overrides the engine's own version string;
    * `policy_step` — the ordinal of a token engine's weights; a teacher is no trained
      policy: only 0;
    * `options` — the backend's own settings (`<where>.engine_options`): see `build_engine`
      for token engines; openai: OpenAITeacherParams fields; scripted: none;
    * `teacher`, `max_turns` — the scripted teacher's constructor arguments (e.g. its
      `noise`) and the episode turn budget it plans within;
    * `tool_call_format` — the policy's tool-call format (its codec's): a teacher writes its
      actions in it, so they tokenize as the policy's own would.

    An unknown kind or option is a ConfigError naming `<where>.engine` /
    `<where>.engine_options.<key>`.
    """
    if kind in TOKEN_ENGINES:
        return build_engine(kind, model_dir, policy_version=policy_version,
                            policy_step=policy_step, options=options, where=where)
    check_step(policy_step, where)
    if kind not in TEACHERS:
        raise unknown_kind(kind, KINDS, where)
    opts = dict(options or {})
    field = f"{where}.engine_options"
    if policy_step != 0:
        raise ConfigError(f"{where}.policy_step: a teacher ({kind}) is no trained policy: its "
                          f"rollouts record step 0 (got {policy_step})")
    if kind == "openai":
        engine = OpenAIEngine.from_options(opts, where=field, tool_call_format=tool_call_format)
    else:  # scripted
        if opts:
            raise ConfigError(f"{field}: the scripted teacher takes none (got {sorted(opts)})")
        kwargs = {**(teacher or {}), "format": tool_call_format}
        if max_turns is not None:
            kwargs["max_turns"] = max_turns
        engine = ScriptedTeacher(**kwargs)
    if policy_version:
        engine.policy_version = policy_version
    return engine


def open_engine(params: RolloutParams, tool_call_format: str = DEFAULT_FORMAT):
    """The acting engine named by `rollout.engine`, with `rollout.engine_options`; a token
    engine acts at the `policy_step` its checkpoint records; a teacher writes in the policy's
    `tool_call_format`."""
    step = checkpoint_policy_step(params.model_dir) if params.engine in TOKEN_ENGINES else 0
    return build_acting_engine(params.engine, params.model_dir,
                               policy_version=params.policy_version or None, policy_step=step,
                               options=params.engine_options,
                               teacher=dataclasses.asdict(params.teacher),
                               max_turns=params.budgets.max_turns,
                               tool_call_format=tool_call_format)
