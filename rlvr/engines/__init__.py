"""Token engines (protocols in `rlvr.engines.base`) and the one factory that builds them.

`build_engine(kind, model_dir, ...)` builds the token engines that are the policy (`torch`,
`vllm`) by the name params.yaml gives them, so "engine: vllm" means the same thing in a
rollout, an evaluation and a training loop's sampler. Teachers act too, but they sit a floor
above (they speak the agent's tool-call syntax): the dispatch over every acting kind, these
and the teachers, is `rlvr.teachers.acting`, which hands token kinds to `build_engine`.

Backends are registered as "module:Class" strings in `TOKEN_ENGINES` and imported when
built: torch costs seconds to import and the vLLM client needs httpx, so importing
`rlvr.engines` costs nothing. A new backend registers here and gets a branch in
`build_engine` saying how its options map onto its constructor.
"""
from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any, Iterable, Mapping

from rlvr.config import parse
from rlvr.engines.base import check_policy_step
from rlvr.engines.model_dir import weights_fingerprint
from rlvr.errors import ConfigError

# kind -> "module:Class" of its engine
TOKEN_ENGINES: dict[str, str] = {
    "torch": "rlvr.engines.torch_engine:TorchEngine",
    "vllm": "rlvr.engines.vllm_engine:VllmEngine",
}


def check_step(policy_step: int, where: str) -> None:
    """`policy_step` is an ordinal (int >= 0), else a ConfigError naming `<where>.policy_step`."""
    try:
        check_policy_step(policy_step)
    except ValueError as exc:
        raise ConfigError(f"{where}.policy_step: {exc}") from None


def unknown_kind(kind: str, known: Iterable[str], where: str) -> ConfigError:
    """The error for an engine kind no factory registers, naming `<where>.engine`."""
    return ConfigError(f"{where}.engine: engine kind {kind!r} unknown "
                       f"(known: {', '.join(sorted(known))})")


def _resolve(kind: str, where: str):
    try:
        target = TOKEN_ENGINES[kind]
    except KeyError:
        raise unknown_kind(kind, TOKEN_ENGINES, where) from None
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
                 where: str = "rollout"):
    """The token engine of kind `kind` (`TOKEN_ENGINES`).

    * `model_dir` — the HF policy directory whose weights it samples from;
    * `policy_version` — overrides the engine's own version string (default: its weights'
      fingerprint);
    * `policy_step` — the ordinal of those weights (0 = the initial policy). Like
      `policy_version` it says which policy the caller means, so it is the caller's argument,
      never a backend option (`engine_options.policy_step` is an unknown key);
    * `options` — the backend's own settings (`<where>.engine_options`): torch: TorchEngine
      keywords; vllm: VllmEngineParams fields.

    An unknown kind or option is a ConfigError naming `<where>.engine` /
    `<where>.engine_options.<key>`.
    """
    check_step(policy_step, where)
    ctor = _resolve(kind, where)
    opts = dict(options or {})
    field = f"{where}.engine_options"
    if kind == "torch":
        _check_keywords(ctor, opts, field, skip=("policy_version", "policy_step", "policy"))
        return ctor(model_dir, policy_version=policy_version, policy_step=policy_step, **opts)
    # vllm
    # lazy: the vllm backend's module (httpx) loads only when that kind is built
    from rlvr.engines.vllm_engine import VllmEngineParams

    params = parse(VllmEngineParams, opts, field)  # options first: no server for a typo
    params.urls(field)
    return ctor.launch(model_dir, params,
                       policy_version=policy_version or weights_fingerprint(model_dir),
                       policy_step=policy_step)
