import pytest

from parsing import Config, ConfigError, dump_ini, parse_ini, split_key_value, strip_inline_comment, unquote
from parsing.config import format_value, is_comment

SAMPLE = """\
; global settings
timeout = 30
debug = no

[server]
Host = example.org
port: 8080
tags = a, b,, c
motd = first line
    second line
  third line

# comment
[client]
retries = 3
name = "quoted ; value"
path = /tmp/x ; trailing comment
"""


def test_parse_ini_sections_and_defaults():
    data = parse_ini(SAMPLE)
    assert list(data) == ["DEFAULT", "server", "client"]
    assert data["DEFAULT"] == {"timeout": "30", "debug": "no"}
    assert data["server"]["host"] == "example.org"
    assert data["server"]["port"] == "8080"


def test_parse_ini_continuation_lines():
    assert parse_ini(SAMPLE)["server"]["motd"] == "first line\nsecond line\nthird line"


def test_parse_ini_quotes_and_inline_comments():
    client = parse_ini(SAMPLE)["client"]
    assert client["name"] == "quoted ; value"
    assert client["path"] == "/tmp/x"


def test_parse_ini_duplicate_key_reports_line():
    with pytest.raises(ConfigError) as info:
        parse_ini("[a]\nx = 1\nX = 2\n")
    assert info.value.lineno == 3
    assert str(info.value).startswith("line 3:")


def test_parse_ini_same_key_in_different_sections_is_fine():
    assert parse_ini("[a]\nx=1\n[b]\nx=2") == {"a": {"x": "1"}, "b": {"x": "2"}}


def test_parse_ini_reopened_section_merges():
    assert parse_ini("[a]\nx=1\n[b]\n[a]\ny=2") == {"a": {"x": "1", "y": "2"}, "b": {}}


def test_parse_ini_malformed_header_and_line():
    for text in ("[a\nx=1", "[]", "[a]\njunk"):
        with pytest.raises(ConfigError):
            parse_ini(text)
    assert parse_ini("[ a ]") == {"a": {}}


def test_parse_ini_empty_key():
    with pytest.raises(ConfigError) as info:
        parse_ini("\n\n = value")
    assert info.value.lineno == 3


def test_continuation_after_header_is_parsed_as_option():
    assert parse_ini("[a]\n  k = v") == {"a": {"k": "v"}}


def test_is_comment():
    assert is_comment("")
    assert is_comment("# x")
    assert is_comment("; x")
    assert not is_comment("x = 1")


def test_strip_inline_comment():
    assert strip_inline_comment("abc ; note") == "abc"
    assert strip_inline_comment("abc\t# note") == "abc"
    assert strip_inline_comment("a;b") == "a;b"
    assert strip_inline_comment("#x") == "#x"
    assert strip_inline_comment("") == ""


def test_unquote():
    assert unquote('"hi"') == "hi"
    assert unquote("'hi'") == "hi"
    assert unquote('"hi\'') == '"hi\''
    assert unquote('"') == '"'
    assert unquote('""') == ""
    assert unquote("plain") == "plain"


def test_split_key_value_first_separator_wins():
    assert split_key_value("url = http://x", 1) == ("url", "http://x")
    assert split_key_value("a: b = c", 1) == ("a", "b = c")
    assert split_key_value("KEY=", 1) == ("key", "")
    assert split_key_value("k = 'v' # c", 1) == ("k", "v")


def test_config_get_with_default_fallback():
    cfg = Config(SAMPLE)
    assert cfg.get("server", "HOST") == "example.org"
    assert cfg.get("server", "timeout") == "30"
    assert cfg.get("server", "missing", "dflt") == "dflt"
    assert cfg.get("nosuch", "timeout") is None


def test_config_sections_and_options():
    cfg = Config(SAMPLE)
    assert cfg.sections() == ["server", "client"]
    assert cfg.has_section("client")
    assert not cfg.has_section("DEFAULT")
    assert cfg.options("client") == ["debug", "name", "path", "retries", "timeout"]
    with pytest.raises(ConfigError):
        cfg.options("nosuch")


def test_config_has_option():
    cfg = Config(SAMPLE)
    assert cfg.has_option("server", "PORT")
    assert cfg.has_option("server", "timeout")
    assert not cfg.has_option("server", "retries")
    assert not cfg.has_option("nosuch", "timeout")


def test_config_require():
    cfg = Config(SAMPLE)
    assert cfg.require("client", "retries") == "3"
    with pytest.raises(ConfigError):
        cfg.require("client", "nope")


def test_config_get_int_and_bounds():
    cfg = Config(SAMPLE)
    assert cfg.get_int("server", "port") == 8080
    assert cfg.get_int("server", "port", minimum=8080, maximum=8080) == 8080
    assert cfg.get_int("server", "absent", default=5) == 5
    with pytest.raises(ConfigError):
        cfg.get_int("server", "port", minimum=8081)
    with pytest.raises(ConfigError):
        cfg.get_int("server", "port", maximum=8079)
    with pytest.raises(ConfigError):
        cfg.get_int("server", "host")


def test_config_get_bool():
    cfg = Config("[f]\na = Yes\nb = off\nc = 1\nd = maybe\ne = FALSE")
    assert cfg.get_bool("f", "a") is True
    assert cfg.get_bool("f", "b") is False
    assert cfg.get_bool("f", "c") is True
    assert cfg.get_bool("f", "e") is False
    assert cfg.get_bool("f", "zz", default=True) is True
    with pytest.raises(ConfigError):
        cfg.get_bool("f", "d")


def test_config_get_list():
    cfg = Config(SAMPLE)
    assert cfg.get_list("server", "tags") == ["a", "b", "c"]
    assert cfg.get_list("server", "host", sep=".") == ["example", "org"]
    assert cfg.get_list("server", "none") == []


def test_dump_ini_round_trip():
    data = parse_ini(SAMPLE)
    text = dump_ini(data)
    assert parse_ini(text) == data
    assert text.startswith("[DEFAULT]\n")


def test_dump_ini_layout():
    assert dump_ini({"b": {"y": 1, "x": "a\nb"}, "a": {}}) == "[a]\n\n[b]\nx = a\n    b\ny = 1\n"
    assert dump_ini({}) == ""


def test_format_value_quotes_only_when_needed():
    assert format_value("plain") == "plain"
    assert format_value(7) == "7"
    assert format_value("a ; b") == '"a ; b"'
    assert format_value(" pad") == '" pad"'
    assert format_value('"x" y') == "'\"x\" y'"
    assert format_value("") == ""


def test_strip_inline_comment_at_second_character():
    assert strip_inline_comment(" ; note") == ""
    assert strip_inline_comment("x #") == "x"


def test_error_messages_distinguish_problems():
    with pytest.raises(ConfigError, match="empty key"):
        parse_ini("= value")
    with pytest.raises(ConfigError, match="expected key = value"):
        parse_ini("novalue")
    with pytest.raises(ConfigError, match="malformed section header"):
        parse_ini("[x")


def test_indented_line_after_header_does_not_continue_previous_section():
    assert parse_ini("[a]\nx = 1\n[b]\n  k = v") == {"a": {"x": "1"}, "b": {"k": "v"}}


def test_empty_quoted_value_followed_by_comment():
    assert split_key_value('k = "" ; see "docs"', 1) == ("k", "")
