"""TorchEngine: behaviour logprobs are recomputable, sampling is seeded per sample, group
prompts are prefilled once, stops are honoured, padding does not change a score."""
from __future__ import annotations

import pytest
import torch
from agentkit import count_task, token_ids

from rlvr.agent.episode import teacher_view
from rlvr.engines import build_engine, fast_decoder
from rlvr.engines.base import SamplingParams, Teacher, TextEngine, TokenEngine
from rlvr.engines.model_dir import weights_fingerprint
from rlvr.engines.torch_engine import TorchEngine
from rlvr.engines.vllm_engine import VllmEngine
from rlvr.errors import ConfigError
from rlvr.teachers.openai import OpenAIEngine, OpenAITeacherParams
from rlvr.teachers.scripted import ScriptedTeacher

TOL = 1e-4
NUCLEUS = SamplingParams(temperature=0.7, top_p=0.9, top_k=40, max_new_tokens=24)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def prompts(engine):
    tok = engine.tokenizer
    a = tok.apply_chat_template([{"role": "user", "content": "fix clamp(x, lo, hi) please"}],
                                add_generation_prompt=True)
    b = tok.apply_chat_template([{"role": "system", "content": "You are a coding agent."},
                                 {"role": "user", "content": "def mean(xs): return 0"}],
                                add_generation_prompt=True)
    a, b = token_ids(a), token_ids(b)
    return [a, a, a, b, b, a[:5], b, a]  # two groups interleaved + a distinct short prompt


def _max_gap(engine, prompts, samples, params):
    scored = engine.score_batch(prompts, [s.token_ids for s in samples], params)
    return max(abs(a - b) for s, sc in zip(samples, scored) for a, b in zip(s.logprobs, sc))


def test_engine_satisfies_the_protocol(engine):
    assert isinstance(engine, TokenEngine)
    assert engine.backend == "fast"
    assert engine.policy_version == weights_fingerprint(engine.model_dir)


@pytest.mark.parametrize("params", [
    NUCLEUS,
    SamplingParams(temperature=1.0, max_new_tokens=24),
    SamplingParams(temperature=1.3, top_k=7, max_new_tokens=24),
    SamplingParams(temperature=0.5, top_p=0.6, max_new_tokens=24),
])
@pytest.mark.parametrize("backend", ["fast", "hf"])
def test_behaviour_logprobs_equal_teacher_forced_recomputation(policy_dir, prompts, params, backend):
    eng = TorchEngine(policy_dir, backend=backend)
    samples = eng.generate(prompts, params, seed=7)
    assert all(len(s.token_ids) == len(s.logprobs) == params.max_new_tokens for s in samples)
    assert _max_gap(eng, prompts, samples, params) < TOL
    assert all(lp <= 0 for s in samples for lp in s.logprobs)


def test_greedy_records_logprob_zero_and_follows_the_argmax(engine, prompts):
    params = SamplingParams(temperature=0.0, max_new_tokens=10)
    a = engine.generate(prompts, params, seed=1)
    b = engine.generate(prompts, params, seed=2)
    assert [s.token_ids for s in a] == [s.token_ids for s in b]
    assert all(lp == 0.0 for s in a for lp in s.logprobs)
    assert engine.score(prompts[0], a[0].token_ids, params) == [0.0] * 10


def test_same_seed_same_samples_other_seed_other_samples(engine, prompts):
    a = engine.generate(prompts, NUCLEUS, seed=3)
    b = engine.generate(prompts, NUCLEUS, seed=3)
    c = engine.generate(prompts, NUCLEUS, seed=4)
    assert [s.token_ids for s in a] == [s.token_ids for s in b]
    assert [s.logprobs for s in a] == [s.logprobs for s in b]
    assert [s.token_ids for s in a] != [s.token_ids for s in c]
    # members of one group draw from different streams
    assert len({tuple(s.token_ids) for s in a[:3]}) == 3


