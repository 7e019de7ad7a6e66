"""Least-frequently-used cache with LRU tie-breaking."""

from collections import OrderedDict

from .stats import CacheStats


class LFUCache:
    """A fixed-capacity cache that evicts the least frequently used entry.

    Among entries with equal use counts the least recently used one is
    evicted first. Both ``get`` hits and ``put`` updates count as uses.
    """

    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.stats = CacheStats()
        self._values = {}
        self._freq = {}
        self._buckets = {}
        self._min_freq = 0

    def _touch(self, key):
        """Move ``key`` from its frequency bucket to the next one."""
        freq = self._freq[key]
        bucket = self._buckets[freq]
        del bucket[key]
        if not bucket:
            del self._buckets[freq]
            if self._min_freq == freq:
                self._min_freq = freq + 1
        self._freq[key] = freq + 1
        self._buckets.setdefault(freq + 1, OrderedDict())[key] = None

    def _evict(self):
        """Remove and return the least frequently used ``(key, value)``."""
        bucket = self._buckets[self._min_freq]
        key, _ = bucket.popitem(last=False)
        if not bucket:
            del self._buckets[self._min_freq]
        del self._freq[key]
        value = self._values.pop(key)
        self.stats.record_eviction()
        return key, value

    def get(self, key, default=None):
        """Return the value for ``key`` and bump its use count."""
        if key not in self._values:
            self.stats.record_miss()
            return default
        self._touch(key)
        self.stats.record_hit()
        return self._values[key]

    def put(self, key, value):
        """Insert or update ``key``; returns the evicted ``(key, value)`` or None."""
        if key in self._values:
            self._values[key] = value
            self._touch(key)
            return None
        evicted = None
        if len(self._values) >= self.capacity:
            evicted = self._evict()
        self._values[key] = value
        self._freq[key] = 1
        self._buckets.setdefault(1, OrderedDict())[key] = None
        self._min_freq = 1
        return evicted

    def frequency(self, key):
        """Return the use count of ``key`` (0 if absent)."""
        return self._freq.get(key, 0)

    def eviction_candidate(self):
        """Return the key that would be evicted next, or None if empty."""
        if not self._values:
            return None
        return next(iter(self._buckets[self._min_freq]))

    def most_frequent(self, n):
        """Return up to ``n`` keys ordered by descending use count, then recency."""
        if n <= 0:
            return []
        result = []
        for freq in sorted(self._buckets, reverse=True):
            for key in reversed(self._buckets[freq]):
                result.append(key)
                if len(result) == n:
                    return result
        return result

    def __contains__(self, key):
        return key in self._values

    def __len__(self):
        return len(self._values)
