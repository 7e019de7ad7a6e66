"""Protocol conformance: every sandbox backend gives the same guarantees (rlvr/sandbox/base.py).

Each test runs once per place through the `sandbox_place` fixture: bwrap, docker on this
machine's daemon, and docker on a daemon reachable only over TCP with mutual TLS (the copy
transport: no shared file system; what it cannot give is refused by name). The
verification enclave and the policy workspace are written against the protocol only, so a
backend that passes here can replace another without changing a verdict — and one that fails
here would let policy code reach the network, the hidden tests, or the reward.

The probes are small Python programs run with `sandbox.python`; each prints a JSON report that
the test checks, so a failure shows what the sandbox really allowed. Bombs are bounded (a fork
bomb stops at 200 children, a memory bomb at 2 GiB) so that a broken backend fails the test
instead of taking the machine down.
"""
from __future__ import annotations

import json
import os
import socket
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from conftest import remote_docker_options
from rlvr.errors import SandboxUnavailable
from rlvr.sandbox import Limits, Mount, Sandbox, ServerHandle, get_sandbox

REPO_ROOT = Path(__file__).resolve().parents[1]
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}

_sandboxes: dict[str, Sandbox] = {}


@pytest.fixture
def sandbox(sandbox_place) -> Sandbox:
    """One instance per backend (and place) for the whole session (construction probes the
    backend, and the docker one builds or finds its image on first use). `docker-tls`: the
    docker backend on a daemon reachable only over TCP+TLS, through the copy transport."""
    if sandbox_place not in _sandboxes:
        _sandboxes[sandbox_place] = (get_sandbox("docker", **remote_docker_options())
                                     if sandbox_place == "docker-tls"
                                     else get_sandbox(sandbox_place))
    return _sandboxes[sandbox_place]


def py(sandbox: Sandbox, code: str, **kwargs):
    """Run a Python snippet in the sandbox (dedented), with ENV unless `env` is given."""
    kwargs.setdefault("env", ENV)
    return sandbox.run([sandbox.python, "-c", textwrap.dedent(code)], **kwargs)


def copies(sandbox) -> bool:
    """A place that shares no file system with this machine (the docker backend's copy
    transport): mounts are copied in, writable ones come back when a run ends."""
    return getattr(sandbox, "transport", "bind") == "copy"


def report(result) -> dict:
    """The JSON report a probe printed on its last stdout line."""
    assert result.stdout.strip(), f"probe printed nothing; stderr: {result.stderr[-2000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_backend_satisfies_the_protocol(sandbox):
    assert isinstance(sandbox, Sandbox)
    assert sandbox.python.startswith("/")


def test_exit_code_stdout_and_stderr(sandbox):
    r = py(sandbox, """
        import sys
        print("to stdout")
        print("to stderr", file=sys.stderr)
        sys.exit(3)
    """)
    assert r.exit_code == 3
    assert not r.ok and not r.timed_out
    assert r.stdout == "to stdout\n"
    assert r.stderr == "to stderr\n"
    ok = sandbox.run(["/bin/sh", "-c", "exit 0"], env=ENV)
    assert ok.ok and ok.exit_code == 0


def test_stdin_is_delivered_then_closed(sandbox):
    r = py(sandbox, "import sys; data = sys.stdin.read(); print(len(data), data.upper())",
           stdin=b"hello sandbox")
    assert r.ok, r.stderr
    assert r.stdout == "13 HELLO SANDBOX\n"


def test_stdin_absent_reads_eof(sandbox):
    r = py(sandbox, "import sys; print(repr(sys.stdin.read()))")
    assert r.ok, r.stderr
    assert r.stdout == "''\n"


def test_interpreter_has_pytest_and_runs_a_suite(sandbox, tmp_path):
    """The enclave's contract: `sandbox.python -m pytest` works on a read-only tree."""
    tmp_path = tree(tmp_path, "suite")
    (tmp_path / "test_x.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n\n"
                                        "def test_bad():\n    assert 1 + 1 == 3\n")
    args = [sandbox.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "/src/test_x.py"]
    r = sandbox.run(args, mounts=[Mount(tmp_path, "/src")], cwd="/src", env=ENV)
    assert r.exit_code == 1, r.stdout + r.stderr
    assert "1 failed, 1 passed" in r.stdout
    r = sandbox.run(args + ["-k", "ok"], mounts=[Mount(tmp_path, "/src")], cwd="/src", env=ENV)
    assert r.ok, r.stdout + r.stderr


