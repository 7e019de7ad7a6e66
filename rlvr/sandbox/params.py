"""The `sandbox:` section of params.yaml, shared by every stage that runs untrusted code."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rlvr.sandbox.base import Limits


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
