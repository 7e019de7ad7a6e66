from textkit import (
    camel_case,
    constant_case,
    is_snake_case,
    kebab_case,
    pascal_case,
    snake_case,
    split_identifier,
    swap_case,
    title_case,
)


def test_split_identifier_styles():
    assert split_identifier("snake_case_name") == ["snake", "case", "name"]
    assert split_identifier("kebab-case-name") == ["kebab", "case", "name"]
    assert split_identifier("camelCaseName") == ["camel", "case", "name"]
    assert split_identifier("PascalCaseName") == ["pascal", "case", "name"]


def test_split_identifier_acronyms():
    assert split_identifier("HTTPServer") == ["http", "server"]
    assert split_identifier("parseXML") == ["parse", "xml"]
    assert split_identifier("getHTTPResponseCode") == ["get", "http", "response", "code"]
    assert split_identifier("ABC") == ["abc"]


def test_split_identifier_digits_and_separators():
    assert split_identifier("version2Beta") == ["version2", "beta"]
    assert split_identifier("__private__name") == ["private", "name"]
    assert split_identifier("") == []
    assert split_identifier("A") == ["a"]


def test_snake_and_kebab_and_constant():
    assert snake_case("HTTPServerError") == "http_server_error"
    assert kebab_case("someValue") == "some-value"
    assert constant_case("max-retry count") == "MAX_RETRY_COUNT"


def test_camel_case():
    assert camel_case("user_id_value") == "userIdValue"
    assert camel_case("UserName") == "userName"
    assert camel_case("x") == "x"
    assert camel_case("") == ""
    assert camel_case("__") == ""


def test_pascal_case():
    assert pascal_case("user-name") == "UserName"
    assert pascal_case("http_server") == "HttpServer"
    assert pascal_case("") == ""


def test_title_case_small_words():
    assert title_case("the lord of the rings") == "The Lord of the Rings"
    assert title_case("war AND peace") == "War and Peace"


def test_title_case_small_word_first_and_last():
    assert title_case("of mice and men") == "Of Mice and Men"
    assert title_case("what it is made of") == "What It Is Made Of"
    assert title_case("a") == "A"
    assert title_case("") == ""


def test_swap_case():
    assert swap_case("Hello World 42!") == "hELLO wORLD 42!"
    assert swap_case("") == ""


def test_is_snake_case_valid():
    assert is_snake_case("snake_case")
    assert is_snake_case("a")
    assert is_snake_case("v2_api")
    assert is_snake_case("az")


def test_is_snake_case_invalid():
    assert not is_snake_case("")
    assert not is_snake_case("_leading")
    assert not is_snake_case("trailing_")
    assert not is_snake_case("double__under")
    assert not is_snake_case("2fast")
    assert not is_snake_case("camelCase")
    assert not is_snake_case("kebab-case")
