import pytest

from money import Currency, get_currency, known_currencies, register_currency


def test_get_currency_case_insensitive():
    usd = get_currency("usd")
    assert usd.code == "USD"
    assert usd.decimals == 2
    assert usd.symbol == "$"
    assert get_currency(usd) is usd


def test_minor_per_major():
    assert get_currency("USD").minor_per_major == 100
    assert get_currency("JPY").minor_per_major == 1
    assert get_currency("KWD").minor_per_major == 1000


def test_builtin_registry_details():
    details = {code: (get_currency(code).decimals, get_currency(code).symbol_first) for code in known_currencies()}
    assert details == {
        "CHF": (2, True),
        "EUR": (2, False),
        "GBP": (2, True),
        "JPY": (0, True),
        "KWD": (3, True),
        "SEK": (2, False),
        "USD": (2, True),
    }


def test_unknown_currency():
    with pytest.raises(ValueError):
        get_currency("XYZ")


def test_register_currency_returns_copy():
    btc = Currency("XBT", 8, "₿")
    table = register_currency(btc)
    assert get_currency("xbt", table) is btc
    assert "XBT" not in known_currencies()
    assert "USD" in table


def test_register_currency_into_given_registry():
    registry = {}
    result = register_currency(Currency("abc", 1, "A"), registry)
    assert result is registry
    assert list(registry) == ["ABC"]


def test_register_currency_validation():
    with pytest.raises(ValueError):
        register_currency(Currency("AB", 2, "a"))
    with pytest.raises(ValueError):
        register_currency(Currency("A1C", 2, "a"))
    with pytest.raises(ValueError):
        register_currency(Currency("ABC", -1, "a"))
    assert register_currency(Currency("ABC", 0, "a"))["ABC"].decimals == 0


def test_known_currencies_sorted():
    codes = known_currencies()
    assert codes == sorted(codes)
    assert {"USD", "EUR", "JPY"} <= set(codes)
