"""Inference engines (protocols in `rlvr.engines.base`).

`load_token_engine(kind, model_dir, **opts)` builds a policy engine by name. Backends are
imported lazily, so importing `rlvr.engines` costs nothing and a backend's heavy
dependencies load only when it is used. Other backends register here by adding a
"module:Class" entry to `TOKEN_ENGINES`.
"""
from __future__ import annotations

import importlib
from pathlib import Path

from rlvr.errors import ConfigError

TOKEN_ENGINES: dict[str, str] = {
    "torch": "rlvr.engines.torch_engine:TorchEngine",
}


def load_token_engine(kind: str, model_dir: Path | str, **opts):
    """A `TokenEngine` of backend `kind` over the HF model directory `model_dir`."""
    try:
        target = TOKEN_ENGINES[kind]
    except KeyError:
        raise ConfigError(f"engine kind {kind!r} unknown (known: {', '.join(sorted(TOKEN_ENGINES))})") from None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)(model_dir, **opts)
