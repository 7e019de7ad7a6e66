"""TorchEngine cross-turn KV reuse: multi-turn episodes sample the same ids with the prefix
cache on as with it off, the counters show what was reused, new weights invalidate the
cache, and the cache stays within its token budget.

The episodes are driven as `rlvr.agent.collector` drives them: one `generate` per tick over
the episodes still running, turn t+1's prompt = turn t's prompt + its sampled ids + an
observation, sample_seeds keyed by (episode, turn).

Tolerance for logprobs, on vs off: TOL = 1e-4 (the engine's behaviour-vs-teacher-forced
bound). With reuse, a completion's KV was computed one token at a time by the decode step,
and the next prompt's suffix attends to it through a masked SDPA; without, the whole
transcript goes through one chunked causal SDPA. Same math, other fp32 summation orders:
the gaps seen are ~1e-6, and the sampled ids are equal.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from rlvr.engines.base import SamplingParams
from rlvr.engines.torch_engine import TorchEngine

TOL = 1e-4
TURNS = 12
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=8)
T1 = SamplingParams(temperature=1.0, max_new_tokens=8)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@dataclass
class Episode:
    eid: int
    transcript: list[int]
    turns: int  # this episode's turn budget (episodes end at different ticks)
    ids: list[list[int]] = field(default_factory=list)
    logprobs: list[list[float]] = field(default_factory=list)


def _episodes(n_tasks: int = 2, group: int = 3) -> list[Episode]:
    """group members per task share their first prompt (one prefill); budgets differ."""
    rng = np.random.default_rng(0)
    system = rng.integers(5, 300, 12).tolist()  # a system prompt every episode shares
    tasks = [system + rng.integers(5, 300, 10 + 7 * t).tolist() for t in range(n_tasks)]
    return [Episode(eid=t * group + g, transcript=list(tasks[t]), turns=TURNS - (t * group + g) % 3)
            for t in range(n_tasks) for g in range(group)]


def _observation(eid: int, turn: int) -> list[int]:
    """Tool output tokens: episode-specific from the first token, 3..17 long."""
    rng = np.random.default_rng([eid, turn])
    return [300 + eid] + rng.integers(5, 300, int(rng.integers(2, 17))).tolist()


def run_episodes(engine: TorchEngine, params: SamplingParams, episodes: list[Episode],
                 on_tick=None) -> list[Episode]:
    for turn in range(TURNS):
        live = [ep for ep in episodes if turn < ep.turns]
        if not live:
            break
        prompts = [list(ep.transcript) for ep in live]
        samples = engine.generate(prompts, params, seed=17,
                                  sample_seeds=[ep.eid * 1000 + turn for ep in live])
        if on_tick is not None:
            on_tick(turn, live, prompts, samples)
        for ep, s in zip(live, samples):
            ep.ids.append(s.token_ids)
            ep.logprobs.append(s.logprobs)
            ep.transcript += s.token_ids + _observation(ep.eid, turn)
    return episodes


def assert_same_episodes(a: list[Episode], b: list[Episode]) -> None:
    assert [ep.ids for ep in a] == [ep.ids for ep in b]
    gap = max(abs(x - y) for ea, eb in zip(a, b) for la, lb in zip(ea.logprobs, eb.logprobs)
              for x, y in zip(la, lb))
    assert gap < TOL, gap


@pytest.fixture(scope="module")
def stops(policy_dir):
    """The 12 ids the policy samples most in these episodes, as stop ids: many turns stop
    early, so the engine compacts mid-decode (`compact_below=1.0` below), and finished
    slots must hand their KV to the cache before they leave the batch."""
    eng = TorchEngine(policy_dir, prefix_cache_tokens=0)
    ids = [t for ep in run_episodes(eng, T1, _episodes()) for turn in ep.ids for t in turn]
    return tuple(sorted(t for t, _ in Counter(ids).most_common(12)))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_reuse_samples_the_same_ids_as_re_prefill_over_twelve_turns(policy_dir, stops,
                                                                    temperature):
    params = SamplingParams(temperature=temperature, max_new_tokens=8, stop_token_ids=stops)
    off = TorchEngine(policy_dir, prefix_cache_tokens=0)
    on = TorchEngine(policy_dir, compact_below=1.0)
    seen = []

    def check(turn, live, prompts, samples):
        st = on.last_stats
        seen.append(st)
        assert st["prefill_tokens_requested"] == sum(len(p) for p in prompts)
        assert st["prefill_tokens_computed"] == sum(s.prefill_tokens for s in samples)
        unique = sum(len(p) for p in {tuple(p) for p in prompts})
        assert st["prefill_tokens_saved"] == st["prefill_tokens_requested"] - unique  # in-batch
        assert st["prefill_tokens_computed"] + st["prefill_tokens_reused"] == unique
        if turn == 0:  # a cold cache; the G members of a task share one prefill
            assert st["prefill_tokens_reused"] == 0 and st["unique_prompts"] == 2
        else:  # each episode reuses all of its last turn but the last sampled token
            expected = sum(len(ep.transcript) - len(_observation(ep.eid, turn - 1)) - 1
                           for ep in live)
            assert st["prefill_tokens_reused"] == expected
            assert st["prefix_cache_hits"] == len(live)
            assert st["prefill_tokens_computed"] == sum(len(_observation(ep.eid, turn - 1)) + 1
                                                        for ep in live)

    a = run_episodes(off, params, _episodes())
    b = run_episodes(on, params, _episodes(), on_tick=check)
    assert_same_episodes(a, b)
    assert len(seen) == TURNS
    assert off.stats["prefill_tokens_reused"] == 0
    # one entry per episode: each turn's entry replaced the one it extended
    assert len(on.prefix_cache) == len(b) and on.last_stats["prefix_cache_entries"] == len(b)
    assert on.prefix_cache.tokens == sum(len(ep.transcript) - len(_observation(ep.eid, ep.turns - 1))
                                         - 1 for ep in b)
    if temperature == 1.0:  # many turns stopped early, at different steps
        assert len({len(ids) for ep in b for ids in ep.ids if len(ids) < 8}) >= 3


def test_an_episode_alone_samples_what_it_samples_in_a_cohort(policy_dir):
    cohort = run_episodes(TorchEngine(policy_dir), T1, _episodes())
    alone = run_episodes(TorchEngine(policy_dir), T1, [_episodes()[4]])
    assert_same_episodes([cohort[4]], alone)


def test_sync_weights_invalidates_the_cache(policy_dir):
    eng = TorchEngine(policy_dir)
    episodes = run_episodes(eng, T1, _episodes())
    assert len(eng.prefix_cache) > 0
    state = {k: v.clone() for k, v in eng.model.state_dict().items()}
    state["model.norm.weight"] = state["model.norm.weight"] * 2
    eng.sync_weights(state, "v1", 1)
    assert len(eng.prefix_cache) == 0 and eng.prefix_cache.tokens == 0
    fresh = TorchEngine(policy_dir)
    fresh.sync_weights(state, "v1", 1)
    prompts = [ep.transcript for ep in episodes]
    seeds = list(range(len(prompts)))
    got = eng.generate(prompts, T1, seed=5, sample_seeds=seeds)
    assert eng.last_stats["prefill_tokens_reused"] == 0
    want = fresh.generate(prompts, T1, seed=5, sample_seeds=seeds)
    assert [(s.token_ids, s.logprobs) for s in got] == [(s.token_ids, s.logprobs) for s in want]
    eng.close()
    assert len(eng.prefix_cache) == 0


def test_an_in_place_weight_change_without_sync_invalidates_the_cache(policy_dir):
    """A `from_model` engine on a model someone else updates in place (an optimizer step on
    a shared model) must not serve KV of the old weights."""
    model = TorchEngine(policy_dir).model
    eng = TorchEngine.from_model(model, policy_version="shared")
    episodes = run_episodes(eng, T1, _episodes()[:2])
    prompts = [ep.transcript for ep in episodes]
    with torch.no_grad():
        model.model.norm.weight.mul_(2.0)
    got = eng.generate(prompts, T1, seed=5)
    assert eng.last_stats["prefill_tokens_reused"] == 0
    want = TorchEngine.from_model(model, policy_version="fresh").generate(prompts, T1, seed=5)
    assert [(s.token_ids, s.logprobs) for s in got] == [(s.token_ids, s.logprobs) for s in want]


def test_the_cache_evicts_beyond_its_token_budget(policy_dir):
    budget = 400
    bounded = TorchEngine(policy_dir, prefix_cache_tokens=budget)
    sizes = []
    b = run_episodes(bounded, GREEDY, _episodes(),
                     on_tick=lambda *_: sizes.append(bounded.prefix_cache.tokens))
    assert max(sizes) <= budget
    assert bounded.stats["prefix_cache_evicted_tokens"] > 0
    assert bounded.stats["prefill_tokens_reused"] > 0  # the budget still serves some turns
    assert bounded.stats["prefix_cache_tokens"] == bounded.prefix_cache.tokens  # a level
    a = run_episodes(TorchEngine(policy_dir, prefix_cache_tokens=0), GREEDY, _episodes())
    assert_same_episodes(a, b)
    # a sequence longer than the whole budget is never stored
    tiny = TorchEngine(policy_dir, prefix_cache_tokens=10)
    tiny.generate([list(range(5, 40))], GREEDY, seed=0)
    assert len(tiny.prefix_cache) == 0 and tiny.last_stats["prefix_cache_evicted_tokens"] == 0


def test_hf_backend_and_a_zero_budget_do_not_cache(policy_dir):
    for eng in (TorchEngine(policy_dir, backend="hf"), TorchEngine(policy_dir, prefix_cache_tokens=0)):
        run_episodes(eng, GREEDY, _episodes()[:2])
        assert len(eng.prefix_cache) == 0 and eng.stats["prefill_tokens_reused"] == 0
    with pytest.raises(ValueError, match="prefix_cache_tokens must be an int >= 0"):
        TorchEngine(policy_dir, prefix_cache_tokens=-1)


@pytest.mark.parametrize("model_type", ["llama", "qwen3"])
def test_reuse_on_other_fast_families(model_type):
    """llama (no qkv bias) and qwen3 (q/k norms) through the reuse path: a random model,
    6 turns, on vs off."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(model_type, vocab_size=97, hidden_size=48, intermediate_size=64,
                               num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
                               head_dim=8, max_position_embeddings=256)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg)
    rng = np.random.default_rng(1)
    first = [rng.integers(0, 97, n).tolist() for n in (9, 17)]
    results = []
    for budget in (0, 4096):
        eng = TorchEngine.from_model(model, policy_version="t", prefix_cache_tokens=budget)
        transcripts = [list(first[0]), list(first[0]), list(first[1])]
        out = []
        for turn in range(6):
            samples = eng.generate(transcripts, T1, seed=2, sample_seeds=[10 * turn + i for i in range(3)])
            out.append(samples)
            for i, s in enumerate(samples):
                transcripts[i] += s.token_ids + [turn + i, 50, 60 + i]
        results.append((out, eng.stats["prefill_tokens_reused"]))
    (off, reused_off), (on, reused_on) = results
    assert reused_off == 0 and reused_on > 0
    assert [[s.token_ids for s in t] for t in off] == [[s.token_ids for s in t] for t in on]
    assert max(abs(x - y) for a, b in zip(off, on) for s, r in zip(a, b)
               for x, y in zip(s.logprobs, r.logprobs)) < TOL


@pytest.mark.parametrize("params", [GREEDY, T1])
def test_old_cache_contents_do_not_change_a_later_wave(policy_dir, params):
    """A resumed run replays a wave with a cold cache; an uninterrupted one reaches it with
    the earlier waves' entries. Both must compute the same, bit for bit — even when the
    later wave re-draws the same tasks (greedy: the very same transcripts, so old entries
    extend or equal the new ones)."""
    warm = TorchEngine(policy_dir)
    run_episodes(warm, params, _episodes())
    assert len(warm.prefix_cache) > 0
    later = run_episodes(warm, params, _episodes())
    cold = run_episodes(TorchEngine(policy_dir), params, _episodes())
    assert [(ep.ids, ep.logprobs) for ep in later] == [(ep.ids, ep.logprobs) for ep in cold]
    assert warm.last_stats["prefill_tokens_reused"] > 0
