"""Parsing and formatting of interval notation such as ``[1, 5)``."""

from .interval import Interval

_INFINITIES = {"inf": float("inf"), "+inf": float("inf"), "-inf": float("-inf")}


def parse_number(text):
    """Parse an int, float or (+/-)``inf`` literal."""
    text = text.strip()
    lowered = text.lower()
    if lowered in _INFINITIES:
        return _INFINITIES[lowered]
    try:
        return int(text)
    except ValueError:
        return float(text)


def parse_interval(text):
    """Parse ``"[1, 5)"``-style notation into an :class:`Interval`.

    A single number in brackets, such as ``"[3]"``, is the degenerate
    closed interval ``[3, 3]``.
    """
    text = text.strip()
    if len(text) < 3:
        raise ValueError(f"not an interval: {text!r}")
    opening, closing = text[0], text[-1]
    if opening not in "[(" or closing not in "])":
        raise ValueError(f"missing brackets: {text!r}")
    body = text[1:-1]
    parts = body.split(",")
    if len(parts) == 1:
        if opening != "[" or closing != "]":
            raise ValueError(f"degenerate interval must be closed: {text!r}")
        value = parse_number(parts[0])
        return Interval(value, value)
    if len(parts) != 2:
        raise ValueError(f"expected two bounds: {text!r}")
    lo = parse_number(parts[0])
    hi = parse_number(parts[1])
    return Interval(lo, hi, opening == "[", closing == "]")


def format_number(value):
    """Format a bound, using ``inf``/``-inf`` and dropping ``.0``."""
    if value == float("inf"):
        return "inf"
    if value == float("-inf"):
        return "-inf"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def format_interval(interval):
    """Format an :class:`Interval` in bracket notation."""
    if interval.lo == interval.hi and interval.left_closed and interval.right_closed:
        return f"[{format_number(interval.lo)}]"
    left = "[" if interval.left_closed else "("
    right = "]" if interval.right_closed else ")"
    return f"{left}{format_number(interval.lo)}, {format_number(interval.hi)}{right}"


def parse_many(text, separator=";"):
    """Parse several intervals separated by ``separator``; blanks are skipped."""
    result = []
    for chunk in text.split(separator):
        if chunk.strip():
            result.append(parse_interval(chunk))
    return result
