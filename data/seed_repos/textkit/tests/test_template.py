import pytest

from textkit import TemplateError, escape, parse_template, placeholders, render


def test_parse_template_tokens():
    assert parse_template("Hi {name}!") == ["Hi ", ("name", None), "!"]
    assert parse_template("{a}{b|x}") == [("a", None), ("b", "x")]
    assert parse_template("") == []
    assert parse_template("plain") == ["plain"]


def test_parse_template_strips_names_and_keeps_default_verbatim():
    assert parse_template("{ name | Sir }") == [("name", " Sir ")]
    assert parse_template("{name|}") == [("name", "")]


def test_parse_template_escaped_braces():
    assert parse_template("{{x}}") == ["{x}"]
    assert parse_template("a{{b") == ["a{b"]


def test_parse_template_errors():
    with pytest.raises(TemplateError):
        parse_template("Hi {name")
    with pytest.raises(TemplateError):
        parse_template("Hi }")
    with pytest.raises(TemplateError):
        parse_template("Hi { }")
    with pytest.raises(TemplateError):
        parse_template("x}")


def test_placeholders_unique_in_order():
    assert placeholders("{b} {a} {b} {c|z}") == ["b", "a", "c"]
    assert placeholders("no fields {{here}}") == []


def test_render_simple():
    assert render("Hello, {name}!", {"name": "Ada"}) == "Hello, Ada!"
    assert render("{n} items", {"n": 3}) == "3 items"


def test_render_nested_lookup():
    context = {"user": {"name": "Ada", "tags": {"lang": "en"}}}
    assert render("{user.name} ({user.tags.lang})", context) == "Ada (en)"


def test_render_default_used_only_when_missing():
    assert render("Hi {name|there}", {}) == "Hi there"
    assert render("Hi {name|there}", {"name": "Bob"}) == "Hi Bob"
    assert render("Hi {name|}", {}) == "Hi "
    assert render("{user.name|anon}", {"user": {}}) == "anon"


def test_render_falsy_values_are_not_missing():
    assert render("{n|default}", {"n": 0}) == "0"
    assert render("[{s|default}]", {"s": ""}) == "[]"


def test_render_missing_strict_raises():
    with pytest.raises(KeyError):
        render("Hi {name}", {})
    with pytest.raises(KeyError):
        render("{user.name}", {"user": "not a mapping"})


def test_render_missing_non_strict_keeps_placeholder():
    assert render("Hi {name}!", {}, strict=False) == "Hi {name}!"


def test_escape_round_trip():
    assert escape("{a}") == "{{a}}"
    assert render(escape("{literal} }{"), {}) == "{literal} }{"
