import pytest

from datekit import (
    MONTH_NAMES,
    Date,
    format_date,
    format_long,
    format_relative,
    from_tuple,
    month_name,
    ordinal_suffix,
    parse_date,
    parse_flexible,
    parse_month_name,
    to_tuple,
)


def test_format_date_padding_and_separator():
    assert format_date(Date(2024, 3, 5)) == "2024-03-05"
    assert format_date(Date(45, 11, 20)) == "0045-11-20"
    assert format_date(Date(2024, 3, 5), separator="/") == "2024/03/05"


def test_parse_date_valid():
    assert parse_date("2024-03-05") == Date(2024, 3, 5)
    assert parse_date(" 2024-12-31\n") == Date(2024, 12, 31)


def test_parse_date_round_trip():
    date = Date(1999, 10, 9)
    assert parse_date(format_date(date)) == date


@pytest.mark.parametrize(
    "text",
    ["2024-3-05", "2024/03/05", "24-03-05", "2024-02-30", "2024-13-01", "2024-0a-01", "20240-3-05", "2024-03-+5"],
)
def test_parse_date_rejects_malformed(text):
    with pytest.raises(ValueError):
        parse_date(text)


def test_month_name():
    assert month_name(1) == "January"
    assert month_name(12) == "December"
    assert month_name(9, abbreviated=True) == "Sep"
    with pytest.raises(ValueError):
        month_name(0)
    with pytest.raises(ValueError):
        month_name(13)
    assert len(MONTH_NAMES) == 12


def test_parse_month_name():
    assert parse_month_name("January") == 1
    assert parse_month_name(" dec ") == 12
    assert parse_month_name("SEPTEMBER") == 9
    assert parse_month_name("May") == 5


def test_parse_month_name_rejects_unknown_and_short():
    with pytest.raises(ValueError):
        parse_month_name("Ja")
    with pytest.raises(ValueError):
        parse_month_name("Janu")
    with pytest.raises(ValueError):
        parse_month_name("Smarch")


def test_ordinal_suffix():
    expected = {1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 10: "10th", 11: "11th", 12: "12th",
                13: "13th", 14: "14th", 21: "21st", 22: "22nd", 23: "23rd", 101: "101st",
                111: "111th", 113: "113th", 0: "0th"}
    assert {n: ordinal_suffix(n) for n in expected} == expected


def test_format_long():
    assert format_long(Date(2024, 3, 5)) == "March 5, 2024"
    assert format_long(Date(2024, 3, 22), ordinal=True) == "March 22nd, 2024"


def test_parse_flexible_variants():
    expected = Date(2024, 3, 5)
    assert parse_flexible("2024-03-05") == expected
    assert parse_flexible("2024/3/5") == expected
    assert parse_flexible("05.03.2024") == expected
    assert parse_flexible("March 5, 2024") == expected
    assert parse_flexible("mar 5 2024") == expected
    assert parse_flexible("  2024/03/05 ") == expected
    assert parse_flexible(" March 5, 2024\n") == expected


@pytest.mark.parametrize("text", ["2024/03", "1.2.3.4", "March 2024", "2024/02/30", "Foo 1, 2024"])
def test_parse_flexible_rejects(text):
    with pytest.raises(ValueError):
        parse_flexible(text)


def test_format_relative():
    assert format_relative(0) == "today"
    assert format_relative(1) == "tomorrow"
    assert format_relative(-1) == "yesterday"
    assert format_relative(2) == "in 2 days"
    assert format_relative(-3) == "3 days ago"


def test_tuple_conversion():
    assert to_tuple(Date(2024, 1, 2)) == (2024, 1, 2)
    assert from_tuple((2024, 1, 2)) == Date(2024, 1, 2)
    with pytest.raises(ValueError):
        from_tuple((2024, 1))
    with pytest.raises(ValueError):
        from_tuple((2023, 2, 29))
