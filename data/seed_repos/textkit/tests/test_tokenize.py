import pytest

from textkit import (
    average_word_length,
    char_count,
    count_substring,
    most_common,
    ngrams,
    sentences,
    word_count,
    word_frequencies,
    words,
)


def test_words_basic_punctuation():
    assert words("Hello, world! 42 times.") == ["Hello", "world", "42", "times"]


def test_words_apostrophes():
    assert words("don't 'quoted' it's") == ["don't", "quoted", "it's"]
    assert words("rock'n'roll") == ["rock'n'roll"]
    assert words("trailing'") == ["trailing"]
    assert words("a'") == ["a"]


def test_words_empty():
    assert words("") == []
    assert words(" ,.; ") == []


def test_sentences_split():
    assert sentences("Hi there. How are you?! Fine") == ["Hi there.", "How are you?!", "Fine"]


def test_sentences_ignore_inner_dots():
    assert sentences("Pi is 3.14 roughly. Yes.") == ["Pi is 3.14 roughly.", "Yes."]
    assert sentences("Wait... what?") == ["Wait...", "what?"]


def test_sentences_empty_and_punctuation_only():
    assert sentences("") == []
    assert sentences("   ") == []
    assert sentences("Done.") == ["Done."]
    assert sentences("!") == ["!"]


def test_ngrams():
    assert ngrams(["a", "b", "c"], 2) == [("a", "b"), ("b", "c")]
    assert ngrams("abc", 3) == [("a", "b", "c")]
    assert ngrams("abc", 1) == [("a",), ("b",), ("c",)]
    assert ngrams("ab", 3) == []
    with pytest.raises(ValueError):
        ngrams("abc", 0)


def test_word_count():
    assert word_count("one, two; three") == 3
    assert word_count("") == 0


def test_word_frequencies_case_insensitive_by_default():
    assert word_frequencies("The cat and the hat") == {"the": 2, "cat": 1, "and": 1, "hat": 1}


def test_word_frequencies_case_sensitive():
    assert word_frequencies("The the", case_sensitive=True) == {"The": 1, "the": 1}


def test_most_common_order_and_limit():
    text = "b a c b a b"
    assert most_common(text) == [("b", 3), ("a", 2), ("c", 1)]
    assert most_common(text, 2) == [("b", 3), ("a", 2)]
    assert most_common("y x", 1) == [("x", 1)]
    assert most_common("", 3) == []


def test_char_count():
    assert char_count("a b\tc\n") == 6
    assert char_count("a b\tc\n", ignore_spaces=True) == 3
    assert char_count("") == 0


def test_count_substring_non_overlapping():
    assert count_substring("aaaa", "aa") == 2
    assert count_substring("abcabc", "abc") == 2
    assert count_substring("abc", "x") == 0


def test_count_substring_overlapping():
    assert count_substring("aaaa", "aa", overlapping=True) == 3
    assert count_substring("abab", "bab", overlapping=True) == 1


def test_count_substring_match_at_start_and_empty():
    assert count_substring("ab", "a") == 1
    with pytest.raises(ValueError):
        count_substring("abc", "")


def test_average_word_length():
    assert average_word_length("ab abcd") == 3.0
    assert average_word_length("a bb ccc dddd") == 2.5
    assert average_word_length("...") == 0.0
