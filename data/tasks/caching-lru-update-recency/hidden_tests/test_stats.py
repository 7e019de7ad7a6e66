from fractions import Fraction

from caching import CacheStats


def test_stats_start_at_zero():
    s = CacheStats()
    assert s.as_dict() == {"hits": 0, "misses": 0, "evictions": 0, "expirations": 0}
    assert s.lookups == 0


def test_record_methods():
    s = CacheStats()
    s.record_hit()
    s.record_hit()
    s.record_miss()
    s.record_eviction()
    s.record_eviction(3)
    s.record_expiration(2)
    assert s.as_dict() == {"hits": 2, "misses": 1, "evictions": 4, "expirations": 2}
    assert s.lookups == 3
    assert s.removed() == 6


def test_hit_and_miss_rate():
    s = CacheStats(hits=3, misses=1)
    assert s.hit_rate() == Fraction(3, 4)
    assert s.miss_rate() == Fraction(1, 4)


def test_rates_with_no_lookups():
    s = CacheStats(evictions=5)
    assert s.hit_rate() == 0
    assert s.miss_rate() == 0


def test_rates_all_misses():
    s = CacheStats(misses=4)
    assert s.hit_rate() == 0
    assert s.miss_rate() == 1


def test_merge_sums_each_counter():
    a = CacheStats(1, 2, 3, 4)
    b = CacheStats(10, 20, 30, 40)
    assert a.merge(b).as_dict() == {"hits": 11, "misses": 22, "evictions": 33, "expirations": 44}
    assert a.as_dict() == {"hits": 1, "misses": 2, "evictions": 3, "expirations": 4}


def test_reset():
    s = CacheStats(1, 2, 3, 4)
    s.reset()
    assert s == CacheStats()


def test_equality_and_repr():
    assert CacheStats(1, 2) == CacheStats(1, 2, 0, 0)
    assert CacheStats(1, 2) != CacheStats(2, 1)
    assert CacheStats() != "CacheStats()"
    assert repr(CacheStats(1, 2, 3, 4)) == "CacheStats(hits=1, misses=2, evictions=3, expirations=4)"


def test_eq_with_other_type_is_false():
    assert (CacheStats() == "CacheStats()") is False