def test_no_network(sandbox):
    """Neither the outside world nor a service on the host's loopback is reachable."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        r = py(sandbox, f"""
            import json, socket
            out = {{}}
            for name, addr in {{"internet": ("1.1.1.1", 53), "host_loopback": ("127.0.0.1", {port})}}.items():
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.settimeout(3)
                try:
                    s.connect(addr)
                    out[name] = "connected"
                except OSError as exc:
                    out[name] = type(exc).__name__
                finally:
                    s.close()
            out["interfaces"] = sorted(n for _, n in socket.if_nameindex())
            print(json.dumps(out))
        """)
    finally:
        listener.close()
    rep = report(r)
    assert rep["internet"] != "connected"
    assert rep["host_loopback"] != "connected"
    assert set(rep["interfaces"]) <= {"lo"}


def tree(tmp_path: Path, name: str) -> Path:
    """A fresh directory with ordinary permissions (0755) under tmp_path."""
    path = tmp_path / name
    path.mkdir(mode=0o755)
    os.chmod(path, 0o755)
    return path


def test_private_read_only_mount_is_readable(sandbox, tmp_path):
    """A mount is *visible*: a caller's private directory (mkdtemp makes them 0700, files
    written with mode 0600) must be readable inside, whatever uid the sandbox runs as."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    secret = private / "hidden_test.py"
    secret.write_text("content")
    os.chmod(secret, 0o600)
    r = py(sandbox, "print(open('/ro/hidden_test.py').read())", mounts=[Mount(private, "/ro")])
    assert r.ok, r.stderr
    assert r.stdout == "content\n"


def test_tmp_is_writable_and_private(sandbox):
    """/tmp is scratch space (pytest needs it for output capture) and is the sandbox's own:
    a file made there does not appear in the host's /tmp."""
    name = f"rlvr-sandbox-tmp-probe-{uuid.uuid4().hex}"
    r = py(sandbox, f"""
        import tempfile
        open("/tmp/{name}", "w").write("x")
        with tempfile.TemporaryFile() as f:
            f.write(b"capture")
        print("ok")
    """)
    assert r.ok, r.stderr
    assert not os.path.exists(f"/tmp/{name}")


def test_read_only_mount_cannot_be_written(sandbox, tmp_path):
    tmp_path = tree(tmp_path, "ro")
    (tmp_path / "keep.txt").write_text("pristine")
    r = py(sandbox, """
        import json, os
        out = {"read": open("/ro/keep.txt").read()}
        for name, action in [("overwrite", lambda: open("/ro/keep.txt", "w").write("x")),
                             ("create", lambda: open("/ro/new.txt", "w").write("x")),
                             ("unlink", lambda: os.unlink("/ro/keep.txt")),
                             ("chmod", lambda: os.chmod("/ro/keep.txt", 0o777)),
                             ("rename", lambda: os.rename("/ro/keep.txt", "/ro/moved.txt"))]:
            try:
                action()
                out[name] = "allowed"
            except OSError as exc:
                out[name] = type(exc).__name__
        print(json.dumps(out))
    """, mounts=[Mount(tmp_path, "/ro")])
    rep = report(r)
    assert rep.pop("read") == "pristine"
    assert all(v != "allowed" for v in rep.values()), rep
    assert sorted(os.listdir(tmp_path)) == ["keep.txt"]
    assert (tmp_path / "keep.txt").read_text() == "pristine"


def test_writable_mount_writes_reach_the_host(sandbox, tmp_path):
    tmp_path = tree(tmp_path, "rw")
    (tmp_path / "old.txt").write_text("old")
    r = py(sandbox, """
        import os
        open("/rw/new.txt", "w").write("written inside")
        open("/rw/old.txt", "a").write("+more")
        os.mkdir("/rw/sub")
        print("done")
    """, mounts=[Mount(tmp_path, "/rw", writable=True)])
    assert r.ok, r.stderr
    assert (tmp_path / "new.txt").read_text() == "written inside"
    assert (tmp_path / "old.txt").read_text() == "old+more"
    assert (tmp_path / "sub").is_dir()


