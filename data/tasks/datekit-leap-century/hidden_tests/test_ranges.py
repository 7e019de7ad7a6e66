import pytest

from datekit import (
    SUNDAY,
    Date,
    clamp_date,
    date_range,
    is_between,
    month_dates,
    month_end,
    month_start,
    overlap_days,
    quarter,
    quarter_end,
    quarter_start,
    split_by_month,
    week_dates,
    week_start,
)


def test_date_range_excludes_end():
    assert date_range(Date(2024, 2, 27), Date(2024, 3, 1)) == [
        Date(2024, 2, 27),
        Date(2024, 2, 28),
        Date(2024, 2, 29),
    ]
    assert date_range(Date(2024, 1, 1), Date(2024, 1, 1)) == []


def test_date_range_step():
    assert date_range(Date(2024, 1, 1), Date(2024, 1, 8), step=3) == [
        Date(2024, 1, 1),
        Date(2024, 1, 4),
        Date(2024, 1, 7),
    ]


def test_date_range_negative_step():
    assert date_range(Date(2024, 1, 3), Date(2024, 1, 1), step=-1) == [Date(2024, 1, 3), Date(2024, 1, 2)]
    assert date_range(Date(2024, 1, 1), Date(2024, 1, 3), step=-1) == []
    with pytest.raises(ValueError):
        date_range(Date(2024, 1, 1), Date(2024, 1, 3), step=0)


def test_month_start_and_end():
    assert month_start(Date(2024, 2, 17)) == Date(2024, 2, 1)
    assert month_end(Date(2024, 2, 17)) == Date(2024, 2, 29)
    assert month_end(Date(2023, 2, 1)) == Date(2023, 2, 28)


def test_month_dates():
    days = month_dates(2024, 2)
    assert len(days) == 29
    assert days[0] == Date(2024, 2, 1)
    assert days[-1] == Date(2024, 2, 29)
    assert len(month_dates(2023, 4)) == 30


def test_quarter():
    assert [quarter(Date(2024, m, 1)) for m in range(1, 13)] == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]


def test_quarter_boundaries():
    assert quarter_start(Date(2024, 5, 20)) == Date(2024, 4, 1)
    assert quarter_end(Date(2024, 5, 20)) == Date(2024, 6, 30)
    assert quarter_start(Date(2024, 1, 1)) == Date(2024, 1, 1)
    assert quarter_end(Date(2024, 3, 31)) == Date(2024, 3, 31)
    assert quarter_end(Date(2024, 12, 1)) == Date(2024, 12, 31)
    assert quarter_start(Date(2024, 9, 30)) == Date(2024, 7, 1)


def test_week_start_monday_default():
    assert week_start(Date(2024, 1, 3)) == Date(2024, 1, 1)
    assert week_start(Date(2024, 1, 1)) == Date(2024, 1, 1)
    assert week_start(Date(2024, 1, 7)) == Date(2024, 1, 1)


def test_week_start_sunday():
    assert week_start(Date(2024, 1, 3), first_weekday=SUNDAY) == Date(2023, 12, 31)
    assert week_start(Date(2024, 1, 7), first_weekday=SUNDAY) == Date(2024, 1, 7)


def test_week_dates():
    week = week_dates(Date(2024, 2, 28))
    assert week[0] == Date(2024, 2, 26)
    assert week[-1] == Date(2024, 3, 3)
    assert len(week) == 7


def test_is_between_inclusive_and_exclusive():
    start, end = Date(2024, 1, 1), Date(2024, 1, 31)
    assert is_between(Date(2024, 1, 1), start, end)
    assert is_between(Date(2024, 1, 31), start, end)
    assert not is_between(Date(2024, 2, 1), start, end)
    assert not is_between(Date(2024, 1, 1), start, end, inclusive=False)
    assert not is_between(Date(2024, 1, 31), start, end, inclusive=False)
    assert is_between(Date(2024, 1, 15), start, end, inclusive=False)


def test_clamp_date():
    lo, hi = Date(2024, 1, 1), Date(2024, 12, 31)
    assert clamp_date(Date(2023, 6, 1), lo, hi) == lo
    assert clamp_date(Date(2025, 6, 1), lo, hi) == hi
    assert clamp_date(Date(2024, 6, 1), lo, hi) == Date(2024, 6, 1)
    assert clamp_date(lo, lo, lo) == lo
    with pytest.raises(ValueError):
        clamp_date(lo, hi, lo)


def test_overlap_days():
    assert overlap_days(Date(2024, 1, 1), Date(2024, 1, 10), Date(2024, 1, 5), Date(2024, 1, 20)) == 6
    assert overlap_days(Date(2024, 1, 1), Date(2024, 1, 10), Date(2024, 1, 10), Date(2024, 1, 20)) == 1
    assert overlap_days(Date(2024, 1, 1), Date(2024, 1, 10), Date(2024, 1, 11), Date(2024, 1, 20)) == 0
    assert overlap_days(Date(2024, 1, 5), Date(2024, 1, 6), Date(2024, 1, 1), Date(2024, 1, 31)) == 2
    assert overlap_days(Date(2024, 3, 1), Date(2024, 3, 31), Date(2024, 1, 1), Date(2024, 1, 31)) == 0


def test_split_by_month():
    assert split_by_month(Date(2024, 1, 20), Date(2024, 3, 5)) == [
        (Date(2024, 1, 20), Date(2024, 1, 31)),
        (Date(2024, 2, 1), Date(2024, 2, 29)),
        (Date(2024, 3, 1), Date(2024, 3, 5)),
    ]


def test_split_by_month_single_day_and_empty():
    day = Date(2024, 1, 31)
    assert split_by_month(day, day) == [(day, day)]
    assert split_by_month(Date(2024, 2, 1), Date(2024, 1, 1)) == []
