"""Grammar-constrained decoding (`Decoding.grammar`): what the grammar admits parses, the
sampler's masks are the ones the trainer replays, and a sample not drawn under the grammar
cannot be scored as if it were."""
from __future__ import annotations

import pytest
import torch
from callkit import VALID_CALLS

from rlvr.agent.grammar import last_suspects, tool_call
from rlvr.agent.prompt import SYSTEM_PROMPT
from rlvr.agent.tools import format_tool_call, parse_action
from rlvr.agent.transcript import ChatCodec
from rlvr.chat_format import IM_END
from rlvr.engines.base import Decoding, SamplingParams
from rlvr.engines.constraint import GrammarError
from rlvr.engines.grammars import grammar_source, is_context_free, register_grammar
from rlvr.engines.sampling import allowed_mask, process_logits
from rlvr.engines.torch_engine import TorchEngine
from rlvr.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def grammar(engine):
    return engine.grammar("tool_call")


def _turn_ids(engine, text: str) -> list[int]:
    return engine.tokenizer.encode(text) + [engine.tokenizer.convert_tokens_to_ids(IM_END)]


def _prompt(engine) -> list[int]:
    return engine.tokenizer.encode("<|im_start|>user\nfix it<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.parametrize("name,args", VALID_CALLS)
def test_every_canonical_call_is_in_the_grammar(engine, grammar, name, args):
    """What the scripted teacher and pretraining write (`format_tool_call`) is admitted, with
    or without reasoning, so SFT imitates text the constrained sampler can produce."""
    for reasoning in ("", "Try `x < 1` -> `x <= 1` first."):
        ids = _turn_ids(engine, format_tool_call(name, args, reasoning))
        masks = grammar.replay(ids)
        assert masks.shape == (len(ids), grammar.words)


@pytest.mark.parametrize("text", [
    '<tool_call>{"name": "submit", "args": {}}</tool_call><tool_call>{"name": "submit", '
    '"args": {}}</tool_call>',                                    # two calls
    '<tool_call>{"name":"submit","args":{}}</tool_call>',        # not the canonical separators
    '<tool_call>{"args": {}, "name": "submit"}</tool_call>',     # keys out of order
    '<tool_call>{"name": "view", "args": {"path": "a", "start": 0}}</tool_call>',  # schema
    '<tool_call>{"name": "rm", "args": {}}</tool_call>',
    'no call at all',
])
def test_what_the_grammar_refuses_raises_on_replay(engine, grammar, text):
    with pytest.raises(GrammarError, match="outside the grammar"):
        grammar.replay(_turn_ids(engine, text))


def test_reasoning_cannot_spell_a_marker_with_ordinary_tokens(engine, grammar):
    """The parser reads text, so `<tool_call>` spelled out of ordinary tokens in the reasoning
    would open a second call: the grammar's reasoning excludes every special token's text."""
    tok = engine.tokenizer
    spelled = tok.encode("I call <") + tok.encode("tool_call> now\n")
    assert tok.convert_tokens_to_ids("<tool_call>") not in spelled
    call = _turn_ids(engine, format_tool_call("submit", {}))
    grammar.replay(tok.encode("I call now\n") + call)  # the same reasoning without it is fine
    with pytest.raises(GrammarError, match="outside the grammar"):
        grammar.replay(spelled + call)


def test_marker_text_inside_an_argument_parses():
    """The parser reads the call as the JSON value after <tool_call>, so an argument holding a
    marker's spelling (which the grammar's strings allow) is not a second call."""
    text = format_tool_call("edit", {"path": "a.py", "old": "</tool_call>", "new": "<tool_call>"})
    parsed = parse_action(text)
    assert parsed.valid, parsed.error
    assert parsed.call.args["old"] == "</tool_call>"


def test_unknown_grammar_is_a_named_error():
    with pytest.raises(ConfigError, match="decoding.grammar: unknown grammar 'json'") as info:
        Decoding(grammar="json")
    assert "tool_call, tool_call.hermes" in str(info.value) and "tool_call_fixes" in str(info.value)  # the agent registered its own


def test_the_agent_registers_its_grammars_and_a_taken_name_is_refused():
    """The engines name no grammar: rlvr.agent.grammar registers both at import, and only a
    re-import of the same function may register a name again."""
    assert grammar_source("tool_call") == tool_call()
    assert is_context_free("tool_call") and not is_context_free("tool_call_fixes")
    register_grammar("tool_call", tool_call, context_free=True)  # a re-import: a no-op
    with pytest.raises(ValueError, match="'tool_call' is already registered by "
                                         "rlvr.agent.grammar:tool_call"):
        register_grammar("tool_call", lambda transcript: "start: \"x\"", context_free=True)


def test_allowed_mask_unpacks_llguidance_bit_order():
    words = torch.tensor([[0b101, -1 << 31]], dtype=torch.int32)  # tokens 0, 2 and 63
    got = allowed_mask(words, 64)[0].nonzero().squeeze(1).tolist()
    assert got == [0, 2, 63]
    lp = process_logits(torch.zeros(1, 64), allowed=words)
    assert torch.allclose(lp[0, [0, 2, 63]].exp(), torch.full((3,), 1 / 3))
    assert torch.isinf(lp[0, 1]) and lp[0, 1] < 0


def test_constrained_samples_parse_and_score_exactly(policy_dir):
    """Every sample that ends its turn parses; every sample (ended or cut by the budget) is a
    grammar prefix whose replayed masks reproduce the behaviour logprobs the sampler
    recorded (the masks are the sampler's, bit for bit, or the normalisers would differ)."""
    engine = TorchEngine(policy_dir, compact_below=0.95)  # compact as soon as 2 slots idle
    stop = engine.tokenizer.convert_tokens_to_ids(IM_END)
    params = SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=160,
                            stop_token_ids=(stop,), grammar="tool_call")
    prompt = _prompt(engine)
    # two groups whose samples end at different steps: finished slots are compacted out of
    # the batch and a group's spare slots become dummies, which sample under no matcher
    prompts = [prompt] * 7 + [prompt[:-3]] * 5
    samples = engine.generate(prompts, params, seed=3)
    ended = [s for s in samples if s.finish_reason == "stop"]
    assert ended, "no sample ended its turn (raise max_new_tokens)"
    for s in ended:
        text = engine.tokenizer.decode(s.token_ids[:-1], skip_special_tokens=False)
        assert parse_action(text).valid, text
    assert engine.last_stats["slot_steps"] < 2 * 7 * engine.last_stats["decode_steps"]  # compacted
    scored = engine.score_batch(prompts, [s.token_ids for s in samples], params)
    gap = max(abs(a - b) for s, c in zip(samples, scored) for a, b in zip(s.logprobs, c))
    assert gap < 1e-4
    # the same tokens scored without the grammar are a different (wider) distribution
    free = engine.score_batch([prompt], [ended[0].token_ids],
                              SamplingParams(temperature=1.0, top_p=0.95))[0]
    assert sum(free) < sum(ended[0].logprobs) - 1e-3


