"""The docker backend beyond the shared protocol: the offline image, the container's
privileges, and that nothing (containers, staged idmapped mounts) outlives a run or a server.

Needs a daemon (`eval "$(scripts/dockerd.sh start)"`); without one these tests skip, unless
RLVR_REQUIRE_DOCKER=1 (set by scripts/test.sh as root), which makes a missing daemon a failure.
The last test needs no daemon: it checks the error a user gets without one.
"""
from __future__ import annotations

import json
import os
import textwrap

import pytest

from rlvr.errors import SandboxUnavailable
from rlvr.sandbox import Limits, Mount, get_sandbox
from rlvr.sandbox import image as image_mod
from rlvr.sandbox.docker import DockerSandbox
from rlvr.sandbox.idmap import STAGING_PREFIX

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


@pytest.fixture(scope="module")
def docker_sandbox():
    try:
        sandbox = DockerSandbox()
        sandbox.image  # noqa: B018 - builds (or finds) the image: part of "available"
    except SandboxUnavailable as exc:
        if os.environ.get("RLVR_REQUIRE_DOCKER") == "1":
            pytest.fail(f"docker backend required but unavailable: {exc}")
        pytest.skip(f"docker sandbox unavailable here: {exc} (scripts/dockerd.sh start)")
    return sandbox


def py(sandbox, code: str, **kwargs):
    kwargs.setdefault("env", ENV)
    return sandbox.run([sandbox.python, "-c", textwrap.dedent(code)], **kwargs)


def staged_mounts() -> list[str]:
    """Idmapped mounts staged by this process (other processes may be staging their own)."""
    mine = f"{STAGING_PREFIX}{os.getpid()}-"
    with open("/proc/self/mounts") as f:
        return [line.split()[1] for line in f if mine in line]


@pytest.mark.docker
def test_image_is_imported_offline_and_cached_by_content_hash(docker_sandbox):
    client = docker_sandbox._client
    tag = docker_sandbox.image
    assert tag == image_mod.image_tag()  # the tag is the hash of what goes in
    img = client.images.get(tag)
    # Made by `docker import` from a local tarball: one layer, no registry digest.
    assert img.attrs.get("RepoDigests") in (None, [])
    assert [h.get("Comment", "") for h in img.history()] == ["Imported from -"]
    # A second build with unchanged inputs is a lookup, not a re-import.
    assert image_mod.build_image(client) == tag
    again = client.images.get(tag)
    assert again.id == img.id
    assert again.attrs["Created"] == img.attrs["Created"]


def test_content_hash_changes_with_the_contents():
    fs = image_mod.plan_rootfs()
    before = fs.content_hash()
    fs.add_data("/etc/rlvr-extra", b"one byte more")
    assert fs.content_hash() != before


@pytest.mark.docker
def test_image_interpreter_is_the_hosts_build(docker_sandbox):
    """Same CPython build and pytest version as the host (and so as bwrap): verdicts agree."""
    import sys

    import pytest as host_pytest

    r = py(docker_sandbox, """
        import json, sys, pytest
        print(json.dumps({"version": sys.version, "pytest": pytest.__version__,
                          "prefix": sys.prefix}))
    """)
    rep = json.loads(r.stdout)
    assert rep == {"version": sys.version, "pytest": host_pytest.__version__,
                   "prefix": image_mod.PREFIX}


@pytest.mark.docker
def test_runs_unprivileged(docker_sandbox):
    r = py(docker_sandbox, """
        import json, os
        status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
        print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
                          **{k: status[k].strip() for k in ("CapEff", "CapPrm", "CapBnd",
                                                             "CapAmb", "NoNewPrivs", "Seccomp")}}))
    """)
    rep = json.loads(r.stdout)
    expected_uid = 1000 if os.geteuid() == 0 else os.geteuid()
    assert rep["uid"] == expected_uid != 0
    assert rep["gid"] != 0 and 0 not in rep["groups"]
    assert rep["CapEff"] == rep["CapPrm"] == rep["CapBnd"] == rep["CapAmb"] == "0000000000000000"
    assert rep["NoNewPrivs"] == "1"
    assert rep["Seccomp"] == "2"  # docker's default seccomp filter is on


