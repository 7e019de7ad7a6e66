"""The sandbox protocol's guarantees (every backend via `sandbox_backend`) and the bwrap
backend's own choices (fresh unprivileged uid, supervisor mode, probing)."""
from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from rlvr.errors import SandboxUnavailable
from rlvr.sandbox import Limits, Mount, get_sandbox
from rlvr.sandbox.base import WAIT_FACTOR
from rlvr.sandbox.bwrap import BwrapSandbox

ROOT = Path(__file__).resolve().parents[1]
FAST = Limits(wall_seconds=10, cpu_seconds=10, memory_bytes=1 << 30, max_processes=32,
              max_file_bytes=4 << 20, output_bytes=4096)


@pytest.fixture(scope="module")
def sb(sandbox_backend):
    return get_sandbox(sandbox_backend)


def py(sb, code: str, **kw):
    kw.setdefault("cwd", "/tmp")
    kw.setdefault("limits", FAST)
    return sb.run([sb.python, "-c", textwrap.dedent(code)], **kw)


def test_interpreter_has_pytest_and_runs_unprivileged(sb):
    r = py(sb, "import os, pytest; print(os.getuid(), os.geteuid(), pytest.__version__)")
    assert r.exit_code == 0, r.stderr
    uid, euid, version = r.stdout.split()
    assert int(uid) != 0 and int(euid) != 0
    assert version.count(".") >= 1


def test_no_network(sb):
    r = py(sb, """
        import socket
        try:
            socket.create_connection(("1.1.1.1", 80), timeout=2)
            print("connected")
        except OSError as exc:
            print("blocked", exc.errno)
    """)
    assert r.stdout.startswith("blocked"), r.stdout + r.stderr


def test_host_files_and_repository_are_invisible(sb):
    tag = uuid.uuid4().hex
    planted = [Path.home() / f"rlvr-probe-{tag}", Path("/tmp") / f"rlvr-probe-{tag}"]
    for p in planted:
        p.write_text("host")
    try:
        probes = [str(ROOT / "data"), str(ROOT / "rlvr"), str(ROOT / "pyproject.toml"), *map(str, planted)]
        r = py(sb, f"import os, json; print(json.dumps([os.path.exists(p) for p in {probes!r}]))")
    finally:
        for p in planted:
            p.unlink()
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout) == [False] * len(probes)


def test_environment_is_explicit(sb, monkeypatch):
    monkeypatch.setenv("RLVR_HOST_SECRET", "s3cret")
    monkeypatch.setenv("PYTHONPATH", "/work/main")
    r = py(sb, "import os, json; print(json.dumps(dict(os.environ)))", env={"ONLY_THIS": "1"})
    env = json.loads(r.stdout)
    assert env["ONLY_THIS"] == "1"
    assert "RLVR_HOST_SECRET" not in env and "PYTHONPATH" not in env


def test_mounts_writable_and_read_only_layered(sb, tmp_path):
    ws = tmp_path / "ws"
    (ws / "tests").mkdir(parents=True)
    (ws / "tests" / "test_public.py").write_text("orig\n")
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "test_public.py").write_text("orig\n")
    r = sb.run(["/bin/sh", "-c", "echo new > /work/out.txt; echo x > /work/tests/test_public.py; echo rc=$?"],
               mounts=[Mount(ws, "/work", writable=True), Mount(ro, "/work/tests")], cwd="/work", limits=FAST)
    assert (ws / "out.txt").read_text() == "new\n"
    assert "rc=0" not in r.stdout  # the public test is read-only inside
    assert (ro / "test_public.py").read_text() == "orig\n"


def test_stdin_and_exit_code(sb):
    r = py(sb, "import sys; data = sys.stdin.read(); print(data.upper()); sys.exit(3)", stdin=b"hello")
    assert (r.exit_code, r.stdout.strip(), r.timed_out) == (3, "HELLO", False)


def test_output_is_capped_without_blocking(sb):
    r = py(sb, "import sys\nfor _ in range(2000): sys.stdout.write('x' * 4096)\nsys.stderr.write('e' * 100000)")
    assert r.exit_code == 0
    assert len(r.stdout) == FAST.output_bytes and r.stdout_truncated
    assert len(r.stderr) == FAST.output_bytes and r.stderr_truncated


def test_wall_timeout_kills_the_whole_tree(sb):
    marker = f"{time.time() % 1000:.6f}"
    r = sb.run(["/bin/sh", "-c", f"sleep 1{marker} & sleep 2{marker} & wait"], cwd="/tmp",
               limits=FAST.replace(wall_seconds=1.0))
    assert r.timed_out and r.exit_code is None
    time.sleep(0.5)
    leftovers = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert leftovers == []


def test_memory_limit(sb):
    """Over the limit the process fails: MemoryError under RLIMIT_AS (bwrap), or killed by
    the cgroup OOM killer (docker)."""
    r = py(sb, "x = bytearray(3 << 30)\nprint('allocated')", limits=FAST.replace(memory_bytes=512 << 20))
    assert r.exit_code != 0 and "allocated" not in r.stdout
    assert "MemoryError" in r.stderr or r.signal == 9


def test_cpu_limit(sb):
    r = py(sb, "while True: pass", limits=FAST.replace(cpu_seconds=1, wall_seconds=20))
    assert not r.timed_out and r.exit_code != 0
    assert r.wall_seconds < 15


