import pytest

from caching import LRUCache


def test_capacity_must_be_positive():
    with pytest.raises(ValueError):
        LRUCache(0)
    assert LRUCache(1).capacity == 1


def test_put_and_get():
    c = LRUCache(2)
    c.put("a", 1)
    assert c.get("a") == 1
    assert c.get("b") is None
    assert c.get("b", 7) == 7
    assert c.stats.hits == 1
    assert c.stats.misses == 2


def test_evicts_least_recently_used():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.get("a")
    c.put("c", 3)
    assert "b" not in c
    assert c.keys() == ["a", "c"]
    assert c.stats.evictions == 1


def test_put_existing_key_refreshes_recency_without_eviction():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.put("a", 10)
    assert len(c) == 2
    assert c.stats.evictions == 0
    c.put("c", 3)
    assert c.keys() == ["a", "c"]
    assert c.peek("a") == 10


def test_capacity_one():
    c = LRUCache(1)
    c.put(1, "x")
    c.put(2, "y")
    assert c.keys() == [2]
    assert len(c) == 1


def test_peek_does_not_change_order_or_stats():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    assert c.peek("a") == 1
    assert c.peek("zz", 0) == 0
    c.put("c", 3)
    assert "a" not in c
    assert c.stats.lookups == 0


def test_get_returns_falsy_values():
    c = LRUCache(2)
    c.put("z", 0)
    c.put("n", None)
    assert c.get("z", 5) == 0
    assert c.get("n", 5) is None
    assert c.stats.hits == 2


def test_on_evict_callback_order():
    seen = []
    c = LRUCache(2, on_evict=lambda k, v: seen.append((k, v)))
    for i in range(5):
        c.put(i, i * i)
    assert seen == [(0, 0), (1, 1), (2, 4)]


def test_pop():
    c = LRUCache(3)
    c.put("a", 1)
    assert c.pop("a") == 1
    assert "a" not in c
    assert c.pop("a", None) is None
    with pytest.raises(KeyError):
        c.pop("a")
    assert c.stats.evictions == 0


def test_resize_shrinks_and_returns_evicted():
    c = LRUCache(4)
    for k in "abcd":
        c.put(k, k.upper())
    assert c.resize(2) == [("a", "A"), ("b", "B")]
    assert c.keys() == ["c", "d"]
    assert c.resize(5) == []
    assert c.capacity == 5
    with pytest.raises(ValueError):
        c.resize(0)


def test_lru_key_and_clear():
    c = LRUCache(3)
    assert c.lru_key() is None
    c.put("a", 1)
    c.put("b", 2)
    c.get("a")
    assert c.lru_key() == "b"
    c.clear()
    assert len(c) == 0
    assert c.stats.evictions == 0


def test_resize_to_one_keeps_most_recent():
    c = LRUCache(3)
    for k in "abc":
        c.put(k, k)
    c.get("a")
    assert c.resize(1) == [("b", "b"), ("c", "c")]
    assert c.keys() == ["a"]
    assert c.stats.evictions == 2


def test_pop_default_and_membership():
    c = LRUCache(2)
    c.put("a", 1)
    assert c.pop("zz", "dflt") == "dflt"
    assert ("a" in c) is True
    assert ("zz" in c) is False