@pytest.mark.docker
def test_root_file_system_is_read_only(docker_sandbox):
    """Mounted read-only (not merely root-owned): even a file the sandbox user could open
    for writing by its mode stays unwritable; /tmp is a private tmpfs."""
    r = py(docker_sandbox, """
        import errno, json, os
        out = {"root_ro": bool(os.statvfs("/").f_flag & os.ST_RDONLY),
               "tmp_ro": bool(os.statvfs("/tmp").f_flag & os.ST_RDONLY)}
        for path in ("/etc/passwd", os.__file__, "/newfile"):
            try:
                open(path, "a").close()
                out[path] = "allowed"
            except OSError as exc:
                out[path] = errno.errorcode[exc.errno]
        print(json.dumps(out))
    """)
    rep = json.loads(r.stdout)
    assert rep.pop("root_ro") is True and rep.pop("tmp_ro") is False
    assert "allowed" not in rep.values(), rep
    assert rep["/newfile"] == "EROFS", rep


@pytest.mark.docker
def test_private_mounts_appear_owned_by_the_sandbox_user(docker_sandbox, tmp_path):
    """tmp_path is mode 0700 and root-owned: the idmapped mount must still let uid 1000 read
    a 0600 file and write into a writable mount, and what it writes is the caller's on the host."""
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir(mode=0o700)
    out.mkdir(mode=0o700)
    (src / "secret.txt").write_text("only the owner may read")
    os.chmod(src / "secret.txt", 0o600)
    r = py(docker_sandbox, """
        print(open("/src/secret.txt").read())
        open("/out/result.txt", "w").write("from the sandbox")
    """, mounts=[Mount(src, "/src"), Mount(out, "/out", writable=True)])
    assert r.ok, r.stderr
    assert r.stdout == "only the owner may read\n"
    made = out / "result.txt"
    assert made.read_text() == "from the sandbox"
    assert (made.stat().st_uid, made.stat().st_gid) == (out.stat().st_uid, out.stat().st_gid)
    assert (os.stat(src).st_mode & 0o777) == 0o700  # nothing was chmod-ed on the host


@pytest.mark.docker
def test_nothing_outlives_runs(docker_sandbox, tmp_path):
    """Containers and staged mounts are gone after a normal run, a failing one, a timeout,
    an OOM kill and an invalid mount."""
    mounts = [Mount(tmp_path, "/data", writable=True)]
    assert py(docker_sandbox, "print(1)", mounts=mounts).ok
    assert py(docker_sandbox, "raise SystemExit(2)", mounts=mounts).exit_code == 2
    assert py(docker_sandbox, "while True: pass", mounts=mounts,
              limits=Limits(wall_seconds=1)).timed_out
    oom = py(docker_sandbox, "x = [b'x' * (64 << 20) for _ in range(16)]",
             limits=Limits(memory_bytes=128 << 20))
    assert oom.resources["oom_killed"] is True
    with pytest.raises(FileNotFoundError):
        py(docker_sandbox, "print(1)", mounts=[Mount(tmp_path / "missing", "/x")])
    assert docker_sandbox.containers() == []
    assert staged_mounts() == []


@pytest.mark.docker
def test_close_removes_the_server_container(docker_sandbox, tmp_path):
    (tmp_path / "srv.py").write_text("import sys\nfor line in sys.stdin:\n    print(line.strip(), flush=True)\n")
    handle = docker_sandbox.serve([docker_sandbox.python, "/code/srv.py"],
                                  mounts=[Mount(tmp_path, "/code")], env=ENV)
    assert docker_sandbox.containers() == [handle.container_id]
    handle.stdin.write(b"ping\n")
    handle.stdin.flush()
    assert handle.stdout.readline() == b"ping\n"
    handle.close()
    assert docker_sandbox.containers() == []
    assert staged_mounts() == []


@pytest.mark.docker
def test_server_stderr_is_kept_for_diagnostics(docker_sandbox):
    handle = docker_sandbox.serve(
        [docker_sandbox.python, "-c", "import sys; sys.stderr.write('boom: bad config\\n'); sys.stderr.flush(); print('x', flush=True)"],
        env=ENV)
    try:
        assert handle.stdout.readline() == b"x\n"
        assert handle.stdout.readline() == b""
        assert "boom: bad config" in handle.stderr_tail()
    finally:
        handle.close()


SUPERVISOR = """
import json, os, sys
base, count = map(int, os.environ["RLVR_SANDBOX_UIDS"].split(":"))
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
me = {"uid": os.getuid(), "caps": status["CapEff"].strip(), "base": base, "count": count}
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.setgroups([])
    os.setgid(base + 1)
    os.setuid(base + 1)
    st = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
    os.write(w, json.dumps({"uid": os.getuid(), "caps": st["CapEff"].strip(),
                            "reads_mount": open("/code/data.txt").read()}).encode())
    os._exit(0)
os.close(w)
os.waitpid(pid, 0)
child = json.loads(os.read(r, 65536))
for line in sys.stdin:
    print(json.dumps({"server": me, "child": child}), flush=True)
"""


