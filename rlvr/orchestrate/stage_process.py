"""One DVC stage as a subprocess: `dvc repro --single-item <stage>` with the project's
interpreter, its output streamed line by line, and its exit read as the stage's own verdict
(`StageFailed`, not retried) or an infrastructure failure (`InfrastructureFailure`: the
process could not start, a signal killed it, another DVC process held the lock), which an
orchestrator may retry."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

from rlvr.errors import RlvrError
from rlvr.tracking.pipeline import PIPELINE_ENV  # one MLflow parent run per value


class StageFailed(RlvrError):
    """A stage ran and exited non-zero: its own verdict on its input or code; not retried."""

    def __init__(self, stage: str, exit_code: int, detail: str = ""):
        self.stage, self.exit_code = stage, exit_code
        super().__init__(f"stage '{stage}' failed with exit code {exit_code}"
                         + (f": {detail}" if detail else ""))


class InfrastructureFailure(RuntimeError):
    """The stage could not run to a verdict (launch error, killed by a signal, repo lock
    held): the only failure the stage task retries."""

    def __init__(self, stage: str, reason: str):
        self.stage, self.reason = stage, reason
        super().__init__(f"stage '{stage}': {reason}")


_EXITED = re.compile(r"failed to run: .*, exited with (-?\d+)\s*$")
_LOCKED = ("Unable to acquire lock", "is busy, it is being blocked by")


def dvc_command(*args: str) -> list[str]:
    """This interpreter's DVC, whatever `dvc` PATH would find."""
    return [sys.executable, "-m", "dvc", *args]


def stage_env(pipeline_key: str | None) -> dict[str, str]:
    """The stage process's environment: the venv's bin first on PATH (dvc.yaml commands call
    `python`), the MLflow pipeline key, no progress bars in the log."""
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
    env.setdefault("RLVR_PROGRESS", "0")
    if pipeline_key:
        env.setdefault(PIPELINE_ENV, pipeline_key)
    return env


def killed_by_signal(status: int | None) -> int | None:
    """The signal that ended a stage, from the status DVC reports: -N when DVC's shell exec'd
    the command (bash with SHELL set), 128+N when a shell (e.g. dash as /bin/sh, used when SHELL
    is unset) ran it as a child and reported the death as its own exit status."""
    if status is None:
        return None
    if status < 0:
        return -status
    if 128 < status <= 128 + max(signal.valid_signals()):
        return status - 128
    return None


def run_streamed(stage: str, argv: list[str], root: Path, env: dict[str, str],
                 emit: Callable[[str], None]) -> list[str]:
    """Run `argv` in `root`, passing each output line (stdout and stderr, merged in order) to
    `emit` as it is printed; the lines. Non-zero exit -> StageFailed / InfrastructureFailure
    (module docstring)."""
    try:
        proc = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                text=True, errors="replace", bufsize=1)
    except OSError as exc:
        raise InfrastructureFailure(stage, f"cannot launch {argv[0]}: {exc}") from None
    lines = []
    with proc:
        for line in proc.stdout:
            line = line.rstrip("\n")
            lines.append(line)
            emit(line)
    code = proc.returncode
    if code == 0:
        return lines
    if code < 0:
        raise InfrastructureFailure(stage, f"dvc was killed by signal {-code}")
    status = None
    for line in reversed(lines):
        found = _EXITED.search(line)
        if found:
            status = int(found.group(1))
            break
    signal_number = killed_by_signal(status)
    if signal_number is not None:
        raise InfrastructureFailure(stage, f"the stage process was killed by signal {signal_number}")
    if any(marker in line for line in lines for marker in _LOCKED):
        raise InfrastructureFailure(stage, "another DVC process holds the repository lock")
    if status is None:  # DVC itself refused (bad dvc.yaml, missing dependency, ...)
        errors = [ln.strip() for ln in lines if ln.startswith("ERROR")]
        raise StageFailed(stage, code, f"dvc: {errors[-1] if errors else 'no error line'}")
    # The stage's last words, not DVC's ERROR line (which repeats the whole command).
    last = next((ln.strip() for ln in reversed(lines)
                 if ln.strip() and not ln.startswith("ERROR")), "")
    raise StageFailed(stage, status, last)
