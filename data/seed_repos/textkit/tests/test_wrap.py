import pytest

from textkit import center, dedent, fill, indent, pad_left, pad_right, truncate, truncate_words, wrap


def test_wrap_greedy():
    assert wrap("the quick brown fox jumps", 10) == ["the quick", "brown fox", "jumps"]


def test_wrap_exact_width_fits_on_one_line():
    assert wrap("ab cd", 5) == ["ab cd"]
    assert wrap("ab cd", 4) == ["ab", "cd"]


def test_wrap_width_one():
    assert wrap("a b", 1) == ["a", "b"]


def test_wrap_breaks_long_words():
    assert wrap("abcdefghij kl", 4) == ["abcd", "efgh", "ij", "kl"]
    assert wrap("xy abcdefgh", 4) == ["xy", "abcd", "efgh"]
    assert wrap("abcd", 4) == ["abcd"]


def test_wrap_normalises_whitespace_and_empty():
    assert wrap("  a \n\t b  ", 10) == ["a b"]
    assert wrap("", 5) == []
    assert wrap("   ", 5) == []


def test_wrap_rejects_bad_width():
    with pytest.raises(ValueError):
        wrap("abc", 0)


def test_fill_joins_lines():
    assert fill("one two three", 7) == "one two\nthree"


def test_truncate_short_text_untouched():
    assert truncate("hello", 5) == "hello"
    assert truncate("hello", 10) == "hello"


def test_truncate_adds_ellipsis():
    assert truncate("hello world", 8) == "hello..."
    assert truncate("hello world", 4) == "h..."
    assert len(truncate("hello world", 7)) == 7


def test_truncate_limit_not_larger_than_ellipsis():
    assert truncate("hello world", 3) == "..."
    assert truncate("hello world", 2) == ".."
    assert truncate("hello world", 0) == ""


def test_truncate_custom_ellipsis_and_negative_limit():
    assert truncate("abcdef", 4, ellipsis="~") == "abc~"
    with pytest.raises(ValueError):
        truncate("abc", -1)


def test_truncate_words():
    assert truncate_words("one two three four", 2) == "one two..."
    assert truncate_words("one two", 2) == "one two"
    assert truncate_words("one  two", 5) == "one two"
    assert truncate_words("one two", 0, ellipsis="…") == "…"
    with pytest.raises(ValueError):
        truncate_words("x", -1)


def test_pad_left_and_right():
    assert pad_left("7", 3, "0") == "007"
    assert pad_right("ab", 4, ".") == "ab.."
    assert pad_left("abcd", 3) == "abcd"
    assert pad_right("abc", 3) == "abc"
    assert pad_left("ab", 3) == " ab"


def test_pad_rejects_bad_fill():
    with pytest.raises(ValueError):
        pad_left("a", 3, "")
    with pytest.raises(ValueError):
        pad_right("a", 3, "xy")
    with pytest.raises(ValueError):
        center("a", 3, "--")


def test_center_even_and_odd_padding():
    assert center("ab", 6, "*") == "**ab**"
    assert center("ab", 5, "*") == "*ab**"
    assert center("ab", 3) == "ab "
    assert center("abc", 2) == "abc"


def test_indent_skips_blank_lines_by_default():
    assert indent("a\n\n  \nb", "> ") == "> a\n\n  \n> b"


def test_indent_all_lines():
    assert indent("a\n\nb", "# ", skip_blank=False) == "# a\n# \n# b"


def test_dedent_removes_common_margin():
    assert dedent("    a\n      b\n    c") == "a\n  b\nc"


def test_dedent_ignores_blank_lines_for_margin():
    assert dedent("  a\n\n   b") == "a\n\n b"
    assert dedent("   x\n ") == "x\n"
    assert dedent("\n  a\n    b") == "\na\n  b"


def test_dedent_no_margin_is_identity():
    assert dedent("a\n  b") == "a\n  b"
    assert dedent("") == ""
