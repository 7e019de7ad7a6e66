import pytest

from datekit import (
    FRIDAY,
    MONDAY,
    SATURDAY,
    SUNDAY,
    THURSDAY,
    TUESDAY,
    WEDNESDAY,
    Date,
    add_business_days,
    business_days_between,
    is_business_day,
    is_weekend,
    iso_week,
    iso_weeks_in_year,
    next_weekday,
    nth_weekday_of_month,
    previous_weekday,
    weekday,
    weekday_name,
    zeller_weekday,
)

KNOWN = [
    (Date(2024, 1, 1), MONDAY),
    (Date(2024, 2, 29), THURSDAY),
    (Date(2024, 3, 1), FRIDAY),
    (Date(2000, 1, 1), SATURDAY),
    (Date(1970, 1, 1), THURSDAY),
    (Date(2023, 12, 31), SUNDAY),
    (Date(1900, 3, 1), THURSDAY),
    (Date(2024, 12, 25), WEDNESDAY),
    (Date(2024, 7, 16), TUESDAY),
    (Date(2000, 6, 1), THURSDAY),
]


@pytest.mark.parametrize("month, expected", list(enumerate([6, 2, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4], 1)))
def test_weekday_first_of_every_month(month, expected):
    date = Date(2023, month, 1)
    assert weekday(date) == expected
    assert zeller_weekday(date) == expected


@pytest.mark.parametrize("date, expected", KNOWN)
def test_weekday_sakamoto(date, expected):
    assert weekday(date) == expected


@pytest.mark.parametrize("date, expected", KNOWN)
def test_weekday_zeller_agrees(date, expected):
    assert zeller_weekday(date) == expected


def test_weekday_name():
    assert weekday_name(Date(2024, 1, 1)) == "Monday"
    assert weekday_name(Date(2023, 12, 31)) == "Sunday"


def test_is_weekend():
    assert is_weekend(Date(2024, 1, 6))
    assert is_weekend(Date(2024, 1, 7))
    assert not is_weekend(Date(2024, 1, 5))
    assert not is_weekend(Date(2024, 1, 8))


def test_is_business_day_with_holidays():
    holiday = Date(2024, 1, 1)
    assert not is_business_day(holiday, holidays={holiday})
    assert is_business_day(holiday)
    assert not is_business_day(Date(2024, 1, 6))


def test_next_weekday_strictly_after():
    monday = Date(2024, 1, 1)
    assert next_weekday(monday, MONDAY) == Date(2024, 1, 8)
    assert next_weekday(monday, TUESDAY) == Date(2024, 1, 2)
    assert next_weekday(monday, SUNDAY) == Date(2024, 1, 7)
    wednesday = Date(2024, 1, 3)
    assert next_weekday(wednesday, MONDAY) == Date(2024, 1, 8)
    assert next_weekday(wednesday, FRIDAY) == Date(2024, 1, 5)


def test_previous_weekday_strictly_before():
    monday = Date(2024, 1, 8)
    assert previous_weekday(monday, MONDAY) == Date(2024, 1, 1)
    assert previous_weekday(monday, SUNDAY) == Date(2024, 1, 7)
    assert previous_weekday(monday, TUESDAY) == Date(2024, 1, 2)
    wednesday = Date(2024, 1, 10)
    assert previous_weekday(wednesday, FRIDAY) == Date(2024, 1, 5)
    assert previous_weekday(wednesday, TUESDAY) == Date(2024, 1, 9)


def test_iso_weeks_in_year():
    assert iso_weeks_in_year(2020) == 53
    assert iso_weeks_in_year(2015) == 53
    assert iso_weeks_in_year(2026) == 53
    assert iso_weeks_in_year(2024) == 52
    assert iso_weeks_in_year(2021) == 52
    assert iso_weeks_in_year(2019) == 52


