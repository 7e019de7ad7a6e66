import pytest

from caching import LogicalClock, TTLCache


def test_constructor_validation():
    clock = LogicalClock()
    with pytest.raises(ValueError):
        TTLCache(clock, 0)
    with pytest.raises(ValueError):
        TTLCache(clock, 5, capacity=0)
    assert TTLCache(clock, 1, capacity=1).capacity == 1


def test_entry_visible_until_expiry_tick():
    clock = LogicalClock()
    c = TTLCache(clock, ttl=3)
    c.put("k", "v")
    clock.tick(2)
    assert c.get("k") == "v"
    clock.tick()
    assert c.get("k") is None
    assert c.stats.expirations == 1
    assert (c.stats.hits, c.stats.misses) == (1, 1)


def test_per_entry_ttl_and_validation():
    clock = LogicalClock(100)
    c = TTLCache(clock, ttl=10)
    c.put("short", 1, ttl=1)
    c.put("long", 2)
    clock.tick()
    assert "short" not in c
    assert "long" in c
    with pytest.raises(ValueError):
        c.put("bad", 3, ttl=0)


def test_remaining():
    clock = LogicalClock()
    c = TTLCache(clock, ttl=5)
    c.put("a", 1)
    assert c.remaining("a") == 5
    clock.tick(4)
    assert c.remaining("a") == 1
    clock.tick(3)
    assert c.remaining("a") == 0
    assert c.remaining("zz") == 0


def test_touch_extends_live_entries_only():
    clock = LogicalClock()
    c = TTLCache(clock, ttl=2)
    c.put("a", 1)
    clock.tick()
    assert c.touch("a")
    assert c.remaining("a") == 2
    assert c.touch("a", ttl=7)
    assert c.remaining("a") == 7
    clock.tick(7)
    assert not c.touch("a")
    assert not c.touch("missing")


def test_expire_removes_and_counts():
    clock = LogicalClock()
    c = TTLCache(clock, ttl=2)
    c.put("a", 1)
    c.put("b", 2, ttl=5)
    c.put("c", 3, ttl=1)
    assert c.expire() == 0
    clock.tick(2)
    assert c.expire() == 2
    assert c.live_keys() == ["b"]
    assert c.stats.expirations == 2
    assert c.expire() == 0
    assert c.stats.expirations == 2


def test_len_counts_only_live_entries():
    clock = LogicalClock()
    c = TTLCache(clock, ttl=2)
    c.put("x", 1)
    c.put("y", 1, ttl=4)
    assert len(c) == 2
    clock.tick(3)
    assert len(c) == 1


def test_overwrite_resets_expiry():
    clock = LogicalClock()
    c = TTLCache(clock, ttl=3)
    c.put("a", 1)
    clock.tick(2)
    c.put("a", 2)
    clock.tick(2)
    assert c.get("a") == 2


def test_capacity_evicts_soonest_expiring():
    clock = LogicalClock()
    c = TTLCache(clock, ttl=10, capacity=2)
    c.put("a", 1, ttl=8)
    c.put("b", 2, ttl=4)
    c.put("c", 3)
    assert c.live_keys() == ["a", "c"]
    assert c.stats.evictions == 1


def test_capacity_prefers_dropping_expired_entries():
    clock = LogicalClock()
    c = TTLCache(clock, ttl=10, capacity=2)
    c.put("a", 1, ttl=1)
    c.put("b", 2)
    clock.tick()
    c.put("c", 3)
    assert c.live_keys() == ["b", "c"]
    assert c.stats.evictions == 0
    assert c.stats.expirations == 1


def test_capacity_update_existing_key_does_not_evict():
    clock = LogicalClock()
    c = TTLCache(clock, ttl=10, capacity=2)
    c.put("a", 1)
    c.put("b", 2)
    c.put("a", 3)
    assert c.live_keys() == ["a", "b"]
    assert c.stats.evictions == 0


def test_capacity_tie_broken_by_key():
    clock = LogicalClock()
    c = TTLCache(clock, ttl=5, capacity=2)
    c.put("b", 1)
    c.put("a", 2)
    c.put("c", 3)
    assert c.live_keys() == ["b", "c"]


def test_touch_preserves_value():
    clock = LogicalClock()
    c = TTLCache(clock, ttl=3)
    c.put("a", "value")
    clock.tick(2)
    c.touch("a")
    clock.tick(2)
    assert c.get("a") == "value"


def test_get_missing_and_expired_return_default():
    clock = LogicalClock()
    c = TTLCache(clock, ttl=1)
    assert c.get("nope", "d") == "d"
    assert c.stats.misses == 1
    c.put("a", 1)
    clock.tick()
    assert c.get("a", "gone") == "gone"
    assert c.stats.misses == 2
    assert c.touch("a") is False
    assert c.touch("zz") is False
