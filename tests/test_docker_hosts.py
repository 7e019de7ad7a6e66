"""Sandboxes on other Docker hosts (issue 38): which addresses are accepted and how, the copy
transport's handling of what comes back from a container, and the docker backend spread over
two daemons (this machine's, and the second one `make test` starts, reachable only over TCP
with mutual TLS). The conformance and enclave suites run on that second daemon too
(`sandbox_place`)."""
from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path, PurePosixPath

import pytest

from conftest import _sandbox_or_skip, remote_docker_options
from rlvr.config import parse
from rlvr.errors import ConfigError, SandboxUnavailable
from rlvr.sandbox import Mount, get_sandbox
from rlvr.sandbox.docker_client import check_address, transport_of
from rlvr.sandbox.docker_copy import CopyBackError, extract_untrusted, mirror, tree_signature
from rlvr.sandbox.params import SandboxParams


# ---- addresses -------------------------------------------------------------------------------
def tls_dir(tmp_path: Path, *names: str) -> Path:
    d = tmp_path / "tls"
    d.mkdir(exist_ok=True)
    for name in names:
        (d / name).write_text("pem")
    return d


def test_tcp_without_tls_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    with pytest.raises(ConfigError, match=r"sandbox.docker_hosts tcp://10.0.0.2:2376: a tcp:// "
                                          r"Docker host needs TLS \(a remote daemon is root"):
        check_address("tcp://10.0.0.2:2376")
    with pytest.raises(ConfigError, match="lacks .*key.pem"):
        check_address("tcp://10.0.0.2:2376", tls_dir(tmp_path, "ca.pem", "cert.pem"))
    check_address("tcp://10.0.0.2:2376", tls_dir(tmp_path, "ca.pem", "cert.pem", "key.pem"))
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    monkeypatch.setenv("DOCKER_CERT_PATH", str(tmp_path / "tls"))
    check_address("tcp://10.0.0.2:2376")  # docker's own variables name the material
    with pytest.raises(ConfigError, match="not a Docker host address"):
        check_address("http://10.0.0.2:2376")
    assert [transport_of(h) for h in ("unix:///var/run/docker.sock", "tcp://h:1", "ssh://u@h")] \
        == ["bind", "copy", "copy"]


def test_sandbox_params_name_the_host(tmp_path, monkeypatch):
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    ok = parse(SandboxParams, {"backend": "docker", "docker_hosts": [
        "unix:///run/docker.sock", "tcp://10.0.0.2:2376"],
        "docker_tls_dir": str(tls_dir(tmp_path, "ca.pem", "cert.pem", "key.pem"))}, "sandbox")
    assert ok.options() == {"docker_hosts": ["unix:///run/docker.sock", "tcp://10.0.0.2:2376"],
                            "tls_dir": str(tmp_path / "tls")}
    assert SandboxParams().options() == {}
    for value, match in [
        ({"backend": "docker", "docker_hosts": ["unix:///a", "tcp://10.0.0.2:2376"]},
         r"sandbox.docker_hosts\[1\] tcp://10.0.0.2:2376: a tcp:// Docker host needs TLS"),
        ({"backend": "bwrap", "docker_hosts": ["unix:///a"]}, "set for backend 'bwrap'"),
        ({"backend": "docker", "docker_hosts": ["unix:///a", "unix:///a"]}, "listed twice"),
    ]:
        with pytest.raises(ConfigError, match=match):
            parse(SandboxParams, value, "sandbox")