def test_read_only_tree_nested_in_a_writable_one(sandbox, tmp_path):
    """The workspace layout: the repo is writable, its public tests are a read-only mount
    over repo/tests — policy code can edit the source but not the tests."""
    repo, tests = tree(tmp_path, "repo"), tree(tmp_path, "pristine_tests")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_a.py").write_text("original")
    (tests / "test_a.py").write_text("original")
    r = py(sandbox, """
        import json
        out = {}
        open("/work/repo/mod.py", "w").write("x = 1\\n")
        out["source_write"] = "ok"
        try:
            open("/work/repo/tests/test_a.py", "w").write("def test(): pass")
            out["test_write"] = "allowed"
        except OSError as exc:
            out["test_write"] = type(exc).__name__
        print(json.dumps(out))
    """, mounts=[Mount(repo, "/work/repo", writable=True), Mount(tests, "/work/repo/tests")],
        cwd="/work/repo")
    rep = report(r)
    assert rep == {"source_write": "ok", "test_write": rep["test_write"]}
    assert rep["test_write"] != "allowed"
    assert (repo / "mod.py").read_text() == "x = 1\n"
    assert (tests / "test_a.py").read_text() == "original"


def test_single_file_mount(sandbox, tmp_path):
    """A file can be mounted on its own (e.g. a runner script), read-only, inside the default
    working directory."""
    script = tree(tmp_path, "code") / "probe.py"
    script.write_text("print('from a mounted file')\n")
    if copies(sandbox):  # a volume is a directory: refused by name, before any container
        with pytest.raises(ValueError, match="copy transport .* mounts directories only"):
            sandbox.run([sandbox.python, "/work/probe.py"], mounts=[Mount(script, "/work/probe.py")])
        return
    r = sandbox.run([sandbox.python, "/work/probe.py"], mounts=[Mount(script, "/work/probe.py")],
                    env=ENV)
    assert r.ok, r.stderr
    assert r.stdout == "from a mounted file\n"
    w = py(sandbox, "open('/work/probe.py', 'w').write('x')", mounts=[Mount(script, "/work/probe.py")])
    assert not w.ok
    assert script.read_text() == "print('from a mounted file')\n"


def test_unmounted_host_paths_are_invisible(sandbox, tmp_path):
    """Only what is mounted is visible: not the repo's data/ (every task's hidden tests), not
    a file next to a mounted dir, not a marker dropped in the host user's home."""
    mounted = tree(tmp_path, "mounted")
    sibling = tmp_path / f"secret-{uuid.uuid4().hex}.txt"
    sibling.write_text("hidden")
    home_marker = Path.home() / f".rlvr-sandbox-probe-{uuid.uuid4().hex}"
    try:
        home_marker.write_text("hidden")
    except OSError:
        home_marker = None
    probes = [str(REPO_ROOT / "data"), str(sibling), str(tmp_path), str(REPO_ROOT / "tests")]
    if home_marker is not None:
        probes.append(str(home_marker))
    try:
        r = py(sandbox, f"""
            import json, os
            print(json.dumps({{p: os.path.exists(p) for p in {probes!r}}}))
        """, mounts=[Mount(mounted, "/mnt/in")])
    finally:
        if home_marker is not None:
            home_marker.unlink()
    rep = report(r)
    assert not any(rep.values()), rep


def test_cwd_is_honoured(sandbox, tmp_path):
    tmp_path = tree(tmp_path, "job")
    r = py(sandbox, "import os; print(os.getcwd())", mounts=[Mount(tmp_path, "/job")], cwd="/job")
    assert r.ok, r.stderr
    assert r.stdout.strip() == "/job"


ENV_PROBE = """
    import json
    raw = open("/proc/self/environ", "rb").read().split(b"\\0")
    print(json.dumps(dict(kv.decode().split("=", 1) for kv in raw if kv)))
"""


def test_no_host_environment_leaks_in(sandbox, monkeypatch):
    """Whatever this process's environment holds (a PATH trick, PYTHONPATH, VIRTUAL_ENV, a
    secret), none of it reaches the sandbox — with env=None or with an explicit env. The
    initial environment is read from /proc, i.e. before Python's own locale coercion."""
    probes = {
        "RLVR_SANDBOX_LEAK_PROBE": "leaked-secret",
        "PYTHONPATH": "/host-pythonpath-probe",
        "VIRTUAL_ENV": "/host-venv-probe",
        "HOME": "/host-home-probe",
        "PATH": "/host-path-probe:" + os.environ.get("PATH", ""),
        "PYTHONSTARTUP": "/host-startup-probe.py",
    }
    for key, value in probes.items():
        monkeypatch.setenv(key, value)
    for env in (None, {"FOO": "bar"}):
        seen = report(py(sandbox, ENV_PROBE, env=env))
        assert "RLVR_SANDBOX_LEAK_PROBE" not in seen
        assert not any("probe" in value for value in seen.values()), seen