def test_cpu_budget_cuts_a_busy_loop_and_lets_a_run_that_waits_finish(sb):
    """`Limits.cpu_budget(s)`: s CPU seconds decide (SIGXCPU), wall time is WAIT_FACTOR x s."""
    import signal

    budget = FAST.cpu_budget(1)
    assert (budget.cpu_seconds, budget.wall_seconds) == (1, WAIT_FACTOR * 1.0)
    r = py(sb, "import time; time.sleep(1.5); print('done')", limits=budget)
    assert r.ok and r.stdout.strip() == "done"
    r = py(sb, "while True: pass", limits=budget)
    assert not r.timed_out and r.signal == signal.SIGXCPU


def test_file_size_limit(sb):
    r = py(sb, """
        import signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        try:
            with open("/tmp/big", "wb") as fh:
                fh.write(b"x" * (8 << 20))
            print("wrote")
        except OSError as exc:
            print("refused", exc.errno)
    """, limits=FAST.replace(max_file_bytes=1 << 20))
    assert r.stdout.startswith("refused"), r.stdout + r.stderr


def test_process_limit_stops_a_fork_bomb(sb):
    if os.geteuid() == 0 and sb.name == "bwrap":
        pass  # bwrap drops root to a fresh uid so that RLIMIT_NPROC applies (see bwrap.py)
    r = py(sb, """
        import os, time
        n = 0
        try:
            while n < 200:
                if os.fork() == 0:
                    time.sleep(3)
                    os._exit(0)
                n += 1
        except OSError:
            pass
        print(n)
    """, limits=FAST.replace(max_processes=16))
    assert r.exit_code == 0, r.stderr
    assert int(r.stdout) < 16


def test_serve_round_trip_and_close(sb):
    server = sb.serve([sb.python, "-u", "-c",
                       "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line.upper())\n    sys.stdout.flush()"],
                      cwd="/tmp", limits=FAST)
    try:
        assert server.alive()
        for word in (b"ping\n", b"pong\n"):
            server.stdin.write(word)
            server.stdin.flush()
            assert server.stdout.readline() == word.upper()
    finally:
        server.close()
    assert not server.alive()


# ---- bwrap specifics ----------------------------------------------------------------------------
def test_missing_bwrap_is_unavailable():
    with pytest.raises(SandboxUnavailable):
        BwrapSandbox(bwrap="/nonexistent/bwrap-" + uuid.uuid4().hex)


@pytest.mark.skipif(os.geteuid() != 0, reason="the uid switch happens only when running as root")
def test_bwrap_fresh_uid_per_run_and_writable_mounts_follow(bwrap_sandbox, tmp_path):
    uids = set()
    for _ in range(3):
        r = bwrap_sandbox.run(["/bin/sh", "-c", "id -u; touch /work/f"], mounts=[Mount(tmp_path, "/work", True)],
                              cwd="/work", limits=FAST)
        assert r.exit_code == 0, r.stderr
        uids.add(int(r.stdout))
    assert len(uids) == 3 and 0 not in uids
    assert (tmp_path / "f").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="supervisor mode keeps root only when started as root")
def test_bwrap_supervisor_keeps_only_setuid_setgid(bwrap_sandbox):
    server = bwrap_sandbox.serve(["/bin/sh", "-c", "grep -E '^(Uid|CapEff|NoNewPrivs)' /proc/self/status; "
                                  "echo uids=$RLVR_SANDBOX_UIDS; read x"], cwd="/tmp", limits=FAST, supervisor=True)
    try:
        lines = [server.stdout.readline().decode() for _ in range(4)]
    finally:
        server.close()
    status = dict(line.split(":", 1) for line in lines[:3])
    assert status["Uid"].split()[0] == "0"
    assert int(status["CapEff"].strip(), 16) == (1 << 6) | (1 << 7)  # CAP_SETGID | CAP_SETUID
    assert status["NoNewPrivs"].strip() == "1"
    assert lines[3].startswith("uids=") and ":" in lines[3]


def test_bwrap_runs_the_runner_layer_not_the_pipeline_venv(bwrap_sandbox):
    """sys.prefix inside is the runner layer (rlvr.sandbox.envs); the venv rlvr runs in is not
    mounted at all, so neither its packages nor its path are visible."""
    import json
    import sys

    code = ("import json, os, sys; print(json.dumps({'prefix': sys.prefix, "
            f"'host_venv': os.path.exists({sys.prefix!r}), "
            "'site': [p for p in sys.path if 'site-packages' in p]}))")
    r = bwrap_sandbox.run([bwrap_sandbox.python, "-c", code], cwd="/tmp", limits=FAST)
    assert r.exit_code == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["prefix"] == "/opt/rlvr/venv"
    assert rep["host_venv"] is (sys.prefix == sys.base_prefix)  # only the base install is bound
    assert all(p.startswith("/opt/rlvr/venv/") for p in rep["site"]), rep["site"]


def test_bwrap_fixed_layout_makes_none_hashing_reproducible(bwrap_sandbox):
    """CPython 3.11 hashes None by address: with ASLR, a set holding None prints in a different
    order per process (the fresh-clone dvc.lock diff in a synthetic instruction). The sandbox
    turns ASLR off, so the same code prints the same repr every run, pytest's messages too."""
    if not bwrap_sandbox.fixed_layout:
        pytest.skip("this host's seccomp forbids personality(ADDR_NO_RANDOMIZE); sandboxed runs keep ASLR")
    code = "print({(1, None), (None, 3), (2, 2)}, hash(None), id(object()))"
    outputs = {bwrap_sandbox.run([bwrap_sandbox.python, "-c", code], cwd="/tmp", limits=FAST).stdout
               for _ in range(4)}
    assert len(outputs) == 1, outputs
    server = bwrap_sandbox.serve([bwrap_sandbox.python, "-c", code], cwd="/tmp", limits=FAST)
    try:
        assert server.stdout.readline().decode() in outputs
    finally:
        server.close()
