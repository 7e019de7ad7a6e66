import pytest

from textkit import closest_match, common_prefix, common_suffix, hamming, lcs_length, levenshtein, similarity


def test_levenshtein_classic():
    assert levenshtein("kitten", "sitting") == 3
    assert levenshtein("flaw", "lawn") == 2


def test_levenshtein_empty_and_equal():
    assert levenshtein("", "abc") == 3
    assert levenshtein("abcd", "") == 4
    assert levenshtein("same", "same") == 0
    assert levenshtein("", "") == 0


def test_levenshtein_single_operations():
    assert levenshtein("abc", "abd") == 1
    assert levenshtein("abc", "abcd") == 1
    assert levenshtein("abc", "ac") == 1
    assert levenshtein("a", "b") == 1


def test_levenshtein_symmetric():
    assert levenshtein("sunday", "saturday") == levenshtein("saturday", "sunday") == 3


def test_hamming():
    assert hamming("karolin", "kathrin") == 3
    assert hamming("", "") == 0
    assert hamming("abc", "abc") == 0
    with pytest.raises(ValueError):
        hamming("ab", "abc")


def test_similarity():
    assert similarity("", "") == 1.0
    assert similarity("abc", "abc") == 1.0
    assert similarity("abcd", "abce") == 0.75
    assert similarity("ab", "abcd") == 0.5
    assert similarity("abc", "") == 0.0


def test_common_prefix():
    assert common_prefix(["interspecies", "interstellar", "interstate"]) == "inters"
    assert common_prefix(["dog", "racecar"]) == ""
    assert common_prefix(["same"]) == "same"
    assert common_prefix([]) == ""
    assert common_prefix(["abc", "ab", "abd"]) == "ab"
    assert common_prefix(["ab", "abc"]) == "ab"


def test_common_suffix():
    assert common_suffix(["running", "jumping", "sing"]) == "ing"
    assert common_suffix(["abc", "xyz"]) == ""
    assert common_suffix([]) == ""


def test_lcs_length():
    assert lcs_length("ABCBDAB", "BDCABA") == 4
    assert lcs_length("abc", "abc") == 3
    assert lcs_length("abc", "def") == 0
    assert lcs_length("", "abc") == 0
    assert lcs_length("abc", "") == 0
    assert lcs_length("axbxc", "abc") == 3


def test_closest_match():
    assert closest_match("appl", ["ape", "apple", "peach"]) == "apple"
    assert closest_match("x", []) is None


def test_closest_match_ties_prefer_first():
    assert closest_match("cat", ["bat", "hat", "cat"]) == "cat"
    assert closest_match("cat", ["bat", "hat"]) == "bat"


def test_closest_match_max_distance():
    assert closest_match("hello", ["help", "world"], max_distance=2) == "help"
    assert closest_match("hello", ["help", "world"], max_distance=1) is None
    assert closest_match("abc", ["abd"], max_distance=0) is None
    assert closest_match("abc", ["abc"], max_distance=0) == "abc"
