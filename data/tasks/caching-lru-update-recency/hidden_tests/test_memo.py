import pytest

from caching import CacheInfo, make_key, memoize


def test_make_key_kwargs_order_independent():
    assert make_key((1,), {"a": 1, "b": 2}) == make_key((1,), {"b": 2, "a": 1})
    assert make_key((1, 2), {}) == (1, 2)


def test_make_key_distinguishes_positional_from_keyword():
    assert make_key(("a", 1), {}) != make_key((), {"a": 1})


def test_make_key_typed():
    assert make_key((1,), {}) == make_key((1.0,), {})
    assert make_key((1,), {}, typed=True) != make_key((1.0,), {}, typed=True)
    assert make_key((), {"x": 1}, typed=True) != make_key((), {"x": 1.0}, typed=True)
    assert make_key((1,), {}, typed=True) == (1, int)


def test_memoize_counts_hits_and_misses():
    calls = []

    @memoize()
    def square(x):
        calls.append(x)
        return x * x

    assert square(3) == 9
    assert square(3) == 9
    assert square(4) == 16
    assert calls == [3, 4]
    assert square.cache_info() == CacheInfo(hits=1, misses=2, maxsize=None, currsize=2)


def test_memoize_preserves_metadata():
    @memoize()
    def documented(x):
        """Doc string."""
        return x

    assert documented.__name__ == "documented"
    assert documented.__doc__ == "Doc string."


def test_memoize_bounded_evicts_lru():
    calls = []

    @memoize(maxsize=2)
    def ident(x):
        calls.append(x)
        return x

    ident(1)
    ident(2)
    ident(1)
    ident(3)
    assert ident.cache_contains(1)
    assert not ident.cache_contains(2)
    assert ident.cache_contains(3)
    assert ident.cache_info().currsize == 2
    ident(2)
    assert calls == [1, 2, 3, 2]


def test_memoize_maxsize_zero_never_caches():
    calls = []

    @memoize(maxsize=0)
    def f(x):
        calls.append(x)
        return x

    f(1)
    f(1)
    assert calls == [1, 1]
    assert f.cache_info() == CacheInfo(0, 2, 0, 0)


def test_memoize_rejects_negative_maxsize():
    with pytest.raises(ValueError):
        memoize(maxsize=-1)


def test_memoize_kwargs_and_clear():
    @memoize()
    def add(a, b=0):
        return a + b

    assert add(1, b=2) == 3
    assert add(1, b=2) == 3
    assert add.cache_contains(1, b=2)
    assert not add.cache_contains(1, 2)
    add.cache_clear()
    assert add.cache_info() == CacheInfo(0, 0, None, 0)


def test_memoize_typed_separates_int_and_float():
    @memoize(typed=True)
    def kind(x):
        return type(x).__name__

    assert kind(1) == "int"
    assert kind(1.0) == "float"
    assert kind.cache_info().misses == 2


def test_memoize_recursive_fibonacci():
    @memoize()
    def fib(n):
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    assert fib(30) == 832040
    info = fib.cache_info()
    assert info.misses == 31
    assert info.hits == 28


def test_memoize_caches_none_results():
    calls = []

    @memoize()
    def nothing(x):
        calls.append(x)

    nothing(1)
    nothing(1)
    assert calls == [1]


def test_memoize_maxsize_one():
    calls = []

    @memoize(maxsize=1)
    def f(x):
        calls.append(x)
        return -x

    assert f(2) == -2
    assert f(2) == -2
    f(3)
    f(2)
    assert calls == [2, 3, 2]
    assert f.cache_info() == CacheInfo(1, 3, 1, 1)


def test_memoize_keyword_values_are_part_of_key():
    @memoize()
    def add(a, b=0):
        return a + b

    assert add(1, b=2) == 3
    assert add(1, b=5) == 6
    assert add.cache_info().misses == 2
    assert make_key((), {"x": 1}) != make_key((), {"x": 2})
