import pytest

from datekit import (
    Date,
    day_of_year,
    days_in_month,
    days_in_year,
    days_remaining_in_year,
    from_day_of_year,
    is_leap_year,
    is_valid_date,
    make_date,
)


def test_is_leap_year_rules():
    assert is_leap_year(2024)
    assert not is_leap_year(2023)
    assert not is_leap_year(1900)
    assert is_leap_year(2000)
    assert not is_leap_year(2100)
    assert is_leap_year(4)


def test_days_in_month_regular_months():
    lengths = [days_in_month(2023, m) for m in range(1, 13)]
    assert lengths == [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def test_days_in_month_february_leap():
    assert days_in_month(2024, 2) == 29
    assert days_in_month(1900, 2) == 28
    assert days_in_month(2000, 2) == 29
    assert days_in_month(2024, 3) == 31


def test_days_in_month_rejects_bad_month():
    with pytest.raises(ValueError):
        days_in_month(2024, 0)
    with pytest.raises(ValueError):
        days_in_month(2024, 13)


def test_days_in_year():
    assert days_in_year(2024) == 366
    assert days_in_year(2023) == 365


def test_is_valid_date_boundaries():
    assert is_valid_date(2024, 2, 29)
    assert is_valid_date(2023, 2, 29) is False
    assert is_valid_date(2023, 12, 31)
    assert is_valid_date(2023, 12, 32) is False
    assert is_valid_date(2023, 4, 0) is False
    assert is_valid_date(2023, 0, 1) is False
    assert is_valid_date(2023, 13, 1) is False
    assert is_valid_date(1, 1, 1)
    assert is_valid_date(0, 1, 1) is False
    assert is_valid_date(9999, 12, 31)
    assert is_valid_date(10000, 1, 1) is False


def test_make_date():
    assert make_date(2024, 2, 29) == Date(2024, 2, 29)
    with pytest.raises(ValueError):
        make_date(2023, 2, 29)


def test_date_str_is_zero_padded():
    assert str(Date(987, 3, 5)) == "0987-03-05"


def test_day_of_year():
    assert day_of_year(Date(2023, 1, 1)) == 1
    assert day_of_year(Date(2023, 2, 1)) == 32
    assert day_of_year(Date(2023, 3, 1)) == 60
    assert day_of_year(Date(2024, 3, 1)) == 61
    assert day_of_year(Date(2023, 12, 31)) == 365
    assert day_of_year(Date(2024, 12, 31)) == 366


def test_from_day_of_year():
    assert from_day_of_year(2023, 1) == Date(2023, 1, 1)
    assert from_day_of_year(2023, 31) == Date(2023, 1, 31)
    assert from_day_of_year(2023, 32) == Date(2023, 2, 1)
    assert from_day_of_year(2024, 60) == Date(2024, 2, 29)
    assert from_day_of_year(2023, 365) == Date(2023, 12, 31)
    assert from_day_of_year(2024, 366) == Date(2024, 12, 31)


def test_from_day_of_year_out_of_range():
    with pytest.raises(ValueError):
        from_day_of_year(2023, 0)
    with pytest.raises(ValueError):
        from_day_of_year(2023, 366)


def test_days_remaining_in_year():
    assert days_remaining_in_year(Date(2023, 12, 31)) == 0
    assert days_remaining_in_year(Date(2023, 1, 1)) == 364
    assert days_remaining_in_year(Date(2024, 1, 1)) == 365
