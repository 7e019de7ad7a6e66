"""Deterministic in-memory caches, memoization and bounded buffers."""

from .clock import LogicalClock
from .lfu import LFUCache
from .lru import LRUCache
from .memo import CacheInfo, make_key, memoize
from .ringbuffer import BoundedQueue, Empty, Full, RingBuffer
from .stats import CacheStats
from .ttl import TTLCache

__all__ = [
    "BoundedQueue",
    "CacheInfo",
    "CacheStats",
    "Empty",
    "Full",
    "LFUCache",
    "LRUCache",
    "LogicalClock",
    "RingBuffer",
    "TTLCache",
    "make_key",
    "memoize",
]
