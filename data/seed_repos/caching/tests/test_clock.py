import pytest

from caching import LogicalClock


def test_clock_starts_at_given_tick():
    assert LogicalClock().now() == 0
    assert LogicalClock(5).now() == 5
    assert LogicalClock(0)() == 0


def test_clock_rejects_negative_start():
    with pytest.raises(ValueError):
        LogicalClock(-1)


def test_tick_advances_and_returns_new_value():
    clock = LogicalClock(3)
    assert clock.tick() == 4
    assert clock.tick(5) == 9
    assert clock() == 9


def test_tick_requires_positive_steps():
    clock = LogicalClock()
    with pytest.raises(ValueError):
        clock.tick(0)
    with pytest.raises(ValueError):
        clock.tick(-2)
    assert clock.now() == 0


def test_advance_to():
    clock = LogicalClock(10)
    assert clock.advance_to(10) == 10
    assert clock.advance_to(15) == 15
    with pytest.raises(ValueError):
        clock.advance_to(14)
    assert clock.now() == 15
