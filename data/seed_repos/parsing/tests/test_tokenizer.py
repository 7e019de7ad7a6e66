import pytest

from parsing import Token, TokenizeError, read_name, read_number, token_kinds, tokenize


def test_tokenize_simple_expression():
    assert tokenize("1 + x") == [
        Token("NUMBER", "1", 0),
        Token("OP", "+", 2),
        Token("NAME", "x", 4),
        Token("EOF", "", 5),
    ]


def test_tokenize_all_token_kinds():
    assert token_kinds("f(a, 2)^3") == ["NAME", "LPAREN", "NAME", "COMMA", "NUMBER", "RPAREN", "OP", "NUMBER"]


def test_tokenize_every_operator():
    assert [t.value for t in tokenize("+-*/%^")[:-1]] == list("+-*/%^")


def test_tokenize_empty_and_whitespace():
    assert tokenize("") == [Token("EOF", "", 0)]
    assert tokenize(" \t ") == [Token("EOF", "", 3)]


def test_tokenize_positions_skip_whitespace():
    toks = tokenize("  12 *  ab_3")
    assert [(t.value, t.pos) for t in toks] == [("12", 2), ("*", 5), ("ab_3", 8), ("", 12)]


def test_tokenize_decimal_numbers():
    assert [t.value for t in tokenize("3.25 .5 7.")[:-1]] == ["3.25", ".5", "7."]


def test_tokenize_rejects_bad_character():
    with pytest.raises(TokenizeError) as info:
        tokenize("1 + $")
    assert info.value.pos == 4
    assert "position 4" in str(info.value)


def test_read_number_boundaries():
    assert read_number("123+4", 0) == ("123", 3)
    assert read_number("x=4.5)", 2) == ("4.5", 5)
    assert read_number("9", 0) == ("9", 1)


def test_read_number_rejects_malformed():
    for text in (".", "1.2.3", "12abc", "3._"):
        with pytest.raises(TokenizeError):
            read_number(text, 0)


def test_read_number_error_position():
    with pytest.raises(TokenizeError) as info:
        tokenize("2 + 3x")
    assert info.value.pos == 4


def test_read_name():
    assert read_name("abc_9+1", 0) == ("abc_9", 5)
    assert read_name("1 + Zeta", 4) == ("Zeta", 8)
    assert read_name("_", 0) == ("_", 1)


def test_name_boundaries_of_letter_ranges():
    assert token_kinds("a z A Z _q") == ["NAME"] * 5
    for ch in "@[`{":
        with pytest.raises(TokenizeError):
            tokenize(ch)


def test_tokenize_tight_commas_and_parens():
    toks = tokenize("f(a,b)")
    assert [(t.value, t.pos) for t in toks] == [("f", 0), ("(", 1), ("a", 2), (",", 3), ("b", 4), (")", 5), ("", 6)]
