"""The `openai` teacher client against a tiny local HTTP server (127.0.0.1) that scripts
the endpoint's answers: request shape, retries with backoff, and named errors. It tests our
client, so a local stand-in for the provider is the right tool."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlvr.engines.base import TextEngine
from rlvr.teachers.openai import (
    OpenAIEngine,
    OpenAITeacherParams,
    TeacherAuthError,
    TeacherRequestError,
    TeacherResponseError,
    TeacherUnavailable,
)
from rlvr.errors import ConfigError, RlvrError

MESSAGES = [{"role": "system", "content": "You fix bugs."},
            {"role": "user", "content": "Fix count_below."}]


def ok(text="<tool_call>{\"name\": \"submit\", \"args\": {}}</tool_call>"):
    return 200, {}, {"id": "x", "object": "chat.completion", "model": "m",
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": text}}]}


def err(status, message="boom", headers=None):
    return status, headers or {}, {"error": {"message": message, "type": "x"}}


class Endpoint:
    """Answers POSTs from a script of (status, headers, body); records every request."""

    def __init__(self, script):
        self.script = list(script)
        self.requests: list[dict] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                endpoint.requests.append({"path": self.path, "headers": dict(self.headers),
                                          "body": json.loads(body)})
                status, headers, payload = endpoint.script.pop(0) if endpoint.script else ok()
                raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint(request):
    made = []

    def make(*script):
        e = Endpoint(script)
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("RLVR_TEST_KEY", "sk-test-123")


def engine(url, sleeps=None, **kw):
    params = OpenAITeacherParams(base_url=url, model="teacher-1", api_key_env="RLVR_TEST_KEY",
                                 backoff_s=0.5, **kw)
    return OpenAIEngine(params, sleep=(sleeps.append if sleeps is not None else lambda s: None))


def test_request_shape_and_text(endpoint):
    ep = endpoint(ok("hello"))
    eng = engine(ep.url, temperature=0.3)
    assert isinstance(eng, TextEngine)
    assert eng.chat(MESSAGES, seed=42, max_tokens=77) == "hello"
    [req] = ep.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["Authorization"] == "Bearer sk-test-123"
    assert req["body"] == {"model": "teacher-1", "messages": MESSAGES, "seed": 42,
                           "max_tokens": 77, "temperature": 0.3, "top_p": 1.0}
    assert eng.policy_version == "openai:teacher-1"


def test_max_tokens_field_extra_body_and_no_auth(endpoint):
    ep = endpoint(ok("hi"))
    params = OpenAITeacherParams(base_url=ep.url + "/", model="m", api_key_env="",
                                 max_tokens_field="max_completion_tokens",
                                 extra_body={"reasoning_effort": "low"})
    assert OpenAIEngine(params).chat(MESSAGES, seed=1, max_tokens=5) == "hi"
    [req] = ep.requests
    assert "Authorization" not in req["headers"]
    assert req["body"]["max_completion_tokens"] == 5 and "max_tokens" not in req["body"]
    assert req["body"]["reasoning_effort"] == "low"


def test_retries_rate_limits_and_server_errors_with_backoff(endpoint):
    ep = endpoint(err(503, "overloaded"), err(429, "slow down", {"Retry-After": "2"}),
                  err(500), ok("finally"))
    sleeps: list[float] = []
    eng = engine(ep.url, sleeps, max_retries=4)
    assert eng.chat(MESSAGES, seed=0, max_tokens=8) == "finally"
    assert len(ep.requests) == 4 and eng.requests == 4
    # retry k waits backoff_s * 2**(k-1) times a jitter in [0.5, 1], or Retry-After if given
    assert 0.25 <= sleeps[0] <= 0.5 and sleeps[1] == 2.0 and 1.0 <= sleeps[2] <= 2.0
    assert all(r["body"] == ep.requests[0]["body"] for r in ep.requests)  # same request each time


def test_gives_up_after_max_retries_naming_the_last_failure(endpoint):
    ep = endpoint(*[err(502, "bad gateway")] * 3)
    with pytest.raises(TeacherUnavailable, match=r"3 attempts.*HTTP 502: bad gateway"):
        engine(ep.url, max_retries=2).chat(MESSAGES, seed=0, max_tokens=8)
    assert len(ep.requests) == 3


def test_connection_refused_is_unavailable_after_retries():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sleeps: list[float] = []
    with pytest.raises(TeacherUnavailable, match="ConnectError"):
        engine(f"http://127.0.0.1:{port}/v1", sleeps, max_retries=2).chat(
            MESSAGES, seed=0, max_tokens=8)
    assert len(sleeps) == 2


@pytest.mark.parametrize("status", [401, 403])
def test_auth_errors_are_not_retried(endpoint, status):
    ep = endpoint(err(status, "invalid api key"))
    with pytest.raises(TeacherAuthError, match=f"HTTP {status}: invalid api key.*RLVR_TEST_KEY"):
        engine(ep.url).chat(MESSAGES, seed=0, max_tokens=8)
    assert len(ep.requests) == 1


@pytest.mark.parametrize("status", [400, 404, 422])
def test_bad_requests_are_not_retried(endpoint, status):
    ep = endpoint(err(status, "model 'teacher-1' does not exist"))
    with pytest.raises(TeacherRequestError, match="does not exist"):
        engine(ep.url).chat(MESSAGES, seed=0, max_tokens=8)
    assert len(ep.requests) == 1


@pytest.mark.parametrize("payload, match", [
    ({"choices": []}, "no choices"),
    ({"choices": [{"message": {"role": "assistant", "content": None}}]}, "no text content"),
    ({"choices": [{"message": {"content": ""}, "finish_reason": "stop"}]}, "no text content"),
    ({"choices": [{"message": {"content": "x"}, "finish_reason": "content_filter"}]}, "filtered"),
    (b"<html>proxy error</html>", "not JSON"),
])
def test_unusable_answers_are_named(endpoint, payload, match):
    ep = endpoint((200, {}, payload))
    with pytest.raises(TeacherResponseError, match=match):
        engine(ep.url).chat(MESSAGES, seed=0, max_tokens=8)


def test_content_parts_are_joined(endpoint):
    ep = endpoint((200, {}, {"choices": [{"message": {"content": [
        {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}]}))
    assert engine(ep.url).chat(MESSAGES, seed=0, max_tokens=8) == "ab"


def test_configuration_errors_name_the_key(monkeypatch, endpoint):
    monkeypatch.delenv("RLVR_TEST_KEY")
    with pytest.raises(ConfigError, match="RLVR_TEST_KEY is not set"):
        engine("http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="teacher.model"):
        OpenAIEngine(OpenAITeacherParams(model="", api_key_env=""))
    monkeypatch.setenv("RLVR_TEST_KEY", "k")
    ep = endpoint()
    with pytest.raises(TeacherRequestError, match="message 1"):
        engine(ep.url).chat([MESSAGES[0], {"role": "user"}], seed=0, max_tokens=8)
    assert ep.requests == []
    assert issubclass(TeacherUnavailable, RlvrError)


def test_teacher_params_load_from_yaml(tmp_path):
    import yaml

    from rlvr.config import parse

    # a YAML mapping as a params section holds it (`teacher` is no params.yaml section:
    # read_params refuses those, so the mapping is parsed directly)
    text = ("teacher:\n  base_url: http://127.0.0.1:8000/v1\n  model: qwen\n"
            "  api_key_env: ''\n  max_retries: 2\n")
    p = parse(OpenAITeacherParams, yaml.safe_load(text)["teacher"], "teacher")
    assert (p.model, p.max_retries, p.api_key_env) == ("qwen", 2, "")
    with pytest.raises(ConfigError, match="teacher.retries: unknown key"):
        parse(OpenAITeacherParams, yaml.safe_load("teacher:\n  model: q\n  retries: 2\n")[
            "teacher"], "teacher")


def test_from_options_validates_like_params(endpoint):
    ep = endpoint(ok("x"))
    eng = OpenAIEngine.from_options({"base_url": ep.url, "model": "m", "api_key_env": ""})
    assert eng.chat(MESSAGES, seed=0, max_tokens=4) == "x"
    with pytest.raises(ConfigError, match="rollout.engine_options.max_retry: unknown key"):
        OpenAIEngine.from_options({"model": "m", "max_retry": 3})


def tool_answer(content, *calls):
    message = {"role": "assistant", "content": content,
               "tool_calls": [{"id": f"c{i}", "type": "function",
                               "function": {"name": name, "arguments": arguments}}
                              for i, (name, arguments) in enumerate(calls)]}
    return 200, {}, {"choices": [{"index": 0, "finish_reason": "tool_calls",
                                  "message": message}]}


def test_with_the_policys_format_the_teacher_gets_tools_and_its_calls_are_rewritten(endpoint):
    """Given a tool-call format, the request carries `tools` and the history in the API's
    tool-call form; the answer's `tool_calls` come back as the policy would write them."""
    from rlvr.agent.tools import TOOL_NAMES, parse_action

    ep = endpoint(tool_answer("Look first.", ("view", '{"path": "pkg/ä.py"}')),
                  tool_answer(None, ("run_tests", "{}"), ("submit", "{}")),
                  tool_answer(None, ("view", "{not json")))
    eng = OpenAIEngine(OpenAITeacherParams(base_url=ep.url, model="m", api_key_env=""),
                       tool_call_format="hermes")
    text = eng.chat(MESSAGES, seed=1, max_tokens=50)
    assert text == 'Look first.\n<tool_call>\n{"name": "view", "arguments": {"path": "pkg/ä.py"}}\n</tool_call>'
    assert parse_action(text, "hermes").call.args == {"path": "pkg/ä.py"}
    history = [*MESSAGES, {"role": "assistant", "content": text},
               {"role": "tool", "content": "1\tdef f(): ..."},
               {"role": "assistant", "content": "no call here"},
               {"role": "tool", "content": "error: invalid tool call"}]
    two = eng.chat(history, seed=2, max_tokens=50)
    assert parse_action(two, "hermes").error_kind == "multiple_tool_calls"
    assert parse_action(eng.chat(MESSAGES, seed=3, max_tokens=50), "hermes").error_kind \
        == "bad_call"
    body = ep.requests[1]["body"]
    assert [t["function"]["name"] for t in body["tools"]] == list(TOOL_NAMES)
    assert body["messages"][2] == {"role": "assistant", "content": "Look first.", "tool_calls": [
        {"id": "call_2", "type": "function",
         "function": {"name": "view", "arguments": '{"path": "pkg/ä.py"}'}}]}
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "call_2",
                                   "content": "1\tdef f(): ..."}
    assert body["messages"][4] == {"role": "assistant", "content": "no call here"}
    assert body["messages"][5] == {"role": "user", "content": "error: invalid tool call"}


def test_an_answer_with_neither_text_nor_calls_is_a_response_error(endpoint):
    ep = endpoint(tool_answer(None))
    eng = OpenAIEngine(OpenAITeacherParams(base_url=ep.url, model="m", api_key_env=""),
                       tool_call_format="hermes")
    with pytest.raises(TeacherResponseError, match="neither text nor tool calls"):
        eng.chat(MESSAGES, seed=1, max_tokens=5)