def test_iso_week_regular():
    assert iso_week(Date(2024, 1, 1)) == (2024, 1)
    assert iso_week(Date(2024, 1, 7)) == (2024, 1)
    assert iso_week(Date(2024, 1, 8)) == (2024, 2)
    assert iso_week(Date(2024, 6, 15)) == (2024, 24)
    assert iso_week(Date(2026, 1, 1)) == (2026, 1)
    assert iso_week(Date(2026, 1, 4)) == (2026, 1)
    assert iso_week(Date(2026, 1, 5)) == (2026, 2)


def test_iso_week_belongs_to_previous_year():
    assert iso_week(Date(2021, 1, 3)) == (2020, 53)
    assert iso_week(Date(2023, 1, 1)) == (2022, 52)
    assert iso_week(Date(2021, 1, 4)) == (2021, 1)


def test_iso_week_belongs_to_next_year():
    assert iso_week(Date(2024, 12, 30)) == (2025, 1)
    assert iso_week(Date(2024, 12, 29)) == (2024, 52)
    assert iso_week(Date(2020, 12, 31)) == (2020, 53)


def test_business_days_between():
    monday = Date(2024, 1, 1)
    assert business_days_between(monday, Date(2024, 1, 8)) == 5
    assert business_days_between(monday, Date(2024, 1, 6)) == 5
    assert business_days_between(monday, Date(2024, 1, 5)) == 4
    assert business_days_between(monday, monday) == 0
    assert business_days_between(Date(2024, 1, 6), Date(2024, 1, 8)) == 0


def test_business_days_between_reversed_and_holidays():
    assert business_days_between(Date(2024, 1, 8), Date(2024, 1, 1)) == -5
    holidays = {Date(2024, 1, 1), Date(2024, 1, 3)}
    assert business_days_between(Date(2024, 1, 1), Date(2024, 1, 8), holidays) == 3


def test_add_business_days_forward():
    friday = Date(2024, 1, 5)
    assert add_business_days(friday, 1) == Date(2024, 1, 8)
    assert add_business_days(friday, 5) == Date(2024, 1, 12)
    assert add_business_days(friday, 0) == friday
    assert add_business_days(Date(2024, 1, 1), 1) == Date(2024, 1, 2)


def test_add_business_days_backward_and_holidays():
    monday = Date(2024, 1, 8)
    assert add_business_days(monday, -1) == Date(2024, 1, 5)
    assert add_business_days(monday, 1, holidays={Date(2024, 1, 9)}) == Date(2024, 1, 10)


def test_nth_weekday_of_month_from_start():
    assert nth_weekday_of_month(2024, 11, THURSDAY, 4) == Date(2024, 11, 28)
    assert nth_weekday_of_month(2024, 1, MONDAY, 1) == Date(2024, 1, 1)
    assert nth_weekday_of_month(2024, 1, TUESDAY, 1) == Date(2024, 1, 2)
    assert nth_weekday_of_month(2024, 1, SUNDAY, 1) == Date(2024, 1, 7)


def test_nth_weekday_of_month_from_end():
    assert nth_weekday_of_month(2024, 5, MONDAY, -1) == Date(2024, 5, 27)
    assert nth_weekday_of_month(2024, 5, FRIDAY, -1) == Date(2024, 5, 31)
    assert nth_weekday_of_month(2024, 5, FRIDAY, -2) == Date(2024, 5, 24)
    assert nth_weekday_of_month(2024, 2, THURSDAY, -1) == Date(2024, 2, 29)
    assert nth_weekday_of_month(2024, 5, SATURDAY, -1) == Date(2024, 5, 25)
    assert nth_weekday_of_month(2024, 5, THURSDAY, -1) == Date(2024, 5, 30)


def test_nth_weekday_of_month_invalid():
    with pytest.raises(ValueError):
        nth_weekday_of_month(2024, 1, MONDAY, 0)
    with pytest.raises(ValueError):
        nth_weekday_of_month(2024, 2, MONDAY, 5)
