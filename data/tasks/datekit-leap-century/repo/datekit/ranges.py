"""Date ranges and period boundaries."""

from .arithmetic import add_days, days_between
from .calendar import Date, days_in_month
from .weekday import MONDAY, weekday


def date_range(start, end, step=1):
    """Return dates from ``start`` up to, but excluding, ``end``.

    A negative ``step`` walks backwards (``end`` must then be earlier).
    """
    if step == 0:
        raise ValueError("step must not be zero")
    result = []
    current = start
    if step > 0:
        while current < end:
            result.append(current)
            current = add_days(current, step)
    else:
        while current > end:
            result.append(current)
            current = add_days(current, step)
    return result


def month_start(date):
    """Return the first day of the month containing ``date``."""
    return Date(date.year, date.month, 1)


def month_end(date):
    """Return the last day of the month containing ``date``."""
    return Date(date.year, date.month, days_in_month(date.year, date.month))


def month_dates(year, month):
    """Return every date in the given month."""
    return [Date(year, month, day) for day in range(1, days_in_month(year, month) + 1)]


def quarter(date):
    """Return the calendar quarter (1..4) of ``date``."""
    return (date.month - 1) // 3 + 1


def quarter_start(date):
    """Return the first day of the quarter containing ``date``."""
    first_month = 3 * (quarter(date) - 1) + 1
    return Date(date.year, first_month, 1)


def quarter_end(date):
    """Return the last day of the quarter containing ``date``."""
    last_month = 3 * quarter(date)
    return Date(date.year, last_month, days_in_month(date.year, last_month))


def week_start(date, first_weekday=MONDAY):
    """Return the start of the week containing ``date``."""
    return add_days(date, -((weekday(date) - first_weekday) % 7))


def week_dates(date, first_weekday=MONDAY):
    """Return the seven dates of the week containing ``date``."""
    start = week_start(date, first_weekday)
    return [add_days(start, offset) for offset in range(7)]


def is_between(date, start, end, inclusive=True):
    """Return True if ``date`` lies between ``start`` and ``end``."""
    if inclusive:
        return start <= date <= end
    return start < date < end


def clamp_date(date, lower, upper):
    """Clamp ``date`` into the inclusive range ``[lower, upper]``."""
    if lower > upper:
        raise ValueError("lower bound is after upper bound")
    if date < lower:
        return lower
    if date > upper:
        return upper
    return date


def overlap_days(first_start, first_end, second_start, second_end):
    """Return how many days two inclusive date ranges share."""
    start = max(first_start, second_start)
    end = min(first_end, second_end)
    if end < start:
        return 0
    return days_between(start, end) + 1


def split_by_month(start, end):
    """Split the inclusive range ``[start, end]`` into per-month pieces.

    Returns a list of ``(piece_start, piece_end)`` tuples.
    """
    if end < start:
        return []
    pieces = []
    current = start
    while current <= end:
        piece_end = min(month_end(current), end)
        pieces.append((current, piece_end))
        current = add_days(piece_end, 1)
    return pieces
