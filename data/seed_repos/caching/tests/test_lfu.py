import pytest

from caching import LFUCache


def test_capacity_must_be_positive():
    with pytest.raises(ValueError):
        LFUCache(0)


def test_get_counts_hits_and_misses():
    c = LFUCache(2)
    c.put("a", 1)
    assert c.get("a") == 1
    assert c.get("x") is None
    assert c.get("x", 9) == 9
    assert (c.stats.hits, c.stats.misses) == (1, 2)


def test_evicts_least_frequent():
    c = LFUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.get("a")
    assert c.put("c", 3) == ("b", 2)
    assert "a" in c and "c" in c and "b" not in c
    assert c.stats.evictions == 1


def test_ties_broken_by_recency():
    c = LFUCache(3)
    c.put("a", 1)
    c.put("b", 2)
    c.put("c", 3)
    c.get("a")
    c.get("b")
    assert c.eviction_candidate() == "c"
    c.get("c")
    assert c.eviction_candidate() == "a"
    assert c.put("d", 4) == ("a", 1)


def test_new_entry_resets_min_frequency():
    c = LFUCache(2)
    c.put("a", 1)
    c.get("a")
    c.get("a")
    c.put("b", 2)
    assert c.put("c", 3) == ("b", 2)
    assert c.frequency("a") == 3
    assert c.frequency("c") == 1


def test_update_counts_as_use_and_does_not_evict():
    c = LFUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    assert c.put("a", 10) is None
    assert c.frequency("a") == 2
    assert len(c) == 2
    assert c.get("a") == 10
    assert c.eviction_candidate() == "b"


def test_min_frequency_advances_when_bucket_empties():
    c = LFUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.get("a")
    c.get("b")
    c.get("b")
    assert c.eviction_candidate() == "a"
    assert c.put("c", 3) == ("a", 1)


def test_frequency_of_missing_key_and_empty_candidate():
    c = LFUCache(1)
    assert c.frequency("nope") == 0
    assert c.eviction_candidate() is None
    assert len(c) == 0


def test_capacity_one_replaces_entry():
    c = LFUCache(1)
    c.put("a", 1)
    c.get("a")
    assert c.put("b", 2) == ("a", 1)
    assert c.get("b") == 2
    assert c.frequency("a") == 0


def test_most_frequent():
    c = LFUCache(4)
    for k in "abcd":
        c.put(k, k)
    c.get("c")
    c.get("c")
    c.get("a")
    c.get("b")
    assert c.most_frequent(1) == ["c"]
    assert c.most_frequent(3) == ["c", "b", "a"]
    assert c.most_frequent(10) == ["c", "b", "a", "d"]
    assert c.most_frequent(0) == []
