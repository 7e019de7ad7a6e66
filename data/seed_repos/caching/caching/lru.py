"""Least-recently-used cache."""

from collections import OrderedDict

from .stats import CacheStats

_MISSING = object()


class LRUCache:
    """A fixed-capacity mapping that evicts the least recently used entry.

    ``on_evict(key, value)`` is called for every entry evicted to make room.
    """

    def __init__(self, capacity, on_evict=None):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.on_evict = on_evict
        self.stats = CacheStats()
        self._data = OrderedDict()

    def get(self, key, default=None):
        """Return the value for ``key`` and mark it most recently used."""
        value = self._data.get(key, _MISSING)
        if value is _MISSING:
            self.stats.record_miss()
            return default
        self._data.move_to_end(key)
        self.stats.record_hit()
        return value

    def peek(self, key, default=None):
        """Return the value for ``key`` without touching recency or stats."""
        return self._data.get(key, default)

    def put(self, key, value):
        """Insert or update ``key``, evicting old entries if over capacity."""
        if key in self._data:
            self._data.move_to_end(key)
        self._data[key] = value
        self._shrink_to(self.capacity)

    def _shrink_to(self, size):
        """Evict least recently used entries until at most ``size`` remain."""
        evicted = []
        while len(self._data) > size:
            key, value = self._data.popitem(last=False)
            evicted.append((key, value))
            self.stats.record_eviction()
            if self.on_evict is not None:
                self.on_evict(key, value)
        return evicted

    def pop(self, key, default=_MISSING):
        """Remove ``key`` and return its value (or ``default``)."""
        if key in self._data:
            return self._data.pop(key)
        if default is _MISSING:
            raise KeyError(key)
        return default

    def resize(self, capacity):
        """Change the capacity, evicting entries if it shrinks; return evicted pairs."""
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        return self._shrink_to(capacity)

    def keys(self):
        """Return keys from least to most recently used."""
        return list(self._data)

    def lru_key(self):
        """Return the key that would be evicted next, or None if empty."""
        for key in self._data:
            return key
        return None

    def clear(self):
        """Remove every entry without counting evictions."""
        self._data.clear()

    def __contains__(self, key):
        return key in self._data

    def __len__(self):
        return len(self._data)
