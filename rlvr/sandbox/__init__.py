"""Sandbox backends behind one protocol (see base.py): `bwrap` (default on Linux), `docker`."""
from __future__ import annotations

from rlvr.sandbox.base import Limits, Mount, RunResult, Sandbox, ServerHandle

BACKENDS = ("bwrap", "docker")


def get_sandbox(name: str = "bwrap", **options) -> Sandbox:
    """The backend called `name`; raises SandboxUnavailable when it cannot run here."""
    if name == "bwrap":
        from rlvr.sandbox.bwrap import BwrapSandbox

        return BwrapSandbox(**options)
    if name == "docker":
        from rlvr.sandbox.docker import DockerSandbox

        return DockerSandbox(**options)
    from rlvr.errors import ConfigError

    raise ConfigError(f"sandbox backend: unknown '{name}' (known: {', '.join(BACKENDS)})")


__all__ = ["BACKENDS", "Limits", "Mount", "RunResult", "Sandbox", "ServerHandle", "get_sandbox"]
