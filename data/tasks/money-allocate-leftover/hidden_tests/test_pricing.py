from fractions import Fraction

import pytest

from money import (
    FLOOR,
    Money,
    add_tax,
    apply_discount,
    compound,
    discount_percent,
    line_total,
    margin_percent,
    markup,
    percent_change,
    percentage,
    remove_tax,
    tax_included,
    unit_price,
)


def usd(cents):
    return Money(cents, "USD")


def test_percentage():
    assert percentage(usd(1000), 15) == usd(150)
    assert percentage(usd(999), "7.5") == usd(75)
    assert percentage(usd(1), 50) == usd(1)
    assert percentage(usd(1), 50, FLOOR) == usd(0)
    assert percentage(usd(-1000), 10) == usd(-100)


def test_add_tax():
    assert add_tax(usd(10000), 20) == usd(12000)
    assert add_tax(usd(1999), "8.25") == usd(2164)
    assert add_tax(usd(1000), 0) == usd(1000)


def test_remove_tax():
    assert remove_tax(usd(12000), 20) == usd(10000)
    assert remove_tax(usd(2164), "8.25") == usd(1999)
    assert remove_tax(usd(1000), 0) == usd(1000)
    assert remove_tax(usd(100), -50) == usd(200)
    with pytest.raises(ValueError):
        remove_tax(usd(100), -100)
    assert remove_tax(usd(100), -99) == usd(10000)


def test_tax_included():
    assert tax_included(usd(12000), 20) == usd(2000)
    assert tax_included(usd(1190), 19) == usd(190)


def test_apply_discount():
    assert apply_discount(usd(2000), 25) == usd(1500)
    assert apply_discount(usd(999), 10) == usd(899)
    assert apply_discount(usd(999), 0) == usd(999)
    assert apply_discount(usd(999), 100) == usd(0)


def test_apply_discount_rejects_out_of_range():
    with pytest.raises(ValueError):
        apply_discount(usd(100), -1)
    with pytest.raises(ValueError):
        apply_discount(usd(100), "100.01")


def test_discount_percent():
    assert discount_percent(usd(2000), usd(1500)) == 25
    assert discount_percent(usd(300), usd(200)) == Fraction(100, 3)
    assert discount_percent(usd(100), usd(120)) == -20
    with pytest.raises(ZeroDivisionError):
        discount_percent(usd(0), usd(0))


def test_percent_change():
    assert percent_change(usd(200), usd(250)) == 25
    assert percent_change(usd(200), usd(150)) == -25
    assert percent_change(usd(-200), usd(-100)) == 50
    with pytest.raises(ZeroDivisionError):
        percent_change(usd(0), usd(10))


def test_markup_and_margin():
    assert markup(usd(1000), 50) == usd(1500)
    assert margin_percent(usd(1000), usd(1500)) == Fraction(100, 3)
    assert margin_percent(usd(1000), usd(2000)) == 50
    assert margin_percent(usd(1500), usd(1000)) == -50
    with pytest.raises(ZeroDivisionError):
        margin_percent(usd(1), usd(0))


def test_unit_price():
    assert unit_price(usd(1000), 3) == usd(333)
    assert unit_price(usd(1000), 6) == usd(167)
    assert unit_price(usd(500), 1) == usd(500)
    with pytest.raises(ValueError):
        unit_price(usd(1000), 0)


def test_line_total():
    assert line_total(usd(1000), 3) == usd(3000)
    assert line_total(usd(1000), 3, discount=10) == usd(2700)
    assert line_total(usd(1000), 3, discount=10, tax_rate=20) == usd(3240)
    assert line_total(usd(1000), 0, tax_rate=20) == usd(0)
    with pytest.raises(ValueError):
        line_total(usd(1000), -1)


def test_line_total_discount_applied_before_tax():
    assert line_total(usd(101), 1, discount=50, tax_rate=50) == usd(75)


def test_compound():
    assert compound(usd(10000), 10, 2) == usd(12100)
    assert compound(usd(10000), 10, 0) == usd(10000)
    assert compound(usd(10000), 5, 1) == usd(10500)
    assert compound(usd(101), 50, 2) == usd(227)
    with pytest.raises(ValueError):
        compound(usd(100), 5, -1)