def test_a_sample_does_not_depend_on_the_rest_of_the_batch(engine, prompts):
    batch = engine.generate(prompts, NUCLEUS, seed=5, sample_seeds=list(range(100, 108)))
    for i in (0, 3, 5):
        alone = engine.generate([prompts[i]], NUCLEUS, seed=5, sample_seeds=[100 + i])[0]
        assert alone.token_ids == batch[i].token_ids
        assert max(abs(x - y) for x, y in zip(alone.logprobs, batch[i].logprobs)) < TOL
    # default keys are the sample indices
    default = engine.generate(prompts, NUCLEUS, seed=5)
    keyed = engine.generate(prompts, NUCLEUS, seed=5, sample_seeds=list(range(8)))
    assert [s.token_ids for s in default] == [s.token_ids for s in keyed]


def test_prefix_sharing_gives_the_same_samples_and_computes_fewer_prefill_tokens(policy_dir, prompts):
    shared = TorchEngine(policy_dir)
    naive = TorchEngine(policy_dir, share_prefix=False)
    a = shared.generate(prompts, NUCLEUS, seed=9)
    b = naive.generate(prompts, NUCLEUS, seed=9)
    assert [s.token_ids for s in a] == [s.token_ids for s in b]
    assert max(abs(x - y) for s, t in zip(a, b) for x, y in zip(s.logprobs, t.logprobs)) < TOL
    requested = sum(len(p) for p in prompts)
    unique = {tuple(p) for p in prompts}
    assert shared.last_stats["prefill_tokens_requested"] == requested
    assert shared.last_stats["prefill_tokens_computed"] == sum(len(p) for p in unique)
    assert naive.last_stats["prefill_tokens_computed"] == requested
    assert shared.last_stats["unique_prompts"] == 3
    # per-sample accounting: the first member of a group carries the prefill, the rest 0
    assert sum(s.prefill_tokens for s in a) == shared.last_stats["prefill_tokens_computed"]
    assert [s.prefill_tokens for s in a] == [len(prompts[0]), 0, 0, len(prompts[3]), 0, 5, 0, 0]
    assert shared.stats["prefill_tokens_saved"] >= requested - sum(len(p) for p in unique)


def test_fast_and_generic_backends_agree(policy_dir, prompts):
    fast = TorchEngine(policy_dir, backend="fast").generate(prompts, NUCLEUS, seed=11)
    hf = TorchEngine(policy_dir, backend="hf").generate(prompts, NUCLEUS, seed=11)
    assert [s.token_ids for s in fast] == [s.token_ids for s in hf]


def _stop_params(engine, prompts, n_new=30):
    """Stop ids = the tokens greedy decoding emits a few steps in: some samples stop early,
    some run to the length limit, which exercises batch compaction."""
    greedy = engine.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=4), seed=0)
    stops = tuple(sorted({s.token_ids[3] for s in greedy[:2]}))
    return SamplingParams(temperature=1.0, max_new_tokens=n_new, stop_token_ids=stops)


@pytest.mark.parametrize("backend", ["fast", "hf"])
def test_stop_tokens_end_a_sample_and_are_included(policy_dir, prompts, backend):
    eng = TorchEngine(policy_dir, backend=backend)
    params = _stop_params(eng, prompts)
    stops = set(params.stop_token_ids)
    samples = [s for seed in range(4) for s in eng.generate(prompts, params, seed=seed)]
    reasons = {s.finish_reason for s in samples}
    assert reasons == {"stop", "length"}, reasons
    for s in samples:
        body = s.token_ids[:-1]
        assert not stops & set(body)  # nothing after, and no stop before, the end
        if s.finish_reason == "stop":
            assert s.token_ids[-1] in stops and len(s.token_ids) <= params.max_new_tokens
        else:
            assert len(s.token_ids) == params.max_new_tokens and s.token_ids[-1] not in stops


