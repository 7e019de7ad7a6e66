"""Parsing and formatting of dates."""

from .calendar import make_date

MONTH_NAMES = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def format_date(date, separator="-"):
    """Format ``date`` as ``YYYY-MM-DD`` (with a configurable separator)."""
    return f"{date.year:04d}{separator}{date.month:02d}{separator}{date.day:02d}"


def _parse_int(text, width):
    """Parse exactly ``width`` ASCII digits, raising ``ValueError`` otherwise."""
    if len(text) != width or not all("0" <= ch <= "9" for ch in text):
        raise ValueError(f"expected {width} digits, got {text!r}")
    return int(text)


def parse_date(text):
    """Strictly parse ``YYYY-MM-DD`` into a validated :class:`Date`."""
    text = text.strip()
    if len(text) != 10 or text[4] != "-" or text[7] != "-":
        raise ValueError(f"not an ISO date: {text!r}")
    year = _parse_int(text[:4], 4)
    month = _parse_int(text[5:7], 2)
    day = _parse_int(text[8:], 2)
    return make_date(year, month, day)


def month_name(month, abbreviated=False):
    """Return the English name of ``month`` (1..12)."""
    if month < 1 or month > 12:
        raise ValueError(f"month out of range: {month}")
    name = MONTH_NAMES[month - 1]
    return name[:3] if abbreviated else name


def parse_month_name(name):
    """Return the month number for a full or three-letter English name."""
    key = name.strip().lower()
    if len(key) < 3:
        raise ValueError(f"unknown month: {name!r}")
    for index, full in enumerate(MONTH_NAMES, 1):
        full = full.lower()
        if key == full or key == full[:3]:
            return index
    raise ValueError(f"unknown month: {name!r}")


def ordinal_suffix(number):
    """Return ``number`` with its English ordinal suffix (1st, 2nd, 11th)."""
    if 11 <= number % 100 <= 13:
        suffix = "th"
    else:
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def format_long(date, ordinal=False):
    """Format as ``March 5, 2024`` (or ``March 5th, 2024`` with ``ordinal``)."""
    day = ordinal_suffix(date.day) if ordinal else str(date.day)
    return f"{month_name(date.month)} {day}, {date.year}"


def parse_flexible(text):
    """Parse several common date spellings.

    Accepted forms: ``2024-03-05``, ``2024/03/05``, ``05.03.2024`` and
    ``March 5, 2024`` / ``Mar 5 2024``.
    """
    text = text.strip()
    if "/" in text:
        parts = text.split("/")
        if len(parts) != 3:
            raise ValueError(f"cannot parse date: {text!r}")
        return make_date(int(parts[0]), int(parts[1]), int(parts[2]))
    if "." in text:
        parts = text.split(".")
        if len(parts) != 3:
            raise ValueError(f"cannot parse date: {text!r}")
        return make_date(int(parts[2]), int(parts[1]), int(parts[0]))
    if text[:1].isalpha():
        tokens = text.replace(",", " ").split()
        if len(tokens) != 3:
            raise ValueError(f"cannot parse date: {text!r}")
        return make_date(int(tokens[2]), parse_month_name(tokens[0]), int(tokens[1]))
    return parse_date(text)


def format_relative(days):
    """Describe an offset in days relative to today in plain English."""
    if days == 0:
        return "today"
    if days == 1:
        return "tomorrow"
    if days == -1:
        return "yesterday"
    if days > 0:
        return f"in {days} days"
    return f"{-days} days ago"


def to_tuple(date):
    """Return ``date`` as a plain ``(year, month, day)`` tuple."""
    return (date.year, date.month, date.day)


def from_tuple(values):
    """Build a validated :class:`Date` from a ``(year, month, day)`` tuple."""
    if len(values) != 3:
        raise ValueError("expected exactly three values")
    return make_date(values[0], values[1], values[2])

