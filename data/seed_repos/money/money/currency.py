"""Currency metadata."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Currency:
    """An ISO 4217 currency with its number of minor-unit digits."""

    code: str
    decimals: int
    symbol: str
    symbol_first: bool = True

    @property
    def minor_per_major(self):
        """How many minor units make one major unit (100 for USD)."""
        return 10**self.decimals


_REGISTRY = {
    "USD": Currency("USD", 2, "$"),
    "EUR": Currency("EUR", 2, "€", symbol_first=False),
    "GBP": Currency("GBP", 2, "£"),
    "JPY": Currency("JPY", 0, "¥"),
    "CHF": Currency("CHF", 2, "CHF ", symbol_first=True),
    "KWD": Currency("KWD", 3, "KD ", symbol_first=True),
    "SEK": Currency("SEK", 2, " kr", symbol_first=False),
}


def get_currency(code, registry=None):
    """Look up a currency by its (case-insensitive) code.

    ``registry`` defaults to the built-in table; a :class:`Currency`
    instance is returned unchanged.
    """
    if isinstance(code, Currency):
        return code
    table = _REGISTRY if registry is None else registry
    try:
        return table[code.upper()]
    except KeyError:
        raise ValueError(f"unknown currency: {code!r}") from None


def register_currency(currency, registry=None):
    """Add ``currency`` to ``registry`` and return the registry.

    When no registry is passed a copy of the built-in one is extended, so
    the module-level table is never modified.
    """
    if len(currency.code) != 3 or not currency.code.isalpha():
        raise ValueError(f"invalid currency code: {currency.code!r}")
    if currency.decimals < 0:
        raise ValueError("decimals must be non-negative")
    table = dict(_REGISTRY) if registry is None else registry
    table[currency.code.upper()] = currency
    return table


def known_currencies():
    """Return the sorted codes of all built-in currencies."""
    return sorted(_REGISTRY)
