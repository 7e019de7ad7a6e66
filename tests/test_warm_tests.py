"""The warm run_tests path (rlvr.agent.warm_tests): the cold path's observation byte for
byte, at least the cold path's isolation, and a server that lives exactly one episode."""
from __future__ import annotations

import signal
from pathlib import Path

import pytest

from agentkit import ReplayEngine, assert_warm_server_gone, count_task, tiny_policy_dir
from rlvr.agent import warm_tests
from rlvr.agent.executor import ToolExecutor
from rlvr.agent.tools import ToolCall, format_tool_call
from rlvr.agent.workspace import Workspace
from rlvr.authoring.authored import discover, load_task_dir

TASKS_DIR = Path(__file__).resolve().parent.parent / "data" / "tasks"


def seed_tasks():
    return [load_task_dir(d) for d in discover(TASKS_DIR)]


def run_tests(ex: ToolExecutor, path: str | None = None):
    return ex.execute(ToolCall("run_tests", {} if path is None else {"path": path}))


def pair(ws, sandbox, timeout=20.0):
    cold = ToolExecutor(ws, sandbox, timeout_s=timeout, observation_cap=100_000)
    warm = ToolExecutor(ws, sandbox, timeout_s=timeout, observation_cap=100_000, warm=True)
    return cold, warm


def same(cold: ToolExecutor, warm: ToolExecutor, path: str | None = None):
    """Run both paths on the workspace as it is now; they must agree byte for byte."""
    a, b = run_tests(cold, path), run_tests(warm, path)
    assert (b.status, b.observation, b.detail) == (a.status, a.observation, a.detail)
    return a


def source_file(task) -> str:
    """The task's first non-test Python module that has code in it."""
    public = {p.split("/", 1)[0] for p in task.public_tests}
    return next(p for p, text in sorted(task.repo_files.items())
                if p.endswith(".py") and p.split("/", 1)[0] not in public
                and "def " in text)


@pytest.fixture(scope="module")
def tasks():
    found = seed_tasks()
    assert len(found) >= 3, "data/tasks holds the seed families' authored tasks"
    return found


# ---- identical observations ------------------------------------------------------------------
def test_warm_matches_cold_on_every_seed_task(tasks, tmp_path, bwrap_sandbox):
    for task in tasks:
        with Workspace.create(task, tmp_path) as ws:
            cold, warm = pair(ws, bwrap_sandbox)
            with warm:
                first = same(cold, warm)
                assert "[pytest exit code 1]" in first.observation  # the bug shows
                same(cold, warm)  # the second warm run comes from the same server
                assert warm.runs == {"warm": 2, "cold": 0}, warm.warm_off


def test_warm_matches_cold_through_edits_and_crashes(tasks, tmp_path, bwrap_sandbox):
    for task in tasks[:2]:
        src = source_file(task)
        original = task.repo_files[src]
        with Workspace.create(task, tmp_path) as ws:
            cold, warm = pair(ws, bwrap_sandbox, timeout=2.0)
            with warm:
                failed = [ln.split()[1] for ln in same(cold, warm).observation.splitlines()
                          if ln.startswith("FAILED ")]
                same(cold, warm, failed[0].split(" ")[0])  # one node id
                same(cold, warm, task.public_tests[0])  # one file
                edits = {
                    "syntax error": original + "\ndef broken(:\n    pass\n",
                    "sys.exit at import": "import sys\nsys.exit(3)\n" + original,
                    "os._exit at import": "import os\nos._exit(4)\n" + original,
                    "prints then SIGKILLs itself": (
                        "import os, signal, sys\nprint('bye', flush=True)\n"
                        "sys.stderr.write('err line\\n')\n"
                        "os.kill(os.getpid(), signal.SIGKILL)\n" + original),
                    # a busy loop times out on both paths (the CPU limit sits above the
                    # tool timeout: no race of SIGXCPU against the wall clock), as does a
                    # loop that waits
                    "busy loop": "while True:\n    pass\n" + original,
                    "infinite loop": "import time\nwhile True:\n    time.sleep(0.05)\n"
                                     + original,
                    "atexit output": ("import atexit\natexit.register(lambda: print('at exit'))\n"
                                      + original),
                    # what a child still does after pytest returns (it then leaves with
                    # os._exit): join non-daemon threads, atexit handlers in order, a failing
                    # one reported, weakref finalizers, a write without newline flushed
                    "thread outlives pytest": (
                        "import threading, time\n"
                        "def _late():\n    time.sleep(0.2)\n    print('thread done')\n"
                        "threading.Thread(target=_late).start()\n" + original),
                    "failing atexit handler": (
                        "import atexit, sys\n"
                        "def _boom():\n    raise RuntimeError('atexit boom')\n"
                        "atexit.register(lambda: sys.stdout.write('no newline'))\n"
                        "atexit.register(_boom)\n" + original),
                    "weakref finalizer at exit": (
                        "import weakref\nclass _Held:\n    pass\n_held = _Held()\n"
                        "weakref.finalize(_held, print, 'finalized at exit')\n" + original),
                }
                for name, text in edits.items():
                    ws.write_text(src, text)
                    got = same(cold, warm)
                    if name in ("busy loop", "infinite loop"):
                        assert got.status == "timeout", (name, got.observation)
                    if name == "prints then SIGKILLs itself":
                        assert "[killed by signal 9" in got.observation
                    if name == "os._exit at import":
                        assert got.observation.endswith("[pytest exit code 4]")
                    if name == "thread outlives pytest":
                        assert "thread done" in got.observation
                    if name == "failing atexit handler":
                        assert "no newline" in got.observation
                        assert "RuntimeError: atexit boom" in got.observation
                    if name == "weakref finalizer at exit":
                        assert "finalized at exit" in got.observation
                ws.write_text(src, original)
                same(cold, warm)
                assert warm.runs["cold"] == 0 and warm.runs["warm"] >= 13


