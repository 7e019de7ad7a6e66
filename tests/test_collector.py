"""rlvr.agent.collector: an episode that dies half-way (the engine or teacher raises out of
the collector) releases what it holds — its workspace and its warm run_tests server."""
from __future__ import annotations

import pytest

from agentkit import ReplayEngine, assert_warm_server_gone, count_task, tiny_policy_dir
from rlvr.agent.collector import Collector
from rlvr.agent.episode import EpisodeConfig
from rlvr.agent.tools import format_tool_call
from rlvr.agent.transcript import ChatCodec

RUN_TESTS = format_tool_call("run_tests", {})


class Abort(BaseException):
    """What escapes the collector: not an Exception, so no episode records it as its own."""


class AbortingEngine(ReplayEngine):
    """Replays run_tests on the first call, then raises (a crashed engine)."""

    def generate(self, prompts, params, *, seed, sample_seeds=None):
        if self.calls >= 1:
            raise Abort("the engine died")
        return super().generate(prompts, params, seed=seed, sample_seeds=sample_seeds)


class AbortingTeacher:
    """A teacher whose first turn is run_tests and whose second raises (an interrupt)."""

    name = "aborting"
    policy_version = "aborting-1"

    def for_task(self, task):
        return self

    def chat(self, messages, *, seed, max_tokens):
        if any(m["role"] == "tool" for m in messages):
            raise Abort("the teacher was interrupted")
        return RUN_TESTS

    def close(self):
        pass


@pytest.mark.parametrize("kind", ["token", "text"])
def test_a_failing_episode_leaves_no_server_process_and_no_workspace(kind, tmp_path,
                                                                     warm_servers, bwrap_sandbox):
    codec = ChatCodec.from_model_dir(tiny_policy_dir())
    engine = AbortingEngine(codec, [RUN_TESTS]) if kind == "token" else AbortingTeacher()
    config = EpisodeConfig(codec=codec, sandbox=bwrap_sandbox, workspace_parent=tmp_path,
                           warm_tests=True)
    collector = Collector(engine, config, group_size=2, workers=2, groups_per_wave=1)
    groups = []
    with pytest.raises(Abort):
        collector.run([count_task()], on_group=groups.append)
    assert groups == []
    assert len(warm_servers) == 2  # each episode's first run_tests started its warm server
    for server, handle in warm_servers:
        assert_warm_server_gone(server, handle)  # closed by the collector, not left to GC
    assert list(tmp_path.iterdir()) == []  # the workspaces are gone too
