"""Inference engines (protocols in `rlvr.engines.base`) and the one factory that builds them.

`build_engine(kind, model_dir, ...)` builds every acting engine by name — the token engines
that are the policy (`torch`, `vllm`) and the text engines that are teachers (`openai`,
`scripted`, from `rlvr.teachers`). Rollout, evaluation and training loops all build engines
here, so "engine: vllm" means the same thing wherever it is written.

Backends are registered as "module:Class" strings in `ENGINES` and imported lazily, so
importing `rlvr.engines` costs nothing and a backend's heavy dependencies (torch, vLLM,
httpx) load only when it is used. A new backend registers here and gets a branch in
`build_engine` saying how its options map onto its constructor.
"""
from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any, Mapping

from rlvr.engines.base import check_policy_step
from rlvr.errors import ConfigError

# kind -> "module:Class" of its engine
TOKEN_ENGINES: dict[str, str] = {
    "torch": "rlvr.engines.torch_engine:TorchEngine",
    "vllm": "rlvr.engines.vllm_engine:VllmEngine",
}
TEXT_ENGINES: dict[str, str] = {
    "openai": "rlvr.teachers.openai:OpenAIEngine",
    "scripted": "rlvr.teachers.scripted:ScriptedTeacher",
}
ENGINES: dict[str, str] = {**TOKEN_ENGINES, **TEXT_ENGINES}


def _resolve(kind: str, where: str):
    try:
        target = ENGINES[kind]
    except KeyError:
        raise ConfigError(f"{where}.engine: engine kind {kind!r} unknown "
                          f"(known: {', '.join(sorted(ENGINES))})") from None
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def _check_keywords(ctor, options: Mapping[str, Any], where: str, skip: tuple[str, ...]) -> None:
    """Name a bad option key as a config field instead of a TypeError from deep inside."""
    accepted = {name for name, p in inspect.signature(ctor).parameters.items()
                if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in skip}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown key (known: "
                          f"{', '.join(sorted(accepted))})")


def build_engine(kind: str, model_dir: Path | str, *, policy_version: str | None = None,
                 policy_step: int = 0, options: Mapping[str, Any] | None = None,
                 teacher: Mapping[str, Any] | None = None, max_turns: int | None = None,
                 where: str = "rollout"):
    """The acting engine of kind `kind`.

    * `model_dir` — the HF policy directory (weights for `torch` / `vllm`; the other kinds
      only share its tokenizer through the caller's codec, so it is not read here);
    * `policy_version` — overrides the engine's own version string (token engines default to
      their weights' fingerprint);
    * `policy_step` — the ordinal of those weights (0 = the initial policy). Like
      `policy_version` it says which policy the caller means, so it is the caller's argument,
      never a backend option (`engine_options.policy_step` is an unknown key); a teacher is
      no trained policy: only 0;
    * `options` — the backend's own settings (`<where>.engine_options`): torch: TorchEngine
      keywords; vllm: VllmEngineParams fields; openai: OpenAITeacherParams fields;
      scripted: none;
    * `teacher`, `max_turns` — the scripted teacher's constructor arguments (e.g. its
      `noise`) and the episode turn budget it plans within.

    An unknown kind or option is a ConfigError naming `<where>.engine` /
    `<where>.engine_options.<key>`.
    """
    try:
        check_policy_step(policy_step)
    except ValueError as exc:
        raise ConfigError(f"{where}.policy_step: {exc}") from None
    ctor = _resolve(kind, where)
    opts = dict(options or {})
    field = f"{where}.engine_options"
    if kind in TEXT_ENGINES and policy_step != 0:
        raise ConfigError(f"{where}.policy_step: a teacher ({kind}) is no trained policy: its "
                          f"rollouts record step 0 (got {policy_step})")
    if kind == "torch":
        _check_keywords(ctor, opts, field, skip=("policy_version", "policy_step", "policy"))
        return ctor(model_dir, policy_version=policy_version, policy_step=policy_step, **opts)
    if kind == "vllm":
        from rlvr.config import parse
        from rlvr.engines.model_dir import weights_fingerprint
        from rlvr.engines.vllm_engine import VllmEngineParams

        params = parse(VllmEngineParams, opts, field)  # options first: no server for a typo
        return ctor.launch(model_dir, params,
                           policy_version=policy_version or weights_fingerprint(model_dir),
                           policy_step=policy_step)
    if kind == "openai":
        engine = ctor.from_options(opts, where=field)
    else:  # scripted
        if opts:
            raise ConfigError(f"{field}: the scripted teacher takes none (got {sorted(opts)})")
        kwargs = dict(teacher or {})
        if max_turns is not None:
            kwargs["max_turns"] = max_turns
        engine = ctor(**kwargs)
    if policy_version:
        engine.policy_version = policy_version
    return engine
