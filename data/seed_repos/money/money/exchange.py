"""Currency conversion with a table of exchange rates."""

from fractions import Fraction

from .currency import get_currency
from .money import Money
from .rounding import HALF_EVEN, round_fraction, to_fraction


class ExchangeError(LookupError):
    """Raised when no rate is known for a currency."""


class RateTable:
    """Exchange rates relative to a base currency.

    ``set_rate("EUR", "0.9")`` means one unit of the base currency buys
    0.9 EUR.  Cross rates are derived through the base.
    """

    def __init__(self, base="USD"):
        self.base = get_currency(base).code
        self._rates = {self.base: Fraction(1)}

    def set_rate(self, code, rate):
        """Record that one base unit buys ``rate`` units of ``code``."""
        code = get_currency(code).code
        rate = to_fraction(rate)
        if rate <= 0:
            raise ValueError("rates must be positive")
        if code == self.base and rate != 1:
            raise ValueError("the base currency rate is always 1")
        self._rates[code] = rate

    def has_rate(self, code):
        """Return True if a rate for ``code`` is known."""
        return get_currency(code).code in self._rates

    def currencies(self):
        """Return the sorted codes for which rates are known."""
        return sorted(self._rates)

    def rate(self, source, target):
        """Return how many units of ``target`` one unit of ``source`` buys."""
        source = get_currency(source).code
        target = get_currency(target).code
        for code in (source, target):
            if code not in self._rates:
                raise ExchangeError(f"no rate for {code}")
        return self._rates[target] / self._rates[source]

    def convert(self, money, target, mode=HALF_EVEN):
        """Convert ``money`` into ``target``, rounding to its minor units."""
        target_currency = get_currency(target)
        if target_currency == money.currency:
            return money
        rate = self.rate(money.currency, target_currency)
        minor = money.to_fraction() * rate * target_currency.minor_per_major
        return Money(round_fraction(minor, mode), target_currency)

    def rebased(self, new_base):
        """Return an equivalent table expressed relative to ``new_base``."""
        new_code = get_currency(new_base).code
        if new_code not in self._rates:
            raise ExchangeError(f"no rate for {new_code}")
        pivot = self._rates[new_code]
        table = RateTable(new_code)
        for code, rate in self._rates.items():
            if code != new_code:
                table.set_rate(code, rate / pivot)
        return table

    def total_in(self, amounts, target, mode=HALF_EVEN):
        """Convert each amount to ``target`` and return the sum."""
        result = Money.zero(target)
        for amount in amounts:
            result = result + self.convert(amount, target, mode)
        return result
