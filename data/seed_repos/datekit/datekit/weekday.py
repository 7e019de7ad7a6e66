"""Weekdays, ISO weeks and business days."""

from .arithmetic import add_days
from .calendar import Date, day_of_year, days_in_month, is_leap_year, make_date

MONDAY, TUESDAY, WEDNESDAY, THURSDAY, FRIDAY, SATURDAY, SUNDAY = range(7)

WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

_SAKAMOTO_OFFSETS = (0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4)


def weekday(date):
    """Return the weekday with Monday as 0 and Sunday as 6 (Sakamoto)."""
    year = date.year
    if date.month < 3:
        year -= 1
    sunday_based = (
        year + year // 4 - year // 100 + year // 400 + _SAKAMOTO_OFFSETS[date.month - 1] + date.day
    ) % 7
    return (sunday_based + 6) % 7


def zeller_weekday(date):
    """Return the weekday (Monday is 0) using Zeller's congruence."""
    year, month = date.year, date.month
    if month < 3:
        month += 12
        year -= 1
    century, year_of_century = divmod(year, 100)
    saturday_based = (
        date.day
        + 13 * (month + 1) // 5
        + year_of_century
        + year_of_century // 4
        + century // 4
        + 5 * century
    ) % 7
    return (saturday_based + 5) % 7


def weekday_name(date):
    """Return the English name of the weekday of ``date``."""
    return WEEKDAY_NAMES[weekday(date)]


def is_weekend(date):
    """Return True for Saturdays and Sundays."""
    return weekday(date) >= SATURDAY


def is_business_day(date, holidays=()):
    """Return True for weekdays that are not listed in ``holidays``."""
    return not is_weekend(date) and date not in holidays


def next_weekday(date, target):
    """Return the first date strictly after ``date`` that falls on ``target``."""
    delta = (target - weekday(date)) % 7
    if delta == 0:
        delta = 7
    return add_days(date, delta)


def previous_weekday(date, target):
    """Return the last date strictly before ``date`` that falls on ``target``."""
    delta = (weekday(date) - target) % 7
    if delta == 0:
        delta = 7
    return add_days(date, -delta)


def iso_weeks_in_year(year):
    """Return 53 if the ISO year ``year`` has 53 weeks, else 52."""
    jan1 = weekday(Date(year, 1, 1))
    if jan1 == THURSDAY or (jan1 == WEDNESDAY and is_leap_year(year)):
        return 53
    return 52


def iso_week(date):
    """Return the ``(iso_year, iso_week)`` pair for ``date``."""
    week = (day_of_year(date) - weekday(date) + 9) // 7
    if week < 1:
        return (date.year - 1, iso_weeks_in_year(date.year - 1))
    if week > iso_weeks_in_year(date.year):
        return (date.year + 1, 1)
    return (date.year, week)


def business_days_between(start, end, holidays=()):
    """Count business days in the half-open range ``[start, end)``.

    The count is negated when ``end`` is before ``start``.
    """
    if end < start:
        return -business_days_between(end, start, holidays)
    count = 0
    current = start
    while current < end:
        if is_business_day(current, holidays):
            count += 1
        current = add_days(current, 1)
    return count


def add_business_days(date, days, holidays=()):
    """Move ``days`` business days forward (or backward if negative)."""
    step = 1 if days >= 0 else -1
    remaining = abs(days)
    current = date
    while remaining > 0:
        current = add_days(current, step)
        if is_business_day(current, holidays):
            remaining -= 1
    return current


def nth_weekday_of_month(year, month, target, n):
    """Return the ``n``-th (1-based) ``target`` weekday of the month.

    A negative ``n`` counts from the end of the month (-1 is the last).
    """
    if n == 0:
        raise ValueError("n must not be zero")
    if n > 0:
        first = Date(year, month, 1)
        offset = (target - weekday(first)) % 7
        day = 1 + offset + 7 * (n - 1)
    else:
        last_day = days_in_month(year, month)
        last = Date(year, month, last_day)
        offset = (weekday(last) - target) % 7
        day = last_day - offset - 7 * (-n - 1)
    return make_date(year, month, day)
