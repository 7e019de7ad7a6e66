"""Counters describing cache behaviour."""

from fractions import Fraction


class CacheStats:
    """Mutable hit/miss/eviction counters for a cache."""

    __slots__ = ("hits", "misses", "evictions", "expirations")

    def __init__(self, hits=0, misses=0, evictions=0, expirations=0):
        self.hits = hits
        self.misses = misses
        self.evictions = evictions
        self.expirations = expirations

    def record_hit(self):
        """Count one successful lookup."""
        self.hits += 1

    def record_miss(self):
        """Count one failed lookup."""
        self.misses += 1

    def record_eviction(self, count=1):
        """Count entries removed to make room."""
        self.evictions += count

    def record_expiration(self, count=1):
        """Count entries removed because they expired."""
        self.expirations += count

    @property
    def lookups(self):
        """Total number of lookups."""
        return self.hits + self.misses

    def hit_rate(self):
        """Return hits / lookups as a ``Fraction`` (0 when there were none)."""
        if self.lookups == 0:
            return Fraction(0)
        return Fraction(self.hits, self.lookups)

    def miss_rate(self):
        """Return misses / lookups as a ``Fraction`` (0 when there were none)."""
        if self.lookups == 0:
            return Fraction(0)
        return 1 - self.hit_rate()

    def removed(self):
        """Return the number of entries removed for any reason."""
        return self.evictions + self.expirations

    def merge(self, other):
        """Return a new ``CacheStats`` summing this and ``other``."""
        return CacheStats(
            self.hits + other.hits,
            self.misses + other.misses,
            self.evictions + other.evictions,
            self.expirations + other.expirations,
        )

    def reset(self):
        """Set every counter back to zero."""
        self.hits = self.misses = self.evictions = self.expirations = 0

    def as_dict(self):
        """Return the counters as a plain dict."""
        return {
            "hits": self.hits,
            "misses": self.misses,
            "evictions": self.evictions,
            "expirations": self.expirations,
        }

    def __eq__(self, other):
        if not isinstance(other, CacheStats):
            return NotImplemented
        return self.as_dict() == other.as_dict()

    def __repr__(self):
        return "CacheStats(hits=%d, misses=%d, evictions=%d, expirations=%d)" % (
            self.hits,
            self.misses,
            self.evictions,
            self.expirations,
        )
