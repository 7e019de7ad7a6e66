"""Time-to-live cache driven by an injectable logical clock."""

from .stats import CacheStats


class TTLCache:
    """A cache whose entries expire ``ttl`` ticks after insertion.

    ``clock`` is any zero-argument callable returning the current tick,
    typically a :class:`~caching.clock.LogicalClock`. An entry written at
    tick ``t`` with ``ttl`` ``n`` is visible while ``now < t + n``. When
    ``capacity`` is given, the entry closest to expiry is evicted first.
    """

    def __init__(self, clock, ttl, capacity=None):
        if ttl <= 0:
            raise ValueError("ttl must be positive")
        if capacity is not None and capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.clock = clock
        self.ttl = ttl
        self.capacity = capacity
        self.stats = CacheStats()
        self._entries = {}

    def _is_live(self, expires_at, now):
        """Return True if an entry expiring at ``expires_at`` is still valid."""
        return now < expires_at

    def put(self, key, value, ttl=None):
        """Store ``value`` under ``key`` for ``ttl`` ticks (default: cache ttl)."""
        if ttl is None:
            ttl = self.ttl
        if ttl <= 0:
            raise ValueError("ttl must be positive")
        self.expire()
        if key not in self._entries and self.capacity is not None and len(self._entries) >= self.capacity:
            victim = min(self._entries, key=lambda k: (self._entries[k][1], repr(k)))
            del self._entries[victim]
            self.stats.record_eviction()
        self._entries[key] = (value, self.clock() + ttl)

    def get(self, key, default=None):
        """Return the live value for ``key`` or ``default``."""
        entry = self._entries.get(key)
        if entry is None:
            self.stats.record_miss()
            return default
        value, expires_at = entry
        if not self._is_live(expires_at, self.clock()):
            del self._entries[key]
            self.stats.record_expiration()
            self.stats.record_miss()
            return default
        self.stats.record_hit()
        return value

    def remaining(self, key):
        """Return ticks left before ``key`` expires, or 0 if absent/expired."""
        entry = self._entries.get(key)
        if entry is None:
            return 0
        return max(0, entry[1] - self.clock())

    def touch(self, key, ttl=None):
        """Reset the expiry of a live entry; return False if it is missing."""
        entry = self._entries.get(key)
        if entry is None or not self._is_live(entry[1], self.clock()):
            return False
        self._entries[key] = (entry[0], self.clock() + (self.ttl if ttl is None else ttl))
        return True

    def expire(self):
        """Drop every expired entry and return how many were removed."""
        now = self.clock()
        dead = [k for k, (_, exp) in self._entries.items() if not self._is_live(exp, now)]
        for key in dead:
            del self._entries[key]
        if dead:
            self.stats.record_expiration(len(dead))
        return len(dead)

    def live_keys(self):
        """Return the sorted keys of unexpired entries."""
        now = self.clock()
        return sorted(k for k, (_, exp) in self._entries.items() if self._is_live(exp, now))

    def __contains__(self, key):
        entry = self._entries.get(key)
        return entry is not None and self._is_live(entry[1], self.clock())

    def __len__(self):
        return len(self.live_keys())
