import pytest

from intervals import Interval, format_interval, format_number, parse_interval, parse_many, parse_number


def test_parse_number():
    assert parse_number("3") == 3
    assert isinstance(parse_number(" 3 "), int)
    assert parse_number("2.5") == 2.5
    assert parse_number("-inf") == float("-inf")
    assert parse_number("INF") == float("inf")
    assert parse_number("+inf") == float("inf")
    assert parse_number(" -Inf ") == float("-inf")
    with pytest.raises(ValueError):
        parse_number("abc")


def test_parse_interval_bound_types():
    assert parse_interval("[1, 5)") == Interval(1, 5, True, False)
    assert parse_interval("(1,5]") == Interval(1, 5, False, True)
    assert parse_interval(" (0.5, 2.5) ") == Interval(0.5, 2.5, False, False)
    assert parse_interval("[-inf, 0]") == Interval(float("-inf"), 0, True, True)


def test_parse_interval_degenerate():
    assert parse_interval("[3]") == Interval(3, 3)
    with pytest.raises(ValueError):
        parse_interval("(3]")
    with pytest.raises(ValueError):
        parse_interval("[3)")


@pytest.mark.parametrize("text", ["", "[]", "1, 2]", "[1, 2", "{1, 2}", "[1, 2, 3]", "[5, 1]", "[a, b]", "[1, 2}", "<1, 2]"])
def test_parse_interval_rejects(text):
    with pytest.raises(ValueError):
        parse_interval(text)


def test_format_number():
    assert format_number(3) == "3"
    assert format_number(3.0) == "3"
    assert format_number(2.5) == "2.5"
    assert format_number(float("inf")) == "inf"
    assert format_number(float("-inf")) == "-inf"


def test_format_interval():
    assert format_interval(Interval(1, 5, True, False)) == "[1, 5)"
    assert format_interval(Interval(1.0, 2.5, False, True)) == "(1, 2.5]"
    assert format_interval(Interval(3, 3)) == "[3]"
    assert format_interval(Interval(3, 3, True, False)) == "[3, 3)"
    assert format_interval(Interval(3, 3, False, True)) == "(3, 3]"


def test_round_trip():
    for text in ["[1, 5)", "(0, 2]", "[3]", "(-inf, 0)"]:
        assert format_interval(parse_interval(text)) == text


def test_parse_many():
    assert parse_many("[0, 1); (2, 3]") == [Interval(0, 1, True, False), Interval(2, 3, False, True)]
    assert parse_many(" ; [1] ;") == [Interval(1, 1)]
    assert parse_many("[0, 1) | [2, 3)", separator="|") == [
        Interval(0, 1, True, False),
        Interval(2, 3, True, False),
    ]
    assert parse_many("") == []
