from fractions import Fraction

import pytest

from money import (
    Money,
    allocate,
    allocate_fractions,
    allocate_percentages,
    installments,
    proportion,
    split_bill,
    split_evenly,
)


def usd(cents):
    return Money(cents, "USD")


def cents(amounts):
    return [amount.cents for amount in amounts]


def test_allocate_exact():
    assert cents(allocate(usd(100), [1, 1])) == [50, 50]
    assert cents(allocate(usd(100), [3, 1])) == [75, 25]


def test_allocate_distributes_leftover_by_remainder():
    assert cents(allocate(usd(100), [1, 1, 1])) == [34, 33, 33]
    assert cents(allocate(usd(5), [3, 7])) == [2, 3]
    assert cents(allocate(usd(10), [1, 2, 4])) == [1, 3, 6]


def test_allocate_preserves_total():
    for amount in (0, 1, 99, 100, 101, 12345):
        shares = allocate(usd(amount), [2, 3, 5, 7])
        assert sum(cents(shares)) == amount


def test_allocate_negative_amount():
    assert cents(allocate(usd(-100), [1, 1, 1])) == [-33, -33, -34]


def test_allocate_zero_ratio_gets_nothing():
    assert cents(allocate(usd(10), [0, 1, 1])) == [0, 5, 5]
    assert cents(allocate(usd(11), [1, 0])) == [11, 0]


def test_allocate_validation():
    with pytest.raises(ValueError):
        allocate(usd(10), [])
    with pytest.raises(ValueError):
        allocate(usd(10), [1, -1])
    with pytest.raises(ValueError):
        allocate(usd(10), [0, 0])


def test_split_evenly():
    assert cents(split_evenly(usd(10), 3)) == [4, 3, 3]
    assert cents(split_evenly(usd(10), 1)) == [10]
    assert cents(split_evenly(usd(2), 4)) == [1, 1, 0, 0]
    with pytest.raises(ValueError):
        split_evenly(usd(10), 0)


def test_allocate_fractions():
    assert cents(allocate_fractions(usd(100), ["0.5", "0.25", "0.25"])) == [50, 25, 25]
    assert cents(allocate_fractions(usd(100), [Fraction(1, 3), Fraction(2, 3)])) == [33, 67]
    with pytest.raises(ValueError):
        allocate_fractions(usd(100), [])


def test_allocate_percentages():
    assert cents(allocate_percentages(usd(1000), ["33.3", "33.3", "33.4"])) == [333, 333, 334]
    assert cents(allocate_percentages(usd(100), [100])) == [100]
    with pytest.raises(ValueError):
        allocate_percentages(usd(100), [50, 49])
    with pytest.raises(ValueError):
        allocate_percentages(usd(100), [50, 51])


def test_split_bill_keeps_names_and_order():
    result = split_bill(usd(1000), {"ann": 2, "bob": 1, "cy": 1})
    assert list(result) == ["ann", "bob", "cy"]
    assert cents(result.values()) == [500, 250, 250]
    assert cents(split_bill(usd(100), {"x": 1, "y": 2}).values()) == [33, 67]


def test_installments():
    assert cents(installments(usd(100), 3)) == [34, 33, 33]
    assert cents(installments(usd(100), 3, remainder_first=False)) == [33, 33, 34]
    assert cents(installments(usd(101), 3)) == [34, 34, 33]
    assert cents(installments(usd(99), 3)) == [33, 33, 33]
    with pytest.raises(ValueError):
        installments(usd(100), 0)


def test_proportion():
    assert proportion(usd(25), usd(100)) == Fraction(1, 4)
