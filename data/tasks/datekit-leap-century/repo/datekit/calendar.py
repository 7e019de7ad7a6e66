"""Core calendar facts: leap years, month lengths and day-of-year."""

from typing import NamedTuple

MIN_YEAR = 1
MAX_YEAR = 9999

_DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


class Date(NamedTuple):
    """An immutable calendar date in the proleptic Gregorian calendar."""

    year: int
    month: int
    day: int

    def __str__(self):
        return f"{self.year:04d}-{self.month:02d}-{self.day:02d}"


def is_leap_year(year):
    """Return True if ``year`` is a Gregorian leap year."""
    return year % 4 == 0 and year % 100 != 0


def days_in_month(year, month):
    """Return the number of days in ``month`` of ``year``."""
    if month < 1 or month > 12:
        raise ValueError(f"month out of range: {month}")
    if month == 2 and is_leap_year(year):
        return 29
    return _DAYS_IN_MONTH[month - 1]


def days_in_year(year):
    """Return 366 for leap years and 365 otherwise."""
    return 366 if is_leap_year(year) else 365


def is_valid_date(year, month, day):
    """Return True if the triple names a real date in years 1..9999."""
    if year < MIN_YEAR or year > MAX_YEAR:
        return False
    if month < 1 or month > 12:
        return False
    return 1 <= day <= days_in_month(year, month)


def make_date(year, month, day):
    """Build a validated :class:`Date`, raising ``ValueError`` if invalid."""
    if not is_valid_date(year, month, day):
        raise ValueError(f"invalid date: {year}-{month}-{day}")
    return Date(year, month, day)


def day_of_year(date):
    """Return the 1-based position of ``date`` within its year."""
    total = date.day
    for month in range(1, date.month):
        total += days_in_month(date.year, month)
    return total


def from_day_of_year(year, number):
    """Return the date that is day ``number`` (1-based) of ``year``."""
    if number < 1 or number > days_in_year(year):
        raise ValueError(f"day of year out of range: {number}")
    month = 1
    while number > days_in_month(year, month):
        number -= days_in_month(year, month)
        month += 1
    return Date(year, month, number)


def days_remaining_in_year(date):
    """Return how many days follow ``date`` before the year ends."""
    return days_in_year(date.year) - day_of_year(date)
