from fractions import Fraction

import pytest

from money import CEILING, DOWN, FLOOR, HALF_DOWN, HALF_EVEN, HALF_UP, UP, divide, round_fraction, to_fraction

CASES = [
    # numerator, denominator -> expected per mode
    (5, 2, {HALF_UP: 3, HALF_DOWN: 2, HALF_EVEN: 2, UP: 3, DOWN: 2, CEILING: 3, FLOOR: 2}),
    (7, 2, {HALF_UP: 4, HALF_DOWN: 3, HALF_EVEN: 4, UP: 4, DOWN: 3, CEILING: 4, FLOOR: 3}),
    (-5, 2, {HALF_UP: -3, HALF_DOWN: -2, HALF_EVEN: -2, UP: -3, DOWN: -2, CEILING: -2, FLOOR: -3}),
    (-7, 2, {HALF_UP: -4, HALF_DOWN: -3, HALF_EVEN: -4, UP: -4, DOWN: -3, CEILING: -3, FLOOR: -4}),
    (7, 3, {HALF_UP: 2, HALF_DOWN: 2, HALF_EVEN: 2, UP: 3, DOWN: 2, CEILING: 3, FLOOR: 2}),
    (8, 3, {HALF_UP: 3, HALF_DOWN: 3, HALF_EVEN: 3, UP: 3, DOWN: 2, CEILING: 3, FLOOR: 2}),
    (-7, 3, {HALF_UP: -2, HALF_DOWN: -2, HALF_EVEN: -2, UP: -3, DOWN: -2, CEILING: -2, FLOOR: -3}),
    (-8, 3, {HALF_UP: -3, HALF_DOWN: -3, HALF_EVEN: -3, UP: -3, DOWN: -2, CEILING: -2, FLOOR: -3}),
]


@pytest.mark.parametrize("numerator, denominator, expected", CASES)
def test_divide_all_modes(numerator, denominator, expected):
    actual = {mode: divide(numerator, denominator, mode) for mode in expected}
    assert actual == expected


def test_divide_exact_results_ignore_mode():
    for mode in (HALF_UP, HALF_DOWN, HALF_EVEN, UP, DOWN, CEILING, FLOOR):
        assert divide(6, 3, mode) == 2
        assert divide(-6, 3, mode) == -2
        assert divide(0, 7, mode) == 0


def test_divide_negative_denominator():
    assert divide(5, -2, HALF_UP) == -3
    assert divide(-5, -2, HALF_UP) == 3
    assert divide(7, -3, FLOOR) == -3
    assert divide(7, -3, CEILING) == -2


def test_divide_default_is_half_even():
    assert divide(1, 2) == 0
    assert divide(3, 2) == 2
    assert divide(-3, 2) == -2


def test_divide_errors():
    with pytest.raises(ZeroDivisionError):
        divide(1, 0)
    with pytest.raises(ValueError):
        divide(1, 2, "sideways")


def test_round_fraction():
    assert round_fraction(Fraction(5, 2), HALF_UP) == 3
    assert round_fraction(Fraction(-1, 3), FLOOR) == -1
    assert round_fraction(4) == 4


def test_to_fraction_accepts_exact_types():
    assert to_fraction(3) == Fraction(3)
    assert to_fraction(" 0.1 ") == Fraction(1, 10)
    assert to_fraction(Fraction(2, 3)) == Fraction(2, 3)
    assert to_fraction("-12.5") == Fraction(-25, 2)


def test_to_fraction_rejects_floats_and_others():
    with pytest.raises(TypeError):
        to_fraction(0.1)
    with pytest.raises(TypeError):
        to_fraction([1])
