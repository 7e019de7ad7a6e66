from fractions import Fraction

import pytest

from money import CEILING, FLOOR, HALF_UP, CurrencyMismatch, Money, largest, total


def usd(cents):
    return Money(cents, "USD")


def test_construction_requires_int():
    assert usd(150).cents == 150
    with pytest.raises(TypeError):
        Money(1.5, "USD")
    with pytest.raises(TypeError):
        Money(True, "USD")
    with pytest.raises(ValueError):
        Money(1, "XYZ")


def test_from_major():
    assert Money.from_major("12.34", "USD") == usd(1234)
    assert Money.from_major(12, "USD") == usd(1200)
    assert Money.from_major("-0.5", "USD") == usd(-50)
    assert Money.from_major("1000", "JPY").cents == 1000
    assert Money.from_major("1.2345", "KWD").cents == 1234


def test_from_major_rounding_modes():
    assert Money.from_major("0.125", "USD").cents == 12
    assert Money.from_major("0.125", "USD", HALF_UP).cents == 13
    assert Money.from_major("0.121", "USD", CEILING).cents == 13


def test_properties_and_fraction():
    m = usd(-1250)
    assert m.code == "USD"
    assert m.currency.decimals == 2
    assert m.to_fraction() == Fraction(-25, 2)


def test_amount_str():
    assert usd(123450).amount_str() == "1234.50"
    assert usd(-5).amount_str() == "-0.05"
    assert usd(0).amount_str() == "0.00"
    assert Money(1500, "JPY").amount_str() == "1500"
    assert Money(-1005, "KWD").amount_str() == "-1.005"


def test_add_and_subtract():
    assert usd(150) + usd(275) == usd(425)
    assert usd(150) - usd(275) == usd(-125)


def test_currency_mismatch():
    with pytest.raises(CurrencyMismatch):
        usd(1) + Money(1, "EUR")
    with pytest.raises(CurrencyMismatch):
        usd(1) - Money(1, "EUR")
    with pytest.raises(CurrencyMismatch):
        assert usd(1) < Money(2, "EUR")
    with pytest.raises(CurrencyMismatch):
        assert usd(1) <= Money(2, "EUR")
    with pytest.raises(CurrencyMismatch):
        assert usd(3) > Money(2, "EUR")
    with pytest.raises(CurrencyMismatch):
        assert usd(3) >= Money(2, "EUR")
    with pytest.raises(CurrencyMismatch):
        usd(1).ratio(Money(2, "EUR"))
    with pytest.raises(TypeError):
        usd(1) + 1


def test_neg_and_abs():
    assert -usd(5) == usd(-5)
    assert abs(usd(-5)) == usd(5)
    assert abs(usd(5)) == usd(5)


def test_multiply_rounding():
    assert usd(100) * 3 == usd(300)
    assert usd(333).multiply("0.5") == usd(166)
    assert usd(333).multiply("0.5", HALF_UP) == usd(167)
    assert usd(335).multiply("0.5") == usd(168)
    assert usd(101).multiply(Fraction(1, 3), FLOOR) == usd(33)
    assert 2 * usd(7) == usd(14)


def test_multiply_money_by_money_is_unsupported():
    with pytest.raises(TypeError):
        usd(1) * usd(2)


def test_divide():
    assert usd(1000).divide(3) == usd(333)
    assert usd(1000).divide(3, CEILING) == usd(334)
    assert usd(-1000).divide(4) == usd(-250)
    assert usd(100).divide("0.5") == usd(200)
    with pytest.raises(ZeroDivisionError):
        usd(100).divide(0)


def test_ratio():
    assert usd(50).ratio(usd(200)) == Fraction(1, 4)
    with pytest.raises(ZeroDivisionError):
        usd(50).ratio(usd(0))


def test_sign_predicates():
    assert usd(0).is_zero() and not usd(1).is_zero()
    assert usd(1).is_positive() and not usd(0).is_positive()
    assert usd(-1).is_negative() and not usd(0).is_negative()
    assert bool(usd(0)) is False
    assert bool(usd(-3)) is True


def test_equality_and_hash():
    assert usd(100) == usd(100)
    assert usd(100) != usd(101)
    assert usd(100) != Money(100, "EUR")
    assert usd(100) != 100
    assert hash(usd(100)) == hash(Money(100, "usd"))
    assert len({usd(1), usd(1), usd(2)}) == 2


def test_ordering():
    assert usd(1) < usd(2)
    assert not usd(2) < usd(2)
    assert usd(2) <= usd(2)
    assert not usd(3) <= usd(2)
    assert usd(3) > usd(2)
    assert not usd(2) > usd(2)
    assert usd(2) >= usd(2)
    assert not usd(1) >= usd(2)
    assert sorted([usd(3), usd(-1), usd(2)]) == [usd(-1), usd(2), usd(3)]


def test_repr():
    assert repr(usd(-1234)) == "Money('-12.34', 'USD')"


def test_total():
    assert total([usd(1), usd(2), usd(3)]) == usd(6)
    assert total([], "USD") == usd(0)
    assert total([usd(5)], "USD") == usd(5)
    with pytest.raises(ValueError):
        total([])
    with pytest.raises(CurrencyMismatch):
        total([usd(1), Money(1, "EUR")])


def test_largest():
    assert largest([usd(3), usd(7), usd(-2)]) == usd(7)
    assert largest([usd(-3)]) == usd(-3)
    with pytest.raises(ValueError):
        largest([])
