"""Which Docker daemon a sandbox talks to, and over what (issue 38: remote Docker hosts).

A Docker daemon is root on its host, and whoever reaches its API can start a privileged
container there. So the address decides the transport, and the transport has rules:

* `unix://...` (or nothing: $DOCKER_HOST, then docker's default socket) — a daemon on this
  machine; its sandboxes bind this machine's paths (`transport = "bind"`).
* `tcp://host:port` — only with mutual TLS: a directory holding `ca.pem`, `cert.pem` and
  `key.pem` (docker's own layout, as `DOCKER_CERT_PATH`), given as `tls_dir` or by
  `DOCKER_TLS_VERIFY=1` + `DOCKER_CERT_PATH`. The server's certificate is verified against
  `ca.pem` and the daemon verifies ours. A `tcp://` address without them is refused.
* `ssh://user@host` — through the `ssh` client (docker's `use_ssh_client`), whose own keys
  and known_hosts authenticate both ends.

A daemon on another host cannot see this machine's files, so tcp and ssh hosts get
`transport = "copy"`: mounts travel into Docker volumes as tar archives and writable ones
come back after each run (rlvr/sandbox/docker_copy.py).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from rlvr.errors import ConfigError

Transport = Literal["bind", "copy"]
TLS_FILES = ("ca.pem", "cert.pem", "key.pem")
MIN_API = "1.24"  # the docker SDK's oldest API version


def effective_host(docker_host: str | None) -> str:
    """The address a client for `docker_host` talks to ("" = docker's default socket)."""
    return docker_host or os.environ.get("DOCKER_HOST", "")


def tls_material(tls_dir: str | Path | None, where: str) -> tuple[str, str, str]:
    """(ca, cert, key) paths of a TLS directory, or a ConfigError naming `where` and what is
    missing. Without `tls_dir`, DOCKER_TLS_VERIFY=1 + DOCKER_CERT_PATH name one."""
    if not tls_dir and os.environ.get("DOCKER_TLS_VERIFY") in ("1", "true", "yes"):
        tls_dir = os.environ.get("DOCKER_CERT_PATH") or str(Path.home() / ".docker")
    if not tls_dir:
        raise ConfigError(f"{where}: a tcp:// Docker host needs TLS (a remote daemon is root "
                          "on its host): give sandbox.docker_tls_dir (ca.pem, cert.pem, "
                          "key.pem) or DOCKER_TLS_VERIFY=1 with DOCKER_CERT_PATH")
    files = tuple(Path(tls_dir) / name for name in TLS_FILES)
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise ConfigError(f"{where}: TLS directory {tls_dir} lacks {', '.join(missing)}")
    return tuple(str(f) for f in files)  # type: ignore[return-value]


def transport_of(docker_host: str | None, where: str = "sandbox.docker_hosts") -> Transport:
    """How mounts reach a daemon at `docker_host`: bind (this machine) or copy (another)."""
    url = effective_host(docker_host)
    if not url or url.startswith("unix://"):
        return "bind"
    if url.startswith(("tcp://", "ssh://")):
        return "copy"
    raise ConfigError(f"{where}: {url!r} is not a Docker host address (unix://, tcp:// with "
                      "TLS, or ssh://)")


def check_address(docker_host: str | None, tls_dir: str | Path | None = None,
                  where: str = "sandbox.docker_hosts") -> None:
    """Refuse an address the rules above refuse (ConfigError), before any connection."""
    url = effective_host(docker_host)
    transport_of(url, where)
    if url.startswith("tcp://"):
        tls_material(tls_dir, f"{where} {url}")


def docker_client(docker_host: str | None, tls_dir: str | Path | None = None, *,
                  timeout: int = 120, where: str = "sandbox.docker_hosts"):
    """A docker SDK client for `docker_host` under the rules of the module docstring (not
    yet contacted: the caller pings it)."""
    import docker
    import docker.tls

    url = effective_host(docker_host)
    transport_of(url, where)
    if not url:
        return docker.from_env(timeout=timeout)
    if url.startswith("tcp://"):
        ca, cert, key = tls_material(tls_dir, f"{where} {url}")
        tls = docker.tls.TLSConfig(client_cert=(cert, key), ca_cert=ca, verify=True)
        # requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE replace a session's own CA
        # (psf/requests#3829), which the SDK's version probe would hit at construction: so
        # construct at the oldest API, stop that, then ask the daemon for its version
        client = docker.DockerClient(base_url=url, tls=tls, timeout=timeout, version=MIN_API)
        client.api.trust_env = False
        client.api._version = client.api.version(api_version=False)["ApiVersion"]
        return client
    if url.startswith("ssh://"):
        return docker.DockerClient(base_url=url, use_ssh_client=True, timeout=timeout)
    return docker.DockerClient(base_url=url, timeout=timeout)