def test_warm_matches_cold_on_every_backend(tmp_path, sandbox_backend):
    from rlvr.sandbox import get_sandbox

    with Workspace.create(count_task(), tmp_path) as ws:
        cold, warm = pair(ws, get_sandbox(sandbox_backend))
        with warm:
            same(cold, warm)
            ws.write_text("mini/core.py", ws.read_text("mini/core.py").replace("<=", "<"))
            assert "2 passed" in same(cold, warm).observation
            assert warm.runs == {"warm": 2, "cold": 0}, warm.warm_off


def test_a_repo_file_shadowing_a_preloaded_module_takes_the_cold_path(tmp_path, bwrap_sandbox):
    with Workspace.create(count_task(), tmp_path) as ws:
        cold, warm = pair(ws, bwrap_sandbox)
        with warm:
            same(cold, warm)
            (ws.repo / "difflib.py").write_text("raise ImportError('shadowed')\n")
            assert "difflib" in warm.warm_server.modules
            same(cold, warm)
            assert warm.runs == {"warm": 1, "cold": 1}
            assert warm_tests.shadowed_module(ws.repo, ["difflib"]) == "difflib.py"
            assert warm_tests.shadowed_module(ws.repo, ["nothing_like_it"]) == ""


def test_the_locate_plugin_state_does_not_leak_between_runs(tmp_path, bwrap_sandbox):
    # a failing run ranks suspicious lines; once fixed, no stale ranking may remain
    with Workspace.create(count_task(), tmp_path) as ws:
        cold, warm = pair(ws, bwrap_sandbox)
        with warm:
            assert "suspicious lines" in same(cold, warm).observation
            ws.write_text("mini/core.py", ws.read_text("mini/core.py").replace("<=", "<"))
            assert "suspicious lines" not in same(cold, warm).observation


def test_a_conftest_changing_a_builtin_plugin_module_gets_pytests_own_fixture_scan(
        tmp_path, bwrap_sandbox):
    # the server pre-scans the `_pytest.*` modules for fixtures; a run whose conftest plants
    # a fixture in one of them must see it, exactly as the cold path does
    with Workspace.create(count_task(), tmp_path) as ws:
        cold, warm = pair(ws, bwrap_sandbox)
        with warm:
            same(cold, warm)
            (ws.repo / "conftest.py").write_text(
                "import pytest, _pytest.tmpdir\n"
                "@pytest.fixture(autouse=True)\n"
                "def planted():\n"
                "    raise RuntimeError('planted fixture ran')\n"
                "_pytest.tmpdir.planted = planted\n")
            assert "planted fixture ran" in same(cold, warm).observation
            (ws.repo / "conftest.py").unlink()
            assert "planted fixture ran" not in same(cold, warm).observation
            assert warm.runs == {"warm": 3, "cold": 0}, warm.warm_off


