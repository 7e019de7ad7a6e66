"""Sandbox backends behind one protocol (see base.py): `bwrap` (default on Linux), `docker`."""
from __future__ import annotations

from rlvr.errors import ConfigError
from rlvr.sandbox.base import Limits, Mount, RunResult, Sandbox, ServerHandle

BACKENDS = ("bwrap", "docker")


def get_sandbox(name: str = "bwrap", **options) -> Sandbox:
    """The backend called `name`; raises SandboxUnavailable when it cannot run here.
    docker: `docker_hosts` (SandboxParams.options) spreads it over several daemons."""
    if name == "bwrap":
        # plugin boundary: a backend loads only when chosen; `Limits`/`Mount` users need neither
        from rlvr.sandbox.bwrap import BwrapSandbox

        return BwrapSandbox(**options)
    if name == "docker":
        # plugin boundary: docker's backend (requests, the image builder) loads only when chosen
        from rlvr.sandbox.docker import DockerSandbox

        hosts = list(options.pop("docker_hosts", None) or [])
        if len(hosts) > 1:
            # plugin boundary, as above: the several-daemon spread loads only when configured
            from rlvr.sandbox.docker_hosts import DockerHosts

            return DockerHosts(hosts, **options)
        if hosts:
            options["docker_host"] = hosts[0]
        return DockerSandbox(**options)
    raise ConfigError(f"sandbox backend: unknown '{name}' (known: {', '.join(BACKENDS)})")


__all__ = ["BACKENDS", "Limits", "Mount", "RunResult", "Sandbox", "ServerHandle", "get_sandbox"]