@pytest.mark.docker
@pytest.mark.skipif(os.geteuid() != 0, reason="supervisor mode needs rlvr to run as root")
def test_supervisor_server_can_drop_children_to_their_own_uids(docker_sandbox, tmp_path):
    """The enclave's fork-server (serve(..., supervisor=True), as on bwrap): uid 0 with only
    CAP_SETUID/CAP_SETGID and a private uid range; a child it drops has no capability left."""
    (tmp_path / "data.txt").write_text("snapshot")
    os.chmod(tmp_path, 0o755)
    handle = docker_sandbox.serve([docker_sandbox.python, "-c", SUPERVISOR],
                                  mounts=[Mount(tmp_path, "/code")], env=ENV, supervisor=True)
    try:
        handle.stdin.write(b"go\n")
        handle.stdin.flush()
        line = handle.stdout.readline()
        assert line, handle.stderr_tail()
        rep = json.loads(line)
    finally:
        handle.close()
    server, child = rep["server"], rep["child"]
    assert server["uid"] == 0
    assert int(server["caps"], 16) == (1 << 6) | (1 << 7)  # CAP_SETGID | CAP_SETUID only
    assert server["count"] > 1 and server["base"] >= 1 << 20
    assert child == {"uid": server["base"] + 1, "caps": "0000000000000000", "reads_mount": "snapshot"}


def _both_backends():
    """bwrap and docker sandboxes, or a skip naming the one that is missing."""
    out = []
    for name in ("bwrap", "docker"):
        try:
            out.append(get_sandbox(name))
        except SandboxUnavailable as exc:
            if name == "docker" and os.environ.get("RLVR_REQUIRE_DOCKER") == "1":
                pytest.fail(f"docker backend required but unavailable: {exc}")
            pytest.skip(f"{name} unavailable: {exc}")
    return out


@pytest.mark.docker
def test_backends_give_the_same_environment():
    """Same env in, same env out on both backends: the enclave's behaviour (buffering,
    locale, bytecode writing) must not depend on which one runs it."""
    probe = ("import json; raw = open('/proc/self/environ', 'rb').read().split(b'\\0'); "
             "print(json.dumps(dict(kv.decode().split('=', 1) for kv in raw if kv)))")
    seen = []
    for sandbox in _both_backends():
        for env in (None, {"FOO": "1", "PATH": "/usr/bin:/bin"}):
            r = sandbox.run([sandbox.python, "-c", probe], env=env, cwd="/tmp")
            assert r.ok, (sandbox.name, r.stderr)
            seen.append((env is None, json.loads(r.stdout)))
    bwrap_envs, docker_envs = seen[:2], seen[2:]
    assert bwrap_envs == docker_envs


@pytest.mark.docker
def test_backends_give_the_same_verdict(tmp_path):
    """The same pytest suite on both backends: same exit status, same outcome counts."""
    suite = tmp_path / "suite"
    suite.mkdir(mode=0o755)
    os.chmod(suite, 0o755)
    (suite / "test_mix.py").write_text(textwrap.dedent("""
        import os, sys, pytest

        def test_pass():
            assert sorted([3, 1, 2]) == [1, 2, 3]

        def test_fail():
            assert {"a": 1} == {"a": 2}

        @pytest.mark.parametrize("n", range(3))
        def test_param(n):
            assert n < 2

        def test_no_network():
            import socket
            with pytest.raises(OSError):
                socket.create_connection(("1.1.1.1", 53), timeout=2)

        def test_tmp_path(tmp_path):
            (tmp_path / "f").write_text("x")
            assert (tmp_path / "f").read_text() == "x"
    """))
    outcomes = []
    for sandbox in _both_backends():
        r = sandbox.run([sandbox.python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                         "/suite/test_mix.py"], mounts=[Mount(suite, "/suite")], cwd="/suite")
        summary = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr[-500:]
        outcomes.append((r.exit_code, summary.split(" in ")[0]))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0] == (1, "2 failed, 5 passed")


def test_unreachable_daemon_is_a_clear_sandbox_unavailable(tmp_path):
    with pytest.raises(SandboxUnavailable) as info:
        DockerSandbox(docker_host=f"unix://{tmp_path}/no-daemon.sock")
    message = str(info.value)
    assert "no daemon answers" in message and "scripts/dockerd.sh start" in message