def test_compaction_changes_nothing_but_the_work(policy_dir, prompts):
    eager = TorchEngine(policy_dir, compact_below=0.0)
    compacting = TorchEngine(policy_dir, compact_below=1.0)  # compact at every finished slot
    params = _stop_params(eager, prompts)
    for seed in range(3):
        a = eager.generate(prompts * 2, params, seed=seed)
        b = compacting.generate(prompts * 2, params, seed=seed)
        assert [s.token_ids for s in a] == [s.token_ids for s in b]
        assert [s.finish_reason for s in a] == [s.finish_reason for s in b]
        assert _max_gap(compacting, prompts * 2, b, params) < TOL
        assert compacting.last_stats["slot_steps"] <= eager.last_stats["slot_steps"]


def test_growing_the_generated_kv_buffer_changes_nothing(policy_dir, prompts, monkeypatch):
    eng = TorchEngine(policy_dir, compact_below=1.0)
    params = _stop_params(eng, prompts)
    ref = eng.generate(prompts, params, seed=2)
    monkeypatch.setattr(fast_decoder, "SUFFIX_BLOCK", 3)  # grows at t = 3, 6, 12, 24
    grown = eng.generate(prompts, params, seed=2)
    assert [s.token_ids for s in grown] == [s.token_ids for s in ref]
    assert max(abs(x - y) for s, r in zip(grown, ref) for x, y in zip(s.logprobs, r.logprobs)) < TOL


def test_left_padding_does_not_change_a_score(engine, prompts):
    long_c = engine.generate([prompts[3]], NUCLEUS, seed=1)[0].token_ids
    short_c = long_c[:3]
    alone = engine.score(prompts[5], short_c, NUCLEUS)
    batched = engine.score_batch([prompts[3], prompts[5], prompts[0]],
                                 [long_c, short_c, []], NUCLEUS)
    assert batched[2] == []
    # short_c follows another prompt, so a token may lie outside its top-k/top-p support:
    # -inf there, alone and batched alike (equal infinities match; finite parts within TOL)
    assert_same_scores(alone, batched[1])
    assert_same_scores(engine.score(prompts[3], long_c, NUCLEUS), batched[0])


def assert_same_scores(a: list[float], b: list[float]) -> None:
    """Same length, -inf at the same positions, finite values within TOL."""
    torch.testing.assert_close(torch.tensor(a, dtype=torch.float64),
                               torch.tensor(b, dtype=torch.float64), rtol=0.0, atol=TOL)


def _random_model(model_type: str):
    from transformers import AutoConfig, AutoModelForCausalLM

    extra = {"sliding_window": None} if model_type == "mistral" else {}
    cfg = AutoConfig.for_model(model_type, vocab_size=97, hidden_size=48, intermediate_size=64,
                               num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
                               head_dim=8, max_position_embeddings=256, **extra)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg)


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "qwen3", "mistral"])
def test_fast_path_matches_the_model_forward_on_each_supported_family(model_type):
    model = _random_model(model_type)
    fast = TorchEngine.from_model(model, policy_version="t", backend="fast")
    gen = torch.Generator().manual_seed(1)
    base = [torch.randint(0, 97, (n,), generator=gen).tolist() for n in (9, 17)]
    prompts = [base[0]] * 3 + [base[1]] * 2
    params = SamplingParams(temperature=0.9, top_p=0.95, max_new_tokens=12)
    samples = fast.generate(prompts, params, seed=0)
    assert _max_gap(fast, prompts, samples, params) < TOL
    generic = TorchEngine.from_model(model, policy_version="t", backend="hf")
    assert [s.token_ids for s in generic.generate(prompts, params, seed=0)] == \
        [s.token_ids for s in samples]


def test_unsupported_family_falls_back_to_the_generic_path():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=32, n_layer=1, n_head=2, n_positions=64,
                                       bos_token_id=0, eos_token_id=0))
    model.train()  # GPT-2 has dropout: the engine must switch it off, then restore the mode
    eng = TorchEngine.from_model(model, policy_version="gpt2-test")
    assert eng.backend == "hf"
    prompts = [[1, 2, 3], [1, 2, 3], [4, 5]]
    params = SamplingParams(temperature=0.8, top_k=10, max_new_tokens=6)
    samples = eng.generate(prompts, params, seed=0)
    assert _max_gap(eng, prompts, samples, params) < TOL
    assert model.training and all(m.training for m in model.modules())
    with pytest.raises(ValueError, match="no fast decode path"):
        TorchEngine.from_model(model, policy_version="x", backend="fast")