def test_unconstrained_tokens_cannot_be_scored_under_the_grammar(engine):
    stop = engine.tokenizer.convert_tokens_to_ids(IM_END)
    free = SamplingParams(temperature=1.0, max_new_tokens=40, stop_token_ids=(stop,))
    samples = engine.generate([_prompt(engine)] * 4, free, seed=0)
    with pytest.raises(GrammarError, match="not sampled under it"):
        engine.score_batch([_prompt(engine)] * 4, [s.token_ids for s in samples],
                           SamplingParams(temperature=1.0, grammar="tool_call"))


def test_grammar_sampling_is_seeded_per_sample(engine):
    stop = engine.tokenizer.convert_tokens_to_ids(IM_END)
    params = SamplingParams(temperature=1.0, max_new_tokens=48, stop_token_ids=(stop,),
                            grammar="tool_call")
    p = _prompt(engine)
    alone = engine.generate([p], params, seed=5, sample_seeds=[7])[0]
    batched = engine.generate([p[:4], p, p], params, seed=5, sample_seeds=[1, 7, 2])[1]
    assert alone.token_ids == batched.token_ids


# ---- the grammar narrowed to the observed state (tool_call_fixes) ---------------------
LISTING = ("F.\n___ test_count ___\nassert 3 == 2\n"
           "suspicious lines (run by failing tests, not by passing ones):\n"
           "mini/core.py:4: if v <= limit:  [1 failing, 0 passing]\n"
           "mini/core.py:5: total += 1  [1 failing, 1 passing]\n")


def _after(codec, *turns: tuple[str, str]) -> list[int]:
    """A prompt: the episode's opening, then (action text, observation) turns."""
    ids = codec.initial_prompt(SYSTEM_PROMPT, "count_below counts one too many. Fix it.")
    for action, observation in turns:
        ids += codec.encode_action(action) + [codec.im_end]
        ids += codec.observation_segment(observation, close_turn=False)
    return ids


RUN = format_tool_call("run_tests", {}, "Run the tests.")


