"""The `sandbox:` section of params.yaml, shared by every stage that runs untrusted code."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rlvr.errors import ConfigError
from rlvr.sandbox.base import Limits
from rlvr.sandbox.docker_client import check_address  # the docker SDK itself loads only for a client


@dataclass(frozen=True)
class LimitParams:
    # the budget is CPU time (rlvr.sandbox.base.WAIT_FACTOR: why); wall time stops a run
    # that waits, at WAIT_FACTOR x the budget
    wall_seconds: float = 60.0
    cpu_seconds: int = 20
    memory_mb: int = 1024
    max_processes: int = 64
    max_file_mb: int = 16
    output_kb: int = 64

    def to_limits(self) -> Limits:
        return Limits(wall_seconds=self.wall_seconds, cpu_seconds=self.cpu_seconds,
                      memory_bytes=self.memory_mb << 20, max_processes=self.max_processes,
                      max_file_bytes=self.max_file_mb << 20, output_bytes=self.output_kb << 10)


@dataclass(frozen=True)
class SandboxParams:
    backend: Literal["bwrap", "docker"] = "bwrap"
    workers: int = 2
    limits: LimitParams = field(default_factory=LimitParams)
    # docker: the daemons sandboxes are spread over (the enclave's workers and the policy's
    # tool sandboxes alike); () = this machine's ($DOCKER_HOST, else docker's socket). Each
    # is unix://, tcp:// (mutual TLS, see docker_tls_dir: a daemon is root on its host, so
    # plain tcp is refused) or ssh://; a host other than unix:// shares no file system, so
    # mounts are copied (rlvr/sandbox/docker_copy.py)
    docker_hosts: tuple[str, ...] = ()
    docker_tls_dir: str = ""  # ca.pem, cert.pem, key.pem for the tcp:// hosts ("" = $DOCKER_CERT_PATH)

    def __post_init__(self) -> None:
        """Refuse an address by name before any work (nothing is contacted here)."""
        if self.docker_hosts and self.backend != "docker":
            raise ConfigError(f"sandbox.docker_hosts: set for backend {self.backend!r}; the "
                              "hosts are Docker daemons (backend: docker)")
        if len(set(self.docker_hosts)) != len(self.docker_hosts):
            raise ConfigError(f"sandbox.docker_hosts: a host is listed twice {list(self.docker_hosts)}")
        for i, host in enumerate(self.docker_hosts):
            check_address(host, self.docker_tls_dir or None, where=f"sandbox.docker_hosts[{i}]")

    def options(self) -> dict:
        """`get_sandbox(self.backend, **options)`: where the backend's sandboxes run."""
        if not self.docker_hosts:
            return {}
        return {"docker_hosts": list(self.docker_hosts), "tls_dir": self.docker_tls_dir or None}
