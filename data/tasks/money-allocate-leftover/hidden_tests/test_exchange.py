from fractions import Fraction

import pytest

from money import CEILING, ExchangeError, Money, RateTable


def make_table():
    table = RateTable("USD")
    table.set_rate("EUR", "0.9")
    table.set_rate("JPY", 150)
    table.set_rate("GBP", "0.8")
    return table


def test_rate_direct_and_inverse():
    table = make_table()
    assert table.rate("USD", "EUR") == Fraction(9, 10)
    assert table.rate("EUR", "USD") == Fraction(10, 9)
    assert table.rate("usd", "usd") == 1


def test_cross_rate():
    table = make_table()
    assert table.rate("EUR", "GBP") == Fraction(8, 9)
    assert table.rate("GBP", "JPY") == Fraction(375, 2)


def test_convert_rounds_to_target_minor_units():
    table = make_table()
    assert table.convert(Money(10000, "USD"), "EUR") == Money(9000, "EUR")
    assert table.convert(Money(1000, "EUR"), "JPY") == Money(1667, "JPY")
    assert table.convert(Money(1000, "JPY"), "USD") == Money(667, "USD")
    assert table.convert(Money(100, "EUR"), "USD") == Money(111, "USD")
    assert table.convert(Money(100, "EUR"), "USD", CEILING) == Money(112, "USD")


def test_convert_same_currency_is_identity():
    money = Money(123, "USD")
    assert make_table().convert(money, "USD") is money


def test_convert_missing_rate():
    with pytest.raises(ExchangeError):
        make_table().convert(Money(100, "USD"), "CHF")
    with pytest.raises(ExchangeError):
        make_table().rate("CHF", "USD")


def test_set_rate_validation():
    table = RateTable("USD")
    with pytest.raises(ValueError):
        table.set_rate("EUR", 0)
    with pytest.raises(ValueError):
        table.set_rate("EUR", "-1")
    with pytest.raises(ValueError):
        table.set_rate("USD", 2)
    table.set_rate("USD", 1)
    assert table.currencies() == ["USD"]


def test_has_rate_and_currencies():
    table = make_table()
    assert table.has_rate("eur") is True
    assert table.has_rate("CHF") is False
    assert table.currencies() == ["EUR", "GBP", "JPY", "USD"]


def test_rebased_preserves_cross_rates():
    table = make_table().rebased("EUR")
    assert table.base == "EUR"
    assert table.rate("EUR", "USD") == Fraction(10, 9)
    assert table.rate("EUR", "EUR") == 1
    assert table.rate("GBP", "JPY") == Fraction(375, 2)
    assert table.currencies() == ["EUR", "GBP", "JPY", "USD"]
    with pytest.raises(ExchangeError):
        make_table().rebased("CHF")


def test_total_in():
    table = make_table()
    amounts = [Money(1000, "USD"), Money(900, "EUR"), Money(1500, "JPY")]
    assert table.total_in(amounts, "USD") == Money(3000, "USD")
    assert table.total_in([], "EUR") == Money(0, "EUR")