def test_passed_environment_is_applied_verbatim(sandbox):
    """Every passed variable arrives with its exact value and wins over the backend's
    defaults (PATH, HOME); anything else present is a fixed backend default, not the host's."""
    env = {"FOO": "bar baz", "PATH": "/custom/bin:/usr/bin:/bin", "HOME": "/work", "EMPTY": ""}
    seen = report(py(sandbox, ENV_PROBE, env=env))
    assert {k: seen.get(k) for k in env} == env
    # The interpreter path is absolute: a sandbox works with no PATH lookup involved at all.
    r = py(sandbox, "print('ran')", env={"PATH": "/nonexistent"})
    assert r.ok and r.stdout == "ran\n", r.stderr


def test_wall_timeout_kills_the_whole_process_tree(sandbox, tmp_path):
    """A detached grandchild that ignores SIGTERM/SIGHUP and keeps writing a heartbeat must
    die with the run: once `run` returns, the heartbeat file stops growing."""
    tmp_path = tree(tmp_path, "hb")
    beat = tmp_path / "beat"
    beat.write_text("")
    r = py(sandbox, """
        import os, signal, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                signal.signal(signal.SIGHUP, signal.SIG_IGN)
                while True:
                    with open("/hb/beat", "a") as f:
                        f.write(".")
                    time.sleep(0.02)
            os._exit(0)
        print("started", flush=True)
        while True:
            pass
    """, mounts=[Mount(tmp_path, "/hb", writable=True)], limits=Limits(wall_seconds=3))
    assert r.timed_out
    assert not r.ok
    assert "started" in r.stdout  # output written before the kill is kept
    size = beat.stat().st_size
    assert size > 0, "the grandchild never ran; the probe is broken"
    time.sleep(0.5)
    assert beat.stat().st_size == size, "a process survived the timeout"


def test_timeout_applies_after_the_output_is_closed(sandbox):
    """A process that closes stdout/stderr and keeps running must still be stopped by the
    wall clock (end of output is not end of process)."""
    r = py(sandbox, """
        import os
        print("closing", flush=True)
        os.close(1)
        os.close(2)
        while True:
            pass
    """, limits=Limits(wall_seconds=2))
    assert r.timed_out
    assert not r.ok
    assert r.stdout == "closing\n"


def test_memory_limit_stops_a_memory_bomb(sandbox):
    r = py(sandbox, """
        chunks = []
        for _ in range(32):
            chunks.append(b"x" * (64 << 20))  # written, so really resident
        print("survived", sum(map(len, chunks)))
    """, limits=Limits(memory_bytes=256 << 20, wall_seconds=60))
    assert not r.timed_out, "the memory limit, not the wall clock, must stop it"
    assert not r.ok
    assert "survived" not in r.stdout


def test_process_limit_stops_a_fork_bomb(sandbox):
    """At most 200 children, each blocked on a pipe until the parent is done counting, so a
    backend without a process limit fails this test instead of the machine."""
    r = py(sandbox, """
        import json, os
        r, w = os.pipe()
        children, error = [], None
        for _ in range(200):
            try:
                pid = os.fork()
            except OSError as exc:
                error = type(exc).__name__
                break
            if pid == 0:
                os.close(w)
                os.read(r, 1)
                os._exit(0)
            children.append(pid)
        os.close(w)
        for pid in children:
            os.waitpid(pid, 0)
        print(json.dumps({"forked": len(children), "error": error}))
    """, limits=Limits(max_processes=32, wall_seconds=60))
    rep = report(r)
    assert rep["error"] is not None, rep
    assert rep["forked"] < 32, rep


def test_output_is_capped_and_flagged(sandbox):
    r = py(sandbox, """
        import sys
        sys.stdout.write("a" * (1 << 20))
        sys.stdout.flush()
        sys.stderr.write("short")
    """, limits=Limits(output_bytes=4096))
    assert r.ok, r.stderr
    assert r.stdout_truncated
    assert 0 < len(r.stdout.encode()) <= 4096
    assert set(r.stdout) == {"a"}
    assert not r.stderr_truncated
    assert r.stderr == "short"