def test_repo_modules_compiled_by_the_server_import_as_cold(tmp_path, bwrap_sandbox):
    # the server compiles the repo's modules between runs; a child uses that code only for
    # the exact bytes, so an edit, a compile-time warning (emitted by the run's own compile,
    # run after run) and a module that stops compiling all read as the cold path
    with Workspace.create(count_task(), tmp_path) as ws:
        cold, warm = pair(ws, bwrap_sandbox)
        original = ws.read_text("mini/core.py")
        with warm:
            same(cold, warm)
            ws.write_text("mini/core.py", original.replace("<=", "<"))
            assert "2 passed" in same(cold, warm).observation
            ws.write_text("mini/core.py", 'PATTERN = "\\d+"\nCHECK = 1 is 1\n' + original)
            for _ in range(2):  # the second run's server has compiled these very bytes
                got = same(cold, warm)
                assert "invalid escape sequence" in got.observation
            ws.write_text("mini/core.py", original + "\ndef broken(:\n")
            same(cold, warm)
            assert "SyntaxError" in same(cold, warm).observation
            assert warm.runs == {"warm": 6, "cold": 0}, warm.warm_off


def test_run_tests_reads_the_task_config_once_per_executor(tmp_path, bwrap_sandbox,
                                                           monkeypatch):
    # the project's pytest arguments depend on the task alone: read on the first call and
    # kept; a failure is an infra_error and is not kept, so the next call reads again
    from rlvr.agent import executor
    from rlvr.errors import ConfigError

    calls = []
    real = executor.run_tests_args

    def counted(task):
        calls.append(task.task_id)
        if len(calls) == 1:
            raise ConfigError("pyproject.toml: unreadable")
        return real(task)

    monkeypatch.setattr(executor, "run_tests_args", counted)
    with Workspace.create(count_task(), tmp_path) as ws:
        cold, warm = pair(ws, bwrap_sandbox)
        with warm:
            failed = run_tests(warm)
            assert failed.status == "infra_error"
            assert failed.detail == "ConfigError: pyproject.toml: unreadable"
            same(cold, warm)
            same(cold, warm)
            assert warm.runs == {"warm": 2, "cold": 0}, warm.warm_off
    assert calls == ["mini-count"] * 3  # warm: the failure, then once; cold: once


# ---- isolation -------------------------------------------------------------------------------
PROBE = '''
import os, signal, socket
def _try(f):
    try:
        f(); return "ok"
    except Exception as e:
        return type(e).__name__
runs = len(open("runs.txt").read()) if os.path.exists("runs.txt") else 0
with open("runs.txt", "a") as fh:
    fh.write("x")
with open(f"probe{runs}.txt", "w") as out:
    print("TMP_SEEN", os.path.exists("/tmp/left-behind"), file=out)
    open("/tmp/left-behind", "w").write("x")
    print("KILL_PARENT", _try(lambda: os.kill(os.getppid(), signal.SIGKILL)), file=out)
    print("KILL_ALL", _try(lambda: os.kill(-1, signal.SIGKILL)), file=out)
    print("WRITE_TEST", _try(lambda: open("tests/test_public.py", "a").write("x")), file=out)
    print("WRITE_TOOLS", _try(lambda: open("/opt/rlvr-agent/x.py", "w").write("x")), file=out)
    print("WRITE_ROOT", _try(lambda: open("/x.txt", "w").write("x")), file=out)
    print("GIT", sorted(os.listdir(".git")), file=out)
    print("NET", _try(lambda: socket.create_connection(("1.1.1.1", 53), timeout=1)), file=out)
    print("UID0", os.getuid() == 0, file=out)
    print("CAPS", [l.split()[1] for l in open("/proc/self/status")
                   if l.startswith(("CapInh", "CapPrm", "CapEff", "CapAmb"))], file=out)
    # the server is the uid just below the run's range (supervisor_as_uid); become it or root
    print("SETUID_SERVER", _try(lambda: os.setresuid(os.getuid() - 1, os.getuid() - 1, -1)), file=out)
    print("SETUID_ROOT", _try(lambda: os.setuid(0)), file=out)
'''