def test_bad_inputs_get_named_errors(engine):
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        engine.generate([[1, 2], []], NUCLEUS, seed=0)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.generate([[1, engine.vocab_size]], NUCLEUS, seed=0)
    with pytest.raises(ConfigError, match="decoding.top_p"):
        engine.generate([[1, 2]], SamplingParams(top_p=0.0), seed=0)
    with pytest.raises(ValueError, match="completion 0: token id"):
        engine.score([1, 2], [3, -1], NUCLEUS)
    with pytest.raises(ValueError, match="sample_seeds"):
        engine.generate([[1, 2]], NUCLEUS, seed=0, sample_seeds=[1, 2])
    assert engine.generate([], NUCLEUS, seed=0) == []
    empty = engine.generate([[1, 2]], SamplingParams(max_new_tokens=0), seed=0)
    assert empty[0].token_ids == [] and empty[0].finish_reason == "length"


def test_sync_weights_changes_the_samples_and_stamps_version_and_step(policy_dir):
    eng = TorchEngine(policy_dir, policy_version="v-params")
    assert (eng.policy_version, eng.policy_step) == ("v-params", 0)
    state = {k: v.clone() for k, v in eng.model.state_dict().items()}
    prompt = [[1, 5, 9, 12]]
    before = eng.generate(prompt, NUCLEUS, seed=0)[0]
    state["model.norm.weight"] = state["model.norm.weight"] * 3
    eng.sync_weights(state, "v2", 1)
    assert (eng.policy_version, eng.policy_step) == ("v2", 1)
    after = eng.generate(prompt, NUCLEUS, seed=0)[0]
    assert after.logprobs != before.logprobs
    assert _max_gap(eng, prompt, [after], NUCLEUS) < TOL  # still the distribution it samples
    state["model.norm.weight"] += 1.0  # the engine copied the weights: the trainer's are its own
    assert eng.generate(prompt, NUCLEUS, seed=0)[0].logprobs == after.logprobs
    # a policy directory is a source too: back to the initial weights, same seeded sample
    eng.sync_weights(policy_dir, "v-params", 2)
    again = eng.generate(prompt, NUCLEUS, seed=0)[0]
    assert (again.token_ids, again.logprobs) == (before.token_ids, before.logprobs)
    assert eng.policy_step == 2
    with pytest.raises(ValueError, match="policy_step must be an int >= 0"):
        eng.sync_weights(state, "v3", -1)
    assert (eng.policy_version, eng.policy_step) == ("v-params", 2)


def test_torch_and_vllm_engines_are_token_engines_and_no_teacher_is(policy_dir):
    torch_engine = TorchEngine(policy_dir)
    vllm_engine = VllmEngine("http://127.0.0.1:9", policy_version="v0")  # nothing is sent
    openai = OpenAIEngine(OpenAITeacherParams(model="m", api_key_env=""))
    scripted = ScriptedTeacher()
    try:
        for eng in (torch_engine, vllm_engine):
            assert isinstance(eng, TokenEngine) and not isinstance(eng, Teacher)
            assert eng.policy_step == 0
        for teacher in (openai, scripted):
            assert isinstance(teacher, Teacher) and not isinstance(teacher, TokenEngine)
        bound = scripted.for_task(_teacher_task())
        assert isinstance(bound, TextEngine) and not isinstance(bound, TokenEngine)
        assert openai.for_task(_teacher_task()) is openai
    finally:
        for closable in (torch_engine, vllm_engine, openai, scripted):
            closable.close()


def _teacher_task():
    return teacher_view(count_task())


def test_factory_builds_engines_by_name(policy_dir):
    eng = build_engine("torch", policy_dir, policy_version="f", options={"share_prefix": False})
    assert isinstance(eng, TorchEngine) and eng.policy_version == "f"
    with pytest.raises(ConfigError, match="rollout.engine_options.shared: unknown key"):
        build_engine("torch", policy_dir, options={"shared": True})