def test_rlimits_on_cpu_and_file_size(sandbox, tmp_path):
    tmp_path = tree(tmp_path, "out")
    r = py(sandbox, """
        import json, resource
        print(json.dumps({name: resource.getrlimit(getattr(resource, name))[0]
                          for name in ("RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_CORE")}))
    """, limits=Limits(cpu_seconds=7, max_file_bytes=1 << 20))
    rep = report(r)
    assert rep == {"RLIMIT_CPU": 7, "RLIMIT_FSIZE": 1 << 20, "RLIMIT_CORE": 0}
    big = py(sandbox, """
        with open("/out/big", "wb") as f:
            f.write(b"x" * (2 << 20))
    """, mounts=[Mount(tmp_path, "/out", writable=True)], limits=Limits(max_file_bytes=1 << 20))
    assert not big.ok
    assert (tmp_path / "big").stat().st_size <= 1 << 20


ECHO_SERVER = """
import json, os, sys, threading, time

def beat():
    with open("/hb/beat", "a") as f:
        f.write(".")

def heartbeat():
    while True:
        beat()
        time.sleep(0.02)

if os.path.isdir("/hb"):  # no heartbeat where no live writable mount can be had
    beat()  # before serving: the first beat never races the requests
    threading.Thread(target=heartbeat, daemon=True).start()
for line in sys.stdin:
    request = json.loads(line)
    sys.stdout.write(json.dumps({"echo": request, "env": os.environ.get("MARK")}) + "\\n")
    sys.stdout.flush()
"""


def test_serve_round_trip_and_close(sandbox, tmp_path):
    """The enclave's fork-server pattern: JSON lines over stdin/stdout to a long-lived
    process, its code mounted read-only; `close()` ends the process (its heartbeat stops)."""
    code, hb = tree(tmp_path, "code"), tree(tmp_path, "hb")
    (code / "server.py").write_text(ECHO_SERVER)
    (hb / "beat").write_text("")
    mounts = [Mount(code, "/runner"), Mount(hb, "/hb", writable=True)]
    if copies(sandbox):  # live writes need a shared file system: refused by name; the rest
        with pytest.raises(SandboxUnavailable, match="server's writable mount needs a file"):
            sandbox.serve([sandbox.python, "/runner/server.py"], mounts=mounts, env=ENV)
        mounts = mounts[:1]  # of the round trip holds, the end checked on the daemon
    handle = sandbox.serve([sandbox.python, "/runner/server.py"], mounts=mounts,
                           env={**ENV, "MARK": "m1"})
    try:
        assert isinstance(handle, ServerHandle)
        assert handle.alive()
        for i in range(3):
            payload = {"i": i, "text": "é" * i}
            handle.stdin.write((json.dumps(payload) + "\n").encode())
            handle.stdin.flush()
            line = handle.stdout.readline()
            assert json.loads(line) == {"echo": payload, "env": "m1"}
        assert handle.alive()
    finally:
        handle.close()
    assert not handle.alive()
    if copies(sandbox):
        assert handle.container_id not in sandbox.containers()
        return
    size = (hb / "beat").stat().st_size
    assert size > 0, "the server's heartbeat never ran; the probe is broken"
    time.sleep(0.5)
    assert (hb / "beat").stat().st_size == size, "the server survived close()"
    handle.close()  # idempotent


def test_serve_reports_a_dead_server(sandbox):
    """A server that exits on its own: alive() turns False and stdout reaches EOF."""
    handle = sandbox.serve([sandbox.python, "-c", "print('bye', flush=True)"], env=ENV)
    try:
        assert handle.stdout.readline() == b"bye\n"
        assert handle.stdout.readline() == b""
        deadline = time.monotonic() + 10
        while handle.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not handle.alive()
    finally:
        handle.close()


def test_task_env_layer_is_read_only_and_must_exist(sandbox, tmp_path):
    """A task's dependency layer (rlvr.sandbox.envs) is importable, read-only, on both
    backends; a layer that does not exist is refused before anything starts."""
    layer = tmp_path / "layer"
    (layer / "layered_mod").mkdir(parents=True)
    (layer / "layered_mod" / "__init__.py").write_text("VALUE = 7\n")
    r = py(sandbox, """
        import json, layered_mod, os
        try:
            open(os.path.join(os.path.dirname(layered_mod.__file__), "x"), "w")
            wrote = True
        except OSError:
            wrote = False
        print(json.dumps({"value": layered_mod.VALUE, "wrote": wrote, "where": layered_mod.__file__}))
    """, cwd="/tmp", task_env=layer)
    rep = report(r)
    assert rep == {"value": 7, "wrote": False,
                   "where": "/opt/rlvr/taskenv/site-packages/layered_mod/__init__.py"}
    with pytest.raises(FileNotFoundError, match="task environment does not exist"):
        py(sandbox, "pass", cwd="/tmp", task_env=tmp_path / "missing")
