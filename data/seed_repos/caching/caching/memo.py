"""Memoization decorator with hit/miss statistics."""

import functools
from collections import OrderedDict, namedtuple

CacheInfo = namedtuple("CacheInfo", ["hits", "misses", "maxsize", "currsize"])

_KWARGS_MARK = object()


def make_key(args, kwargs, typed=False):
    """Build a hashable cache key from call arguments.

    Keyword arguments are sorted so that their order does not matter. With
    ``typed`` the argument types are part of the key, so ``1`` and ``1.0``
    are cached separately.
    """
    key = tuple(args)
    if kwargs:
        key += (_KWARGS_MARK,)
        for name in sorted(kwargs):
            key += (name, kwargs[name])
    if typed:
        key += tuple(type(a) for a in args)
        if kwargs:
            key += tuple(type(kwargs[name]) for name in sorted(kwargs))
    return key


def memoize(maxsize=None, typed=False):
    """Decorator caching results of a function of hashable arguments.

    ``maxsize`` bounds the number of cached results (least recently used
    evicted first); ``None`` means unbounded and ``0`` disables caching
    while still counting misses. The wrapper gains ``cache_info()``,
    ``cache_clear()`` and ``cache_contains(*args, **kwargs)``.
    """
    if maxsize is not None and maxsize < 0:
        raise ValueError("maxsize must be non-negative")

    def decorate(func):
        cache = OrderedDict()
        counts = {"hits": 0, "misses": 0}

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            key = make_key(args, kwargs, typed)
            if key in cache:
                counts["hits"] += 1
                cache.move_to_end(key)
                return cache[key]
            counts["misses"] += 1
            result = func(*args, **kwargs)
            if maxsize is None or maxsize > 0:
                cache[key] = result
                if maxsize is not None and len(cache) > maxsize:
                    cache.popitem(last=False)
            return result

        def cache_info():
            return CacheInfo(counts["hits"], counts["misses"], maxsize, len(cache))

        def cache_clear():
            cache.clear()
            counts["hits"] = counts["misses"] = 0

        def cache_contains(*args, **kwargs):
            return make_key(args, kwargs, typed) in cache

        wrapper.cache_info = cache_info
        wrapper.cache_clear = cache_clear
        wrapper.cache_contains = cache_contains
        return wrapper

    return decorate
