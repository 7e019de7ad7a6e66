"""Formatting and parsing of money amounts."""

from .currency import get_currency
from .money import Money


def group_digits(digits, separator=",", size=3):
    """Insert ``separator`` between groups of ``size`` digits from the right."""
    if size < 1:
        raise ValueError("group size must be at least 1")
    if len(digits) <= size:
        return digits
    head = len(digits) % size or size
    groups = [digits[:head]]
    for start in range(head, len(digits), size):
        groups.append(digits[start : start + size])
    return separator.join(groups)


def format_money(money, thousands=",", decimal=".", symbol=True, negative="minus"):
    """Format ``money`` for display, e.g. ``"$1,234.50"`` or ``"(1.234,50€)"``.

    ``negative`` is ``"minus"`` for a leading sign or ``"parens"`` for
    accounting style.  With ``symbol=False`` the currency code is appended
    instead of the symbol.
    """
    if negative not in ("minus", "parens"):
        raise ValueError(f"unknown negative style: {negative!r}")
    currency = money.currency
    whole, fraction = divmod(abs(money.cents), currency.minor_per_major)
    text = group_digits(str(whole), thousands)
    if currency.decimals > 0:
        text += decimal + str(fraction).rjust(currency.decimals, "0")
    if not symbol:
        text = f"{text} {currency.code}"
    elif currency.symbol_first:
        text = currency.symbol + text
    else:
        text = text + currency.symbol
    if money.cents < 0:
        text = f"({text})" if negative == "parens" else "-" + text
    return text


def _is_digits(text):
    """True if ``text`` is a non-empty run of ASCII digits."""
    return bool(text) and all("0" <= ch <= "9" for ch in text)


def _strip_grouping(whole, separator):
    """Remove thousands separators, validating the group sizes."""
    if not separator or separator not in whole:
        return whole
    groups = whole.split(separator)
    if not groups[0] or len(groups[0]) > 3:
        raise ValueError(f"bad digit grouping: {whole!r}")
    for group in groups[1:]:
        if len(group) != 3:
            raise ValueError(f"bad digit grouping: {whole!r}")
    return "".join(groups)


def parse_amount(text, decimals, thousands=",", decimal="."):
    """Parse a plain amount such as ``"-1,234.5"`` into minor units.

    Accepts a leading ``-`` or ``+`` or accounting parentheses.  More
    fractional digits than ``decimals`` is an error rather than a silent
    rounding.
    """
    text = text.strip()
    negative = False
    if text.startswith("(") and text.endswith(")"):
        negative = True
        text = text[1:-1].strip()
    if text[:1] in ("-", "+"):
        if negative:
            raise ValueError("sign inside parentheses")
        negative = text[0] == "-"
        text = text[1:].strip()
    whole, separator, fraction = text.partition(decimal)
    whole = _strip_grouping(whole, thousands)
    if not _is_digits(whole):
        raise ValueError(f"invalid amount: {text!r}")
    if separator and not _is_digits(fraction):
        raise ValueError(f"invalid fractional part: {text!r}")
    if len(fraction) > decimals:
        raise ValueError(f"too many decimal places for {decimals}: {text!r}")
    value = int(whole) * 10**decimals
    if fraction:
        value += int(fraction.ljust(decimals, "0"))
    return -value if negative else value


def parse_money(text, currency, thousands=",", decimal="."):
    """Parse text such as ``"$1,234.56"`` or ``"-12.00 USD"`` into Money."""
    resolved = get_currency(currency)
    cleaned = text.replace(resolved.code, "")
    symbol = resolved.symbol.strip()
    if symbol:
        cleaned = cleaned.replace(symbol, "")
    return Money(parse_amount(cleaned, resolved.decimals, thousands, decimal), resolved)


def format_code(money):
    """Format as ``"1234.50 USD"``: plain amount followed by the code."""
    return f"{money.amount_str()} {money.code}"
