import pytest

from textkit import is_slug, slugify, transliterate, unique_slug


def test_slugify_basic():
    assert slugify("Hello, World!") == "hello-world"


def test_slugify_collapses_runs_and_strips_edges():
    assert slugify("  --Hello   there__  ") == "hello-there"


def test_slugify_keeps_digits():
    assert slugify("Top 10 Tips 2024") == "top-10-tips-2024"


def test_slugify_custom_separator():
    assert slugify("one two three", separator="_") == "one_two_three"


def test_slugify_empty_and_symbols_only():
    assert slugify("") == ""
    assert slugify("!!! ???") == ""


def test_slugify_transliterates_accents():
    assert slugify("Crème brûlée für Straße") == "creme-brulee-fuer-strasse"


def test_slugify_max_length_cuts_on_word_boundary():
    assert slugify("alpha beta gamma", max_length=10) == "alpha-beta"
    assert slugify("alpha beta gamma", max_length=9) == "alpha"
    assert slugify("alpha beta gamma", max_length=16) == "alpha-beta-gamma"


def test_slugify_max_length_exact_fit_is_unchanged():
    assert slugify("ab cd", max_length=5) == "ab-cd"
    assert slugify("ab cd", max_length=4) == "ab"


def test_slugify_max_length_hard_truncates_single_long_word():
    assert slugify("supercalifragilistic rest", max_length=5) == "super"


def test_slugify_max_length_zero_and_negative():
    assert slugify("abc", max_length=0) == ""
    with pytest.raises(ValueError):
        slugify("abc", max_length=-1)


def test_transliterate_preserves_case_and_other_chars():
    assert transliterate("Ärger über Öl") == "Aerger ueber Oel"
    assert transliterate("plain ascii!") == "plain ascii!"
    assert transliterate("ß") == "ss"


def test_is_slug_accepts_valid():
    assert is_slug("hello-world-42")
    assert is_slug("a")
    assert is_slug("snake_slug", separator="_")


def test_is_slug_rejects_invalid():
    assert is_slug("") is False
    assert is_slug("-start") is False
    assert is_slug("end-") is False
    assert is_slug("double--dash") is False
    assert is_slug("Upper-case") is False
    assert is_slug("has space") is False
    assert is_slug("under_score") is False


def test_unique_slug_without_collision():
    assert unique_slug("My Post", set()) == "my-post"
    assert unique_slug("My Post", {"other"}) == "my-post"


def test_unique_slug_with_collisions():
    assert unique_slug("My Post", {"my-post"}) == "my-post-2"
    assert unique_slug("My Post", {"my-post", "my-post-2", "my-post-3"}) == "my-post-4"
    assert unique_slug("My Post", {"my-post", "my-post-3"}) == "my-post-2"
    assert unique_slug("My Post", {"my-post", "my-post-2"}) == "my-post-3"
    assert unique_slug("a b", {"a_b"}, separator="_") == "a_b_2"
