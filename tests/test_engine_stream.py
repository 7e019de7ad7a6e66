"""Continuous batching (`rlvr.engines.stream`): sequences that join a running decode at
different steps, under a slot bound, sample the ids `TorchEngine.generate` samples for them
(same seeds), with logprobs equal to the teacher-forced scores; stopped sequences leave at
once and hand their KV to the prefix cache; bad arguments are refused by name."""
from __future__ import annotations

import numpy as np
import pytest

import rlvr.agent.grammar  # noqa: F401  (registers the `tool_call` grammar a test decodes under)
from rlvr.engines.base import SamplingParams, StreamingEngine
from rlvr.engines.torch_engine import TorchEngine

TOL = 1e-4
STOPS = (7, 11, 13, 17, 19, 23, 29, 31)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _prompts(n_unique: int = 5, group: int = 3) -> list[list[int]]:
    rng = np.random.default_rng(0)
    unique = [rng.integers(40, 400, int(rng.integers(5, 50))).tolist() for _ in range(n_unique)]
    return [p for p in unique for _ in range(group)]


def drain(stream, prompts, seeds, limits, *, join_every: int, per_join: int) -> tuple[dict, list]:
    """Add `per_join` prompts every `join_every` steps; run until all stopped. Returns the
    samples by index and the number of slots that decoded at each step."""
    got, live, pending, step = {}, [], list(range(len(prompts))), 0
    while pending or stream.active:
        if pending and step % join_every == 0:
            for i in pending[:per_join]:
                stream.add(i, prompts[i], sample_seed=seeds[i], max_new_tokens=limits[i])
            pending = pending[per_join:]
        finished = stream.step()
        got.update(finished)
        live.append(len(stream.live) + len(finished))  # slots that decoded this step
        step += 1
    stream.close()
    return got, live


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("max_slots", [0, 4])
def test_staggered_joins_sample_what_generate_samples(policy_dir, temperature, max_slots):
    prompts = _prompts()
    seeds = [100 + i for i in range(len(prompts))]
    limits = [24 - (i % 4) * 5 for i in range(len(prompts))]  # each sequence its own limit
    params = SamplingParams(temperature=temperature, max_new_tokens=24, stop_token_ids=STOPS)
    ref = TorchEngine(policy_dir).generate(prompts, params, seed=5, sample_seeds=seeds)
    engine = TorchEngine(policy_dir)
    got, live = drain(engine.stream(params, seed=5, max_slots=max_slots), prompts, seeds,
                      limits, join_every=3, per_join=4)
    assert sorted(got) == list(range(len(prompts)))
    for i, r in enumerate(ref):
        n = limits[i]
        stop_at = next((j for j, t in enumerate(r.token_ids) if t in STOPS), None)
        expected = r.token_ids[:stop_at + 1] if stop_at is not None and stop_at < n \
            else r.token_ids[:n]
        assert got[i].token_ids == expected
        assert got[i].finish_reason == ("stop" if expected[-1] in STOPS else "length")
        assert np.allclose(got[i].logprobs, r.logprobs[:len(expected)], atol=TOL)
    scores = engine.score_batch(prompts, [got[i].token_ids for i in range(len(prompts))], params)
    for i, s in enumerate(scores):
        assert np.allclose(got[i].logprobs, s, atol=TOL)
    if max_slots:
        assert max(live) == max_slots
    if temperature == 1.0:
        assert len({len(got[i].token_ids) for i in got}) >= 4  # they left at many steps
    st = engine.stats
    assert st["samples"] == len(prompts)
    assert st["generated_tokens"] == sum(len(s.token_ids) for s in got.values())
    assert st["slot_steps"] == st["generated_tokens"]  # no slot ever idles
    assert st["prefill_tokens_requested"] == sum(len(p) for p in prompts)
    assert st["prefill_tokens_computed"] == sum(s.prefill_tokens for s in got.values())


def test_a_group_joining_together_is_prefilled_once(policy_dir):
    prompts = _prompts(n_unique=2, group=4)
    engine = TorchEngine(policy_dir)
    params = SamplingParams(temperature=1.0, max_new_tokens=6)
    got, _ = drain(engine.stream(params, seed=0), prompts, list(range(8)), [6] * 8,
                   join_every=1, per_join=8)
    assert engine.stats["prefill_tokens_saved"] == 3 * (len(prompts[0]) + len(prompts[4]))
    assert sum(s.prefill_tokens > 0 for s in got.values()) == 2


def test_a_next_turn_reuses_the_kv_its_last_turn_left(policy_dir):
    """Turn 2 = turn 1's prompt + its sample + an observation: all but the last sampled
    token's KV comes from the cache, and the ids equal a cold engine's."""
    params = SamplingParams(temperature=1.0, max_new_tokens=10)
    engine = TorchEngine(policy_dir)
    first = _prompts(n_unique=3, group=1)
    got, _ = drain(engine.stream(params, seed=1), first, [0, 1, 2], [10] * 3,
                   join_every=1, per_join=3)
    second = [p + got[i].token_ids + [300 + i, 301] for i, p in enumerate(first)]
    cold = TorchEngine(policy_dir, prefix_cache_tokens=0).generate(
        second, params, seed=1, sample_seeds=[10, 11, 12])
    engine.stats.clear()
    got2, _ = drain(engine.stream(params, seed=1), second, [10, 11, 12], [10] * 3,
                    join_every=1, per_join=3)
    assert [got2[i].token_ids for i in range(3)] == [s.token_ids for s in cold]
    assert engine.stats["prefill_tokens_reused"] == sum(len(p) + len(got[i].token_ids) - 1
                                                        for i, p in enumerate(first))
    assert engine.stats["prefill_tokens_computed"] == 3 * 3  # last token + the observation


def test_grammar_constrained_sequences_join_and_leave(policy_dir):
    prompts = _prompts(n_unique=4, group=1)
    params = SamplingParams(temperature=1.0, max_new_tokens=12, grammar="tool_call")
    ref = TorchEngine(policy_dir).generate(prompts, params, seed=2, sample_seeds=[0, 1, 2, 3])
    got, _ = drain(TorchEngine(policy_dir).stream(params, seed=2), prompts, [0, 1, 2, 3],
                   [12] * 4, join_every=2, per_join=1)
    assert [got[i].token_ids for i in range(4)] == [r.token_ids for r in ref]
    assert all(np.allclose(got[i].logprobs, r.logprobs, atol=TOL) for i, r in enumerate(ref))


def test_refusals_name_what_is_wrong(policy_dir):
    engine = TorchEngine(policy_dir)
    assert isinstance(engine, StreamingEngine)
    params = SamplingParams(temperature=1.0, max_new_tokens=8)
    with pytest.raises(ValueError, match="fast decoder"):
        TorchEngine(policy_dir, backend="hf").stream(params, seed=0)
    with pytest.raises(ValueError, match="max_slots"):
        engine.stream(params, seed=0, max_slots=-1)
    stream = engine.stream(params, seed=0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        stream.add("a", [5, 6], sample_seed=0, max_new_tokens=9)
    with pytest.raises(ValueError, match="max_new_tokens"):
        stream.add("a", [5, 6], sample_seed=0, max_new_tokens=0)
    with pytest.raises(ValueError, match="empty"):
        stream.add("a", [], sample_seed=0, max_new_tokens=4)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        stream.add("a", [10**6], sample_seed=0, max_new_tokens=4)
    assert stream.active == 0 and stream.step() == []