# ---- what comes back from a container ---------------------------------------------------------
def archive(*members: tuple[str, bytes | None, dict]) -> list[bytes]:
    """A tar of `top/...` members as get_archive's chunks (data None: a directory)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data, extra in members:
            info = tarfile.TarInfo(name)
            for k, v in extra.items():
                setattr(info, k, v)
            if data is None and "type" not in extra:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data or b"")
                tar.addfile(info, io.BytesIO(data or b""))
    raw = buf.getvalue()
    return [raw[i:i + 1000] for i in range(0, len(raw), 1000)]


@pytest.mark.parametrize("member, match", [
    (("top/../../escape.txt", b"x", {}), "outside the destination|refused entry"),
    (("top/link", None, {"type": tarfile.SYMTYPE, "linkname": "/etc/passwd"}), "refused entry"),
    (("top/dev", None, {"type": tarfile.CHRTYPE, "devmajor": 1, "devminor": 3}), "refused entry"),
])
def test_an_archive_leaving_its_tree_is_refused(tmp_path, member, match):
    with pytest.raises(CopyBackError, match=match):
        extract_untrusted(archive(("top", None, {}), member), tmp_path / "x", 1 << 20)
    assert not (tmp_path / "escape.txt").exists()


def test_an_absolute_name_lands_inside_the_tree(tmp_path):
    extract_untrusted(archive(("top", None, {}), ("/top/abs", b"x", {})), tmp_path / "x", 100)
    assert (tmp_path / "x" / "top" / "abs").read_bytes() == b"x"


def test_an_archive_past_the_cap_is_refused_and_set_uid_bits_are_dropped(tmp_path):
    with pytest.raises(CopyBackError, match="exceeds 100 bytes"):
        extract_untrusted(archive(("top", None, {}), ("top/big", b"x" * 200, {})), tmp_path / "a",
                          100)
    top = extract_untrusted(archive(("top", None, {}), ("top/s", b"#!", {"mode": 0o4755})),
                            tmp_path / "b", 100)
    assert top == tmp_path / "b" / "top" and not (top / "s").stat().st_mode & 0o4000


def test_mirror_keeps_nested_mounts_and_replaces_the_rest(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    for d in (src, dst):
        (d / "pkg" / "tests").mkdir(parents=True)
    (src / "new.py").write_text("new")
    (src / "pkg" / "mod.py").write_text("edited")
    (src / "pkg" / "tests" / "test_x.py").write_text("what the read-only mount showed")
    (dst / "gone.py").write_text("deleted inside")
    (dst / "pkg" / "mod.py").write_text("original")
    (dst / "pkg" / "tests" / "keep").write_text("the host's own")
    mirror(src, dst, {PurePosixPath("pkg/tests")})
    assert sorted(p.relative_to(dst).as_posix() for p in dst.rglob("*")) == [
        "new.py", "pkg", "pkg/mod.py", "pkg/tests", "pkg/tests/keep"]
    assert (dst / "pkg" / "mod.py").read_text() == "edited"


def test_tree_signature_follows_content_and_ownership(tmp_path):
    (tmp_path / "a").write_text("1")
    one = tree_signature(tmp_path, (1000, 1000))
    assert one == tree_signature(tmp_path, (1000, 1000)) != tree_signature(tmp_path, None)
    (tmp_path / "a").write_text("22")
    assert tree_signature(tmp_path, (1000, 1000)) != one


# ---- two daemons ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def two_hosts():
    local = _sandbox_or_skip("docker")
    _sandbox_or_skip("docker-tls")
    remote = remote_docker_options()
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    box = get_sandbox("docker", docker_hosts=[host, remote["docker_host"]],
                      tls_dir=remote["tls_dir"])
    del local
    yield box
    box.close()


@pytest.mark.docker
def test_runs_and_servers_spread_over_both_hosts(two_hosts, tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    seen = set()
    for i in range(4):
        r = two_hosts.run([two_hosts.python, "-c", f"open('/w/out{i}', 'w').write('{i}')"],
                          mounts=[Mount(work, "/w", writable=True)])
        assert r.ok, r.stderr
        seen.add(r.resources["docker_host"])
    assert seen == {h.docker_host for h in two_hosts.hosts}
    assert sorted(p.name for p in work.iterdir()) == ["out0", "out1", "out2", "out3"]
    servers = [two_hosts.serve([two_hosts.python, "-c", "import sys; print(sys.stdin.readline())"])
               for _ in range(2)]
    try:
        assert two_hosts._servers == [1, 1]
    finally:
        for s in servers:
            s.close()
    assert two_hosts.containers() == []


@pytest.mark.docker
def test_a_failing_host_leaves_the_rotation_and_the_run_goes_on(two_hosts, monkeypatch):
    dying = two_hosts.hosts[1]

    def down(*a, **k):
        raise SandboxUnavailable("docker backend: ConnectionError: daemon went away")

    monkeypatch.setattr(dying, "run", down)
    two_hosts._turn = 1  # the dying host's turn: it is tried first
    r = two_hosts.run([two_hosts.python, "-c", "print('still here')"])
    assert r.stdout == "still here\n" and r.resources["docker_host"] == two_hosts.hosts[0].docker_host
    assert "daemon went away" in two_hosts.retired[dying.docker_host]
    monkeypatch.setattr(two_hosts.hosts[0], "run", down)
    with pytest.raises(SandboxUnavailable, match="daemon went away"):
        two_hosts.run([two_hosts.python, "-c", "print(1)"])
    with pytest.raises(SandboxUnavailable, match="no Docker host left"):
        two_hosts.run([two_hosts.python, "-c", "print(1)"])


@pytest.mark.docker
def test_an_unreachable_host_is_named_before_any_work(tmp_path):
    _sandbox_or_skip("docker-tls")
    remote = remote_docker_options()
    with pytest.raises(SandboxUnavailable, match="no daemon answers at tcp://127.0.0.1:9 "):
        get_sandbox("docker", docker_hosts=[remote["docker_host"], "tcp://127.0.0.1:9"],
                    tls_dir=remote["tls_dir"])
    with pytest.raises(SandboxUnavailable, match="no daemon answers"):  # TLS without our cert
        get_sandbox("docker", docker_hosts=[remote["docker_host"]],
                    tls_dir=str(tls_dir(tmp_path, "ca.pem", "cert.pem", "key.pem")))
