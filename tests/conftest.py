"""Shared fixtures. `sandbox_backend` runs a test against every sandbox backend.

The docker backend needs a daemon; `make test` (and so CI) starts one on a private socket and
sets RLVR_REQUIRE_DOCKER=1, which turns "no daemon" from a skip into a failure so CI can never
pass without really exercising docker.
"""
from __future__ import annotations

import os

import pytest

from rlvr.errors import SandboxUnavailable


def remote_docker_options() -> dict:
    """get_sandbox options of the second Docker daemon `make test` starts: reachable only over
    TCP with mutual TLS, sharing no path with this machine's mounts (scripts/dockerd.sh with
    RLVR_DOCKER_TLS_PORT); {} when none runs."""
    host = os.environ.get("RLVR_DOCKER_TLS_HOST", "")
    return {"docker_host": host, "tls_dir": os.environ.get("RLVR_DOCKER_TLS_DIR")} if host else {}


def _sandbox_or_skip(name: str):
    from rlvr.sandbox import get_sandbox

    try:
        if name == "docker-tls":
            options = remote_docker_options()
            if not options:
                raise SandboxUnavailable("RLVR_DOCKER_TLS_HOST is not set")
            return get_sandbox("docker", **options)
        return get_sandbox(name)
    except SandboxUnavailable as exc:
        if name.startswith("docker") and os.environ.get("RLVR_REQUIRE_DOCKER") == "1":
            pytest.fail(f"{name} backend required but unavailable: {exc}")
        pytest.skip(f"{name} sandbox unavailable here: {exc} (make test starts dockerd)")


@pytest.fixture(scope="session", params=["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def sandbox_backend(request) -> str:
    """Name of a backend that is really runnable (or a skip / failure saying why not)."""
    _sandbox_or_skip(request.param)
    return request.param


@pytest.fixture(scope="session", params=["bwrap", pytest.param("docker", marks=pytest.mark.docker),
                                         pytest.param("docker-tls", marks=pytest.mark.docker)])
def sandbox_place(request) -> str:
    """`sandbox_backend`, plus the docker backend on a remote daemon over TLS (the copy
    transport): for the suites every place must pass (conformance)."""
    _sandbox_or_skip(request.param)
    return request.param


@pytest.fixture(scope="session")
def bwrap_sandbox():
    return _sandbox_or_skip("bwrap")


@pytest.fixture(scope="module")
def one_torch_thread():
    """Torch on one intra-op thread for a module (`pytestmark = pytest.mark.usefixtures(
    "one_torch_thread")`): tiny-model decode is op-latency bound, a second thread only
    spin-waits, and on a loaded 2-core CI box it makes those tests ~20x slower."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    """A tiny real policy directory (`build_tiny_policy`, seed 0), one per test module."""
    from rlvr.engines.local_policy import build_tiny_policy

    d = tmp_path_factory.mktemp("tiny") / "policy"
    build_tiny_policy(d, seed=0)
    return d


@pytest.fixture(scope="module")
def engine(policy_dir):
    """The in-process torch engine on the module's tiny policy (a module may define its own
    `engine`, e.g. a scripted one, which takes precedence)."""
    from rlvr.engines.torch_engine import TorchEngine

    return TorchEngine(policy_dir)


@pytest.fixture
def warm_servers(monkeypatch):
    """Every warm run_tests server the test starts, as (server, the process handle it
    started with): the handle outlives `server.handle`, so a test can check it is gone."""
    from rlvr.agent import warm_tests

    started = []
    real_start = warm_tests.WarmTestServer.start

    def recording_start(self):
        real_start(self)
        started.append((self, self.handle))

    monkeypatch.setattr(warm_tests.WarmTestServer, "start", recording_start)
    return started


@pytest.fixture(scope="session", autouse=True)
def _isolated_tracking(tmp_path_factory):
    """Stages run by tests log to a throwaway MLflow store, never the repo's mlflow.db."""
    store = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    old = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{store}"
    os.environ.setdefault("RLVR_PROGRESS", "0")
    yield
    if old is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = old
