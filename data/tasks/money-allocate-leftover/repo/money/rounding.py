"""Integer division and rounding with explicit rounding modes."""

from fractions import Fraction

HALF_UP = "half_up"
HALF_DOWN = "half_down"
HALF_EVEN = "half_even"
UP = "up"
DOWN = "down"
CEILING = "ceiling"
FLOOR = "floor"

ROUNDING_MODES = (HALF_UP, HALF_DOWN, HALF_EVEN, UP, DOWN, CEILING, FLOOR)


def divide(numerator, denominator, mode=HALF_EVEN):
    """Return ``numerator / denominator`` rounded to an integer.

    ``HALF_UP`` and ``HALF_DOWN`` round ties away from and towards zero;
    ``UP`` and ``DOWN`` round away from and towards zero; ``CEILING`` and
    ``FLOOR`` round towards positive and negative infinity.
    """
    if mode not in ROUNDING_MODES:
        raise ValueError(f"unknown rounding mode: {mode!r}")
    if denominator == 0:
        raise ZeroDivisionError("division by zero")
    if denominator < 0:
        numerator, denominator = -numerator, -denominator
    quotient, remainder = divmod(numerator, denominator)
    if remainder == 0:
        return quotient
    negative = numerator < 0
    if mode == FLOOR:
        return quotient
    if mode == CEILING:
        return quotient + 1
    if mode == DOWN:
        return quotient + 1 if negative else quotient
    if mode == UP:
        return quotient if negative else quotient + 1
    doubled = 2 * remainder
    if doubled < denominator:
        return quotient
    if doubled > denominator:
        return quotient + 1
    if mode == HALF_UP:
        return quotient if negative else quotient + 1
    if mode == HALF_DOWN:
        return quotient + 1 if negative else quotient
    return quotient if quotient % 2 == 0 else quotient + 1


def round_fraction(value, mode=HALF_EVEN):
    """Round a :class:`~fractions.Fraction` (or int) to an integer."""
    value = Fraction(value)
    return divide(value.numerator, value.denominator, mode)


def to_fraction(value):
    """Convert an int, decimal string or Fraction to a Fraction.

    Floats are rejected because they cannot represent most decimal
    amounts exactly.
    """
    if isinstance(value, float):
        raise TypeError("floats are not accepted; use a string such as '0.1'")
    if isinstance(value, (int, Fraction)):
        return Fraction(value)
    if isinstance(value, str):
        return Fraction(value.strip())
    raise TypeError(f"cannot convert {type(value).__name__} to Fraction")
