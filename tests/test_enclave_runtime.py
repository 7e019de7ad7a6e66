"""The enclave's guarantees are argued for one CPython and one pytest (runner.py's threat
model): on any other version the server refuses to start, before it arms, with a named error."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from rlvr.enclave import core
from rlvr.enclave._inside import runner
from rlvr.errors import SandboxUnavailable, UnsupportedRuntime


def test_the_locked_runtime_is_this_one():
    """The versions the test suite runs are the locked ones (requirements/lock.txt)."""
    assert runner.runtime_refusal() is None
    assert sys.version_info[:2] == runner.LOCKED_PYTHON
    assert runner.pytest.__version__ == runner.LOCKED_PYTEST


@pytest.mark.parametrize("python, pytest_version, named", [
    ((3, 12, 1, "final", 0), runner.LOCKED_PYTEST, ["python 3.12.1"]),
    ((3, 10, 14, "final", 0), runner.LOCKED_PYTEST, ["python 3.10.14"]),
    (tuple(sys.version_info), "8.4.2", ["pytest 8.4.2"]),
    ((3, 13, 0, "final", 0), "9.3.0", ["python 3.13.0", "pytest 9.3.0"]),
])
def test_another_version_is_refused_by_name(python, pytest_version, named):
    reason = runner.runtime_refusal(python, pytest_version)
    assert reason is not None
    for part in named:
        assert part in reason
    assert "locked" in reason


def test_the_server_refuses_before_arming():
    """Run the real server script under a reported CPython 3.12: its first and only line is the
    refusal, it exits non-zero, and it never reached the point of installing its hook."""
    server = core.INSIDE_DIR / "server.py"
    code = ("import runpy, sys; sys.version_info = (3, 12, 0, 'final', 0); "
            f"runpy.run_path({str(server)!r}, run_name='__main__')")
    done = subprocess.run([sys.executable, "-s", "-c", code], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 3, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1
    reply = json.loads(lines[0])
    assert reply["ready"] is False and reply["refused"] == "unsupported_runtime"
    assert "python 3.12.0" in reply["detail"]


def test_the_host_raises_unsupported_runtime(sandbox_backend, tmp_path):
    """End to end on each backend: an enclave whose runner is locked to another pytest
    refuses to start in the real sandbox, and the host names the reason."""
    inside = tmp_path / "_inside"
    shutil.copytree(core.INSIDE_DIR, inside)
    source = (inside / "runner.py").read_text()
    (inside / "runner.py").write_text(source.replace(f'LOCKED_PYTEST = "{runner.LOCKED_PYTEST}"',
                                                     'LOCKED_PYTEST = "0.0.1"', 1))
    inside.chmod(0o755)
    for f in inside.iterdir():
        f.chmod(0o755 if f.is_dir() else 0o644)
    with core.Enclave(backend=sandbox_backend) as enclave:
        enclave.inside_dir = inside
        with pytest.raises(UnsupportedRuntime, match=r"pytest .*locked: 0\.0\.1"):
            enclave.warm_up()
    assert issubclass(UnsupportedRuntime, SandboxUnavailable)