def test_policy_code_cannot_reach_the_server_or_outside_work(tmp_path, bwrap_sandbox):
    with Workspace.create(count_task(), tmp_path) as ws:
        (ws.repo / "mini" / "__init__.py").write_text(PROBE)
        with ToolExecutor(ws, bwrap_sandbox, timeout_s=20, observation_cap=100_000,
                          warm=True) as warm:
            first = run_tests(warm)
            server = warm.warm_server
            second = run_tests(warm)
            assert warm.warm_server is server and server.alive()
            assert warm.runs == {"warm": 2, "cold": 0}
            assert first.observation == second.observation
            assert "1 failed, 1 passed" in second.observation
        for n in (0, 1):
            out = dict(line.split(" ", 1) for line in
                       (ws.repo / f"probe{n}.txt").read_text().splitlines())
            assert out["TMP_SEEN"] == "False"  # /tmp is fresh per run, as in the cold path
            assert out["KILL_PARENT"] != "ok"  # the server is another uid
            assert out["WRITE_TEST"] != "ok" and out["WRITE_TOOLS"] != "ok"
            assert out["WRITE_ROOT"] != "ok"
            assert out["GIT"] == "[]" and out["NET"] != "ok" and out["UID0"] == "False"
            # a supervisor that is not uid 0 keeps its capabilities across setresuid: the
            # child must have dropped them (rlvr_warm._become), or it could become the server
            assert out["CAPS"] == str(["0000000000000000"] * 4), out["CAPS"]
            assert out["SETUID_SERVER"] != "ok" and out["SETUID_ROOT"] != "ok"
        assert (ws.repo / "tests" / "test_public.py").read_text() == \
            ws.task.repo_files["tests/test_public.py"]


# ---- lifetime and failures -------------------------------------------------------------------
def test_a_dead_server_is_an_infra_error_then_a_fresh_server(tmp_path, bwrap_sandbox):
    with Workspace.create(count_task(), tmp_path) as ws:
        cold, warm = pair(ws, bwrap_sandbox)
        with warm:
            same(cold, warm)
            first = warm.warm_server
            first.handle.kill()
            got = run_tests(warm)
            assert got.status == "infra_error" and "not your fault" in got.observation
            assert "WarmServerError" in got.detail and warm.warm_server is None
            same(cold, warm)
            assert warm.warm_server is not None and warm.warm_server is not first
            assert not first.alive()


def test_without_a_serve_api_the_cold_path_runs(tmp_path, bwrap_sandbox):
    class RunOnly:  # a backend that can only run commands
        name, python = "run-only", bwrap_sandbox.python

        def run(self, argv, **kw):
            return bwrap_sandbox.run(argv, **kw)

    with Workspace.create(count_task(), tmp_path) as ws:
        cold, warm = pair(ws, bwrap_sandbox)
        warm.sandbox = RunOnly()
        same(cold, warm)
        assert warm.runs == {"warm": 0, "cold": 1} and "supervisor" in warm.warm_off


def test_the_server_is_gone_when_the_episode_ends(tmp_path, bwrap_sandbox, warm_servers):
    from rlvr.agent.drive import run_episode
    from rlvr.agent.episode import EpisodeConfig, EpisodeSpec
    from rlvr.agent.transcript import ChatCodec

    codec = ChatCodec.from_model_dir(tiny_policy_dir())
    actions = [format_tool_call("run_tests", {}), format_tool_call("run_tests", {}),
               format_tool_call("submit", {})]
    config = EpisodeConfig(codec=codec, sandbox=bwrap_sandbox, workspace_parent=tmp_path,
                           warm_tests=True)
    spec = EpisodeSpec(task=count_task(), group_id="g", trajectory_id="t", sample_index=0,
                       reset_seed=0)
    episode = run_episode(spec, ReplayEngine(codec, actions), config)
    assert episode.stop_reason == "submitted"
    assert [t.tool_status for t in episode.turns[:2]] == ["ok", "ok"]
    assert episode.executor.runs == {"warm": 2, "cold": 0}
    assert len(warm_servers) == 1
    assert episode.executor.warm_server is None
    assert_warm_server_gone(*warm_servers[0])


def test_reply_mapping_matches_the_backends():
    from rlvr.sandbox.base import Limits

    lim = Limits(output_bytes=4)
    base = {"stdout": "", "stderr": "", "stdout_total": 0, "stderr_total": 0, "wall": 0.1}
    killed = warm_tests.to_run_result({**base, "timed_out": False, "exited": False,
                                       "code": None, "signal": int(signal.SIGKILL)}, lim)
    assert (killed.exit_code, killed.signal) == (137, 9)  # what bwrap's reaper reports
    exited = warm_tests.to_run_result({**base, "timed_out": False, "exited": True, "code": 130,
                                       "signal": None}, lim)
    assert (exited.exit_code, exited.signal) == (130, 2)  # bwrap cannot tell them apart either
    import base64
    big = {**base, "stdout": base64.b64encode(b"abcd").decode(), "stdout_total": 10}
    capped = warm_tests.to_run_result({**big, "timed_out": True, "exited": False, "code": None,
                                       "signal": 9}, lim)
    assert capped.exit_code is None and capped.timed_out and capped.stdout == "abcd"
    assert capped.stdout_truncated and not capped.stderr_truncated
