import pytest

from datekit import (
    Date,
    add_days,
    add_months,
    add_years,
    age,
    compare,
    days_between,
    from_ordinal,
    months_between,
    to_ordinal,
)


def test_to_ordinal_known_values():
    assert to_ordinal(Date(1, 1, 1)) == 1
    assert to_ordinal(Date(1, 12, 31)) == 365
    assert to_ordinal(Date(2, 1, 1)) == 366
    assert to_ordinal(Date(1970, 1, 1)) == 719163
    assert to_ordinal(Date(2000, 3, 1)) == 730180


def test_from_ordinal_known_values():
    assert from_ordinal(1) == Date(1, 1, 1)
    assert from_ordinal(365) == Date(1, 12, 31)
    assert from_ordinal(366) == Date(2, 1, 1)
    assert from_ordinal(719163) == Date(1970, 1, 1)
    assert from_ordinal(730180) == Date(2000, 3, 1)
    assert from_ordinal(3652059) == Date(9999, 12, 31)


def test_from_ordinal_year_boundaries_round_trip():
    for year in (4, 100, 399, 400, 401, 1600, 1900, 2000, 2023, 2024):
        for date in (Date(year, 1, 1), Date(year, 12, 31)):
            assert from_ordinal(to_ordinal(date)) == date


def test_from_ordinal_out_of_range():
    with pytest.raises(ValueError):
        from_ordinal(0)
    with pytest.raises(ValueError):
        from_ordinal(3652060)


def test_add_days_across_boundaries():
    assert add_days(Date(2023, 12, 31), 1) == Date(2024, 1, 1)
    assert add_days(Date(2024, 2, 28), 1) == Date(2024, 2, 29)
    assert add_days(Date(2023, 2, 28), 1) == Date(2023, 3, 1)
    assert add_days(Date(2024, 3, 1), -1) == Date(2024, 2, 29)
    assert add_days(Date(2024, 1, 1), 366) == Date(2025, 1, 1)
    assert add_days(Date(2024, 5, 5), 0) == Date(2024, 5, 5)


def test_days_between_signed():
    assert days_between(Date(2024, 1, 1), Date(2024, 3, 1)) == 60
    assert days_between(Date(2024, 3, 1), Date(2024, 1, 1)) == -60
    assert days_between(Date(2024, 1, 1), Date(2024, 1, 1)) == 0


def test_add_months_simple_and_year_wrap():
    assert add_months(Date(2024, 1, 15), 1) == Date(2024, 2, 15)
    assert add_months(Date(2024, 11, 15), 2) == Date(2025, 1, 15)
    assert add_months(Date(2024, 12, 1), 1) == Date(2025, 1, 1)
    assert add_months(Date(2024, 1, 15), -1) == Date(2023, 12, 15)
    assert add_months(Date(2024, 3, 10), -14) == Date(2023, 1, 10)
    assert add_months(Date(2024, 3, 10), 0) == Date(2024, 3, 10)


def test_add_months_clamps_day():
    assert add_months(Date(2024, 1, 31), 1) == Date(2024, 2, 29)
    assert add_months(Date(2023, 1, 31), 1) == Date(2023, 2, 28)
    assert add_months(Date(2024, 3, 31), 1) == Date(2024, 4, 30)
    assert add_months(Date(2024, 5, 30), 1) == Date(2024, 6, 30)


def test_add_months_out_of_range():
    with pytest.raises(ValueError):
        add_months(Date(9999, 12, 1), 1)
    with pytest.raises(ValueError):
        add_months(Date(1, 1, 1), -1)
    assert add_months(Date(9999, 11, 30), 1) == Date(9999, 12, 30)
    assert add_months(Date(1, 2, 1), -1) == Date(1, 1, 1)


def test_add_years_leap_day():
    assert add_years(Date(2024, 2, 29), 1) == Date(2025, 2, 28)
    assert add_years(Date(2024, 2, 29), 4) == Date(2028, 2, 29)
    assert add_years(Date(2024, 6, 1), -2) == Date(2022, 6, 1)


def test_months_between_whole_months():
    assert months_between(Date(2024, 1, 15), Date(2024, 3, 15)) == 2
    assert months_between(Date(2024, 1, 15), Date(2024, 3, 14)) == 1
    assert months_between(Date(2024, 1, 15), Date(2024, 3, 16)) == 2
    assert months_between(Date(2023, 11, 1), Date(2024, 2, 1)) == 3
    assert months_between(Date(2024, 1, 15), Date(2024, 2, 14)) == 0
    assert months_between(Date(2024, 3, 1), Date(2024, 3, 15)) == 0


def test_months_between_negative():
    assert months_between(Date(2024, 3, 15), Date(2024, 1, 15)) == -2
    assert months_between(Date(2024, 3, 15), Date(2024, 1, 16)) == -1
    assert months_between(Date(2024, 3, 15), Date(2024, 1, 14)) == -2
    assert months_between(Date(2024, 3, 15), Date(2024, 3, 1)) == 0
    assert months_between(Date(2024, 3, 15), Date(2024, 2, 16)) == 0


def test_age():
    assert age(Date(2000, 6, 15), Date(2024, 6, 14)) == 23
    assert age(Date(2000, 6, 15), Date(2024, 6, 15)) == 24
    assert age(Date(2000, 6, 15), Date(2024, 7, 1)) == 24
    assert age(Date(2000, 6, 15), Date(2000, 6, 15)) == 0
    with pytest.raises(ValueError):
        age(Date(2000, 6, 15), Date(2000, 6, 14))


def test_compare():
    assert compare(Date(2024, 1, 1), Date(2024, 1, 2)) == -1
    assert compare(Date(2024, 1, 2), Date(2024, 1, 1)) == 1
    assert compare(Date(2024, 1, 1), Date(2024, 1, 1)) == 0
