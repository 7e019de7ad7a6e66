"""Ordinal conversion and date arithmetic."""

from .calendar import (
    MAX_YEAR,
    MIN_YEAR,
    Date,
    day_of_year,
    days_in_month,
    from_day_of_year,
    make_date,
)


def _days_before_year(year):
    """Number of days in all years before ``year`` (year 1 starts at 0)."""
    y = year - 1
    return y * 365 + y // 4 - y // 100 + y // 400


def to_ordinal(date):
    """Return the proleptic Gregorian ordinal; 0001-01-01 is day 1."""
    return _days_before_year(date.year) + day_of_year(date)


def from_ordinal(number):
    """Inverse of :func:`to_ordinal`."""
    if number < 1 or number > to_ordinal(Date(MAX_YEAR, 12, 31)):
        raise ValueError(f"ordinal out of range: {number}")
    year = (number - 1) * 400 // 146097 + 1
    while _days_before_year(year) >= number:
        year -= 1
    while _days_before_year(year + 1) < number:
        year += 1
    return from_day_of_year(year, number - _days_before_year(year))


def add_days(date, days):
    """Return the date ``days`` days after ``date`` (negative goes back)."""
    return from_ordinal(to_ordinal(date) + days)


def days_between(start, end):
    """Return the signed number of days from ``start`` to ``end``."""
    return to_ordinal(end) - to_ordinal(start)


def add_months(date, months):
    """Add calendar months, clamping the day to the target month's length.

    ``add_months(Date(2024, 1, 31), 1)`` is ``Date(2024, 2, 29)``.
    """
    total = date.year * 12 + (date.month - 1) + months
    year, month_index = divmod(total, 12)
    month = month_index + 1
    if year < MIN_YEAR or year > MAX_YEAR:
        raise ValueError("resulting year out of range")
    day = min(date.day, days_in_month(year, month))
    return make_date(year, month, day)


def add_years(date, years):
    """Add calendar years; February 29 clamps to February 28."""
    return add_months(date, 12 * years)


def months_between(start, end):
    """Return the number of whole months from ``start`` to ``end``.

    The result is negative when ``end`` is before ``start``.
    """
    months = (end.year - start.year) * 12 + (end.month - start.month)
    if months > 0 and end.day < start.day:
        months -= 1
    elif months < 0 and end.day > start.day:
        months += 1
    return months


def age(birth, on):
    """Return the age in whole years of someone born on ``birth``."""
    if on < birth:
        raise ValueError("date precedes birth date")
    years = on.year - birth.year
    if (on.month, on.day) < (birth.month, birth.day):
        years -= 1
    return years


def compare(a, b):
    """Return -1, 0 or 1 as ``a`` is before, equal to or after ``b``."""
    if a < b:
        return -1
    if a > b:
        return 1
    return 0
