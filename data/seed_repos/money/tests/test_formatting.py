import pytest

from money import Money, format_code, format_money, group_digits, parse_amount, parse_money


def test_group_digits():
    assert group_digits("1234567") == "1,234,567"
    assert group_digits("123456") == "123,456"
    assert group_digits("123") == "123"
    assert group_digits("1234") == "1,234"
    assert group_digits("12345", " ") == "12 345"
    assert group_digits("") == ""


def test_group_digits_custom_size():
    assert group_digits("1234567", ",", 2) == "1,23,45,67"
    assert group_digits("12", ",", 2) == "12"
    assert group_digits("123", ".", 1) == "1.2.3"
    with pytest.raises(ValueError):
        group_digits("123", ",", 0)


def test_format_money_symbol_first():
    assert format_money(Money(123456789, "USD")) == "$1,234,567.89"
    assert format_money(Money(5, "USD")) == "$0.05"
    assert format_money(Money(0, "USD")) == "$0.00"


def test_format_money_symbol_after_and_separators():
    assert format_money(Money(123456, "EUR"), thousands=".", decimal=",") == "1.234,56€"


def test_format_money_zero_and_three_decimals():
    assert format_money(Money(1234567, "JPY")) == "¥1,234,567"
    assert format_money(Money(1234567, "KWD")) == "KD 1,234.567"


def test_format_money_negative_styles():
    assert format_money(Money(-150, "USD")) == "-$1.50"
    assert format_money(Money(-150, "USD"), negative="parens") == "($1.50)"
    assert format_money(Money(150, "USD"), negative="parens") == "$1.50"
    with pytest.raises(ValueError):
        format_money(Money(1, "USD"), negative="red")


def test_format_money_without_symbol():
    assert format_money(Money(100000, "USD"), symbol=False) == "1,000.00 USD"


def test_format_code():
    assert format_code(Money(-123450, "USD")) == "-1234.50 USD"


def test_parse_amount_basic():
    assert parse_amount("1,234.56", 2) == 123456
    assert parse_amount("12", 2) == 1200
    assert parse_amount("12.5", 2) == 1250
    assert parse_amount("0.05", 2) == 5
    assert parse_amount("  7 ", 0) == 7


def test_parse_amount_signs():
    assert parse_amount("-1.50", 2) == -150
    assert parse_amount("+1.50", 2) == 150
    assert parse_amount("(1.50)", 2) == -150
    assert parse_amount("- 2", 2) == -200
    with pytest.raises(ValueError):
        parse_amount("(-1.50)", 2)


def test_parse_amount_custom_separators():
    assert parse_amount("1.234,5", 2, thousands=".", decimal=",") == 123450
    assert parse_amount("1 000 000", 0, thousands=" ") == 1000000
    assert parse_amount("1234", 2, thousands="") == 123400


@pytest.mark.parametrize(
    "text",
    ["", "abc", "1.234", "12.", ".5", "1,23", "1234,567", ",123", "1,2345", "1.2.3", "--1", "1.5a", "(1", "(12", "12)", "$1"],
)
def test_parse_amount_rejects(text):
    with pytest.raises(ValueError):
        parse_amount(text, 2)


def test_parse_amount_grouping_boundaries():
    assert parse_amount("123,456", 2) == 12345600
    assert parse_amount("1,000", 0) == 1000


def test_parse_money_strips_symbol_and_code():
    assert parse_money("$1,234.56", "USD") == Money(123456, "USD")
    assert parse_money("-$0.99", "USD") == Money(-99, "USD")
    assert parse_money("12.00 USD", "usd") == Money(1200, "USD")
    assert parse_money("($5.00)", "USD") == Money(-500, "USD")
    assert parse_money("1.234,50€", "EUR", thousands=".", decimal=",") == Money(123450, "EUR")
    assert parse_money("¥500", "JPY") == Money(500, "JPY")


def test_format_parse_round_trip():
    for cents in (0, 1, -1, 99, 100000, -123456789):
        money = Money(cents, "USD")
        assert parse_money(format_money(money), "USD") == money
        assert parse_money(format_money(money, negative="parens"), "USD") == money