def _edit(engine, args) -> list[int]:
    return _turn_ids(engine, format_tool_call("edit", args, "Try it."))


def test_fixes_grammar_admits_only_named_fixes_with_a_site_on_a_listed_line(engine, policy_dir):
    codec = ChatCodec.from_model_dir(policy_dir)
    g = engine.grammar("tool_call_fixes")
    prompt = _after(codec, (RUN, LISTING))
    for args in ({"suspect": 1, "fix": "<"}, {"suspect": 1, "fix": "not"},
                 {"suspect": 2, "fix": "-"}, {"suspect": 2, "fix": "-1"}):
        g.replay(_edit(engine, args), prompt)
    for args in ({"suspect": 1, "fix": "<="},          # the line is already `<=`
                 {"suspect": 1, "fix": "+1"},          # no int literal on line 4
                 {"suspect": 1, "fix": "<", "nth": 2},  # one site only
                 {"suspect": 3, "fix": "<"},           # two lines were listed
                 {"suspect": 2, "old": "+=", "new": "-="},  # copied text: outside
                 {"path": "mini/core.py", "line": 4, "old": "<=", "new": "<"}):
        with pytest.raises(GrammarError, match="outside the grammar"):
            g.replay(_edit(engine, args), prompt)
    for name, args in (("run_tests", {}), ("view", {"path": "mini/core.py"}), ("submit", {})):
        g.replay(_turn_ids(engine, format_tool_call(name, args)), prompt)
    # before any listing there is no edit at all
    with pytest.raises(GrammarError):
        g.replay(_edit(engine, {"suspect": 1, "fix": "<"}), _after(codec))
    # whatever it admits parses against the contract's own schemas
    assert parse_action(format_tool_call("edit", {"suspect": 2, "fix": "-1"})).valid


def test_the_suspects_are_the_executors(policy_dir):
    """The last run_tests that ran sets them; an error observation leaves them; an
    infrastructure failure clears them; an invalid call is no run_tests."""
    codec = ChatCodec.from_model_dir(policy_dir)
    text = lambda *turns: codec.decode(_after(codec, *turns))  # noqa: E731
    assert [s.line for s in last_suspects(text((RUN, LISTING)))] == [4, 5]
    bad_path = format_tool_call("run_tests", {"path": "nope.py"})
    assert len(last_suspects(text((RUN, LISTING), (bad_path, "error: nope.py is not a "
                                                   "public test")))) == 2
    infra = "error: the test sandbox failed (X); this is not your fault"
    assert last_suspects(text((RUN, LISTING), (RUN, infra))) == []
    assert last_suspects(text((RUN, LISTING), (RUN, "..\n2 passed"))) == []
    assert len(last_suspects(text((RUN, LISTING), ('<tool_call>{"name": "run_tests"}',
                                                   "error: invalid tool call")))) == 2


def test_an_applied_edit_updates_the_line_it_addressed(policy_dir):
    """A named fix that applied rewrites the shown line, so its undo (the inverse fix) is
    admitted without running the tests again, and a failed edit changes nothing."""
    codec = ChatCodec.from_model_dir(policy_dir)
    fix = format_tool_call("edit", {"suspect": 1, "fix": "<"})
    text = lambda *turns: codec.decode(_after(codec, (RUN, LISTING), *turns))  # noqa: E731
    assert last_suspects(text((fix, "edited mini/core.py line 4")))[0].text == "if v < limit:"
    assert last_suspects(text((fix, "error: mini/core.py: fix '<': no site")))[0].text \
        == "if v <= limit:"
    by_line = format_tool_call("edit", {"path": "mini/core.py", "line": 5, "old": "+=",
                                        "new": "-="})
    assert last_suspects(text((by_line, "edited mini/core.py")))[1].text == "total -= 1"


def test_state_dependent_samples_replay_from_their_prompts(policy_dir):
    """Per-sample grammars (each prompt its own state) are replayed from each prompt."""
    engine = TorchEngine(policy_dir)
    codec = ChatCodec.from_model_dir(policy_dir)
    params = SamplingParams(temperature=1.0, max_new_tokens=96, stop_token_ids=(codec.im_end,),
                            grammar="tool_call_fixes")
    prompts = [_after(codec, (RUN, LISTING))] * 3 + [_after(codec)] * 3
    samples = engine.generate(prompts, params, seed=1)
    scored = engine.score_batch(prompts, [s.token_ids for s in samples], params)
    gap = max(abs(a - b) for s, c in zip(samples, scored) for a, b in zip(s.logprobs, c))
    assert gap < 1e-4
