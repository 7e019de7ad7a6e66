"""The :class:`Money` value type."""

from fractions import Fraction

from .currency import get_currency
from .rounding import HALF_EVEN, round_fraction, to_fraction


class CurrencyMismatch(ValueError):
    """Raised when combining amounts in different currencies."""


class Money:
    """An exact amount of money stored as integer minor units."""

    __slots__ = ("_cents", "_currency")

    def __init__(self, cents, currency):
        if isinstance(cents, bool) or not isinstance(cents, int):
            raise TypeError("amount must be an integer number of minor units")
        self._cents = cents
        self._currency = get_currency(currency)

    @classmethod
    def zero(cls, currency):
        """Return a zero amount in ``currency``."""
        return cls(0, currency)

    @classmethod
    def from_major(cls, amount, currency, mode=HALF_EVEN):
        """Build from a major-unit amount such as ``"12.34"`` or ``12``."""
        resolved = get_currency(currency)
        value = to_fraction(amount) * resolved.minor_per_major
        return cls(round_fraction(value, mode), resolved)

    @property
    def cents(self):
        """The amount in minor units."""
        return self._cents

    @property
    def currency(self):
        """The :class:`~money.currency.Currency` of this amount."""
        return self._currency

    @property
    def code(self):
        """The three-letter currency code."""
        return self._currency.code

    def to_fraction(self):
        """Return the amount in major units as an exact Fraction."""
        return Fraction(self._cents, self._currency.minor_per_major)

    def amount_str(self):
        """Return the plain major-unit amount, e.g. ``"-1234.50"``."""
        sign = "-" if self._cents < 0 else ""
        whole, fraction = divmod(abs(self._cents), self._currency.minor_per_major)
        decimals = self._currency.decimals
        if decimals == 0:
            return f"{sign}{whole}"
        return f"{sign}{whole}.{fraction:0{decimals}d}"

    def _check(self, other):
        """Ensure ``other`` is Money in the same currency."""
        if not isinstance(other, Money):
            raise TypeError(f"expected Money, got {type(other).__name__}")
        if other._currency != self._currency:
            raise CurrencyMismatch(f"{self.code} != {other.code}")

    def __add__(self, other):
        self._check(other)
        return Money(self._cents + other._cents, self._currency)

    def __sub__(self, other):
        self._check(other)
        return Money(self._cents - other._cents, self._currency)

    def __neg__(self):
        return Money(-self._cents, self._currency)

    def __abs__(self):
        return Money(abs(self._cents), self._currency)

    def multiply(self, factor, mode=HALF_EVEN):
        """Multiply by an int, decimal string or Fraction and round."""
        value = to_fraction(factor) * self._cents
        return Money(round_fraction(value, mode), self._currency)

    def __mul__(self, factor):
        if isinstance(factor, Money):
            return NotImplemented
        return self.multiply(factor)

    __rmul__ = __mul__

    def divide(self, divisor, mode=HALF_EVEN):
        """Divide by a non-zero number and round to whole minor units."""
        divisor = to_fraction(divisor)
        if divisor == 0:
            raise ZeroDivisionError("cannot divide money by zero")
        return Money(round_fraction(Fraction(self._cents) / divisor, mode), self._currency)

    def ratio(self, other):
        """Return ``self / other`` as an exact Fraction."""
        self._check(other)
        if other._cents == 0:
            raise ZeroDivisionError("ratio to a zero amount")
        return Fraction(self._cents, other._cents)

    def is_zero(self):
        """True if the amount is exactly zero."""
        return self._cents == 0

    def is_positive(self):
        """True if the amount is greater than zero."""
        return self._cents > 0

    def is_negative(self):
        """True if the amount is less than zero."""
        return self._cents < 0

    def __bool__(self):
        return self._cents != 0

    def __eq__(self, other):
        if not isinstance(other, Money):
            return NotImplemented
        return self._currency == other._currency and self._cents == other._cents

    def __hash__(self):
        return hash((self._cents, self._currency.code))

    def __lt__(self, other):
        self._check(other)
        return self._cents < other._cents

    def __le__(self, other):
        self._check(other)
        return self._cents <= other._cents

    def __gt__(self, other):
        self._check(other)
        return self._cents > other._cents

    def __ge__(self, other):
        self._check(other)
        return self._cents >= other._cents

    def __repr__(self):
        return f"Money('{self.amount_str()}', '{self.code}')"


def total(amounts, currency=None):
    """Sum ``amounts``; ``currency`` is required when the list may be empty."""
    result = None if currency is None else Money.zero(currency)
    for amount in amounts:
        result = amount if result is None else result + amount
    if result is None:
        raise ValueError("cannot total an empty list without a currency")
    return result


def largest(amounts):
    """Return the largest amount; ties keep the earliest."""
    best = None
    for amount in amounts:
        if best is None or amount > best:
            best = amount
    if best is None:
        raise ValueError("no amounts given")
    return best
