"""Rollout workers as Ray actors (`grpo.rollout_workers`, issue 38): two workers roll out a
draw's groups as the trainer's own process would, and a worker killed mid-draw loses
nothing — its group is re-queued on the other and the rows are those of the run in process.

The engine is a client of stub vLLM servers (test_vllm_engine.py's, which sample from the
request's seed alone, as vLLM does), so this runs in CI without vLLM; `make test-vllm` runs
the loop with real servers (tests/test_grpo_fleet.py)."""
from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from test_vllm_engine import VllmStub, stub  # noqa: F401 - fixture
from agentkit import count_task, price_task, take_task, tiny_policy_dir
from grpokit import SANDBOX, small_rollout
from rlvr.agent.passport import deterministic_view
from rlvr.agent.rollout import roll_out
from rlvr.engines.vllm_engine import VllmEngine, VllmEngineParams
from rlvr.errors import ConfigError
from rlvr.train.grpo_config import parse_grpo_params
from rlvr.train.rollout_workers import RolloutWorkers

TASKS = [count_task(), take_task(), price_task()]


def rollout_params():
    return dataclasses.replace(small_rollout(), model_dir=str(tiny_policy_dir()), group_size=2,
                               engine="vllm")


class Slow:
    """A worker's engine that takes `delay` seconds a call (time to kill it mid-group)."""

    def __init__(self, inner, delay: float = 1.5):
        self.inner, self.delay = inner, delay

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, prompts, params, **kw):
        time.sleep(self.delay)
        return self.inner.generate(prompts, params, **kw)


def slow(engine):
    return Slow(engine)


@pytest.fixture(scope="module")
def ray_session():
    import ray

    yield
    if ray.is_initialized():
        ray.shutdown()


def engine_of(s: VllmStub) -> VllmEngine:
    return VllmEngine([s.url], "policy", policy_version="v3", policy_step=3,
                      params=VllmEngineParams(retries=0))


def test_two_workers_roll_out_the_groups_of_one_process(stub, tmp_path, bwrap_sandbox,
                                                        ray_session):
    s = stub()
    rp = rollout_params()
    want = roll_out(TASKS, rp, SANDBOX, tmp_path / "here", engine=engine_of(s), sampling_round=2)
    pool = RolloutWorkers(2, tasks={t.task_id: t for t in TASKS}, rp=rp, sandbox_params=SANDBOX,
                          engine=engine_of(s))
    try:
        stats: dict = {}
        got = pool.roll_out(TASKS, rp, SANDBOX, tmp_path / "there", sampling_round=2,
                            stats=stats)
    finally:
        pool.close()
    assert deterministic_view(got) == deterministic_view(want)
    assert {r["policy_step"] for r in got} == {3} and stats["requeued"] == 0
    assert {t["sampled_by"] for r in got for t in r["turns"]} == {s.url}
    assert len(list((tmp_path / "there" / "workers").glob("*.parquet"))) == len(TASKS)


def test_a_worker_killed_mid_draw_loses_nothing(stub, tmp_path, bwrap_sandbox, ray_session):
    s = stub()
    rp = rollout_params()
    want = roll_out(TASKS, rp, SANDBOX, tmp_path / "here", engine=engine_of(s))
    pool = RolloutWorkers(2, tasks={t.task_id: t for t in TASKS}, rp=rp, sandbox_params=SANDBOX,
                          engine=engine_of(s), wrap=slow)
    try:
        box: dict = {}
        stats: dict = {}
        draw = threading.Thread(target=lambda: box.update(rows=pool.roll_out(
            TASKS, rp, SANDBOX, tmp_path / "there", stats=stats)))
        draw.start()
        time.sleep(0.5)  # both workers are inside their first group's first call
        pool.kill(0)
        draw.join(timeout=300)
    finally:
        pool.close()
    assert not draw.is_alive() and stats["requeued"] >= 1
    assert deterministic_view(box["rows"]) == deterministic_view(want)  # nothing lost or twice


def test_workers_need_the_vllm_sampler():
    with pytest.raises(ConfigError, match="grpo.rollout_workers: needs engine: vllm"):
        parse_grpo_params({"rollout_workers": 2}).check()
    with pytest.raises(ConfigError, match="grpo.rollout_workers: must be >= 0"):
        parse_grpo_params({"rollout_workers": -1, "engine": "vllm"}).check()
    with pytest.raises(ConfigError, match="set grpo.engine: vllm"):
        RolloutWorkers(1, tasks={}, rp=None, sandbox_params=SANDBOX, engine=object())
