import pytest

from intervals import Interval


def test_constructors_set_bounds():
    assert Interval.closed(1, 2) == Interval(1, 2, True, True)
    assert Interval.open(1, 2) == Interval(1, 2, False, False)
    assert Interval.closed_open(1, 2) == Interval(1, 2, True, False)
    assert Interval.open_closed(1, 2) == Interval(1, 2, False, True)


def test_rejects_inverted_bounds():
    with pytest.raises(ValueError):
        Interval(3, 2)
    assert Interval(2, 2).length == 0


def test_is_empty():
    assert Interval(2, 2).is_empty is False
    assert Interval.closed_open(2, 2).is_empty is True
    assert Interval.open_closed(2, 2).is_empty is True
    assert Interval.open(2, 2).is_empty is True
    assert Interval.open(2, 3).is_empty is False


def test_length_and_midpoint():
    assert Interval(-2, 6).length == 8
    assert Interval(-2, 6).midpoint == 2
    assert Interval(1, 2).midpoint == 1.5


def test_contains_closed_bounds():
    iv = Interval.closed(1, 5)
    assert iv.contains(1) is True
    assert iv.contains(5) is True
    assert iv.contains(3) is True
    assert iv.contains(0.999) is False
    assert iv.contains(5.001) is False


def test_contains_open_bounds():
    iv = Interval.open(1, 5)
    assert iv.contains(1) is False
    assert iv.contains(5) is False
    assert iv.contains(1.001) is True
    half = Interval.closed_open(1, 5)
    assert half.contains(1) is True
    assert half.contains(5) is False
    assert 3 in half
    assert 7 not in half


def test_contains_interval():
    outer = Interval.closed(0, 10)
    assert outer.contains_interval(Interval.closed(0, 10)) is True
    assert outer.contains_interval(Interval.open(2, 3)) is True
    assert outer.contains_interval(Interval.closed(-1, 3)) is False
    assert outer.contains_interval(Interval.closed(3, 11)) is False


def test_contains_interval_open_edges():
    outer = Interval.open(0, 10)
    assert outer.contains_interval(Interval.closed(0, 5)) is False
    assert outer.contains_interval(Interval.open_closed(0, 5)) is True
    assert outer.contains_interval(Interval.closed(5, 10)) is False
    assert outer.contains_interval(Interval.closed_open(5, 10)) is True
    assert outer.contains_interval(Interval.open(20, 20)) is True


def test_intersection_basic():
    assert Interval(0, 5).intersection(Interval(3, 8)) == Interval(3, 5)
    assert Interval(3, 8).intersection(Interval(0, 5)) == Interval(3, 5)
    assert Interval(0, 10).intersection(Interval(2, 3)) == Interval(2, 3)
    assert Interval(0, 1).intersection(Interval(2, 3)) is None


def test_intersection_bound_types():
    assert Interval.closed_open(0, 5).intersection(Interval.open_closed(3, 8)) == Interval.open(3, 5)
    assert Interval.closed(0, 5).intersection(Interval.closed_open(0, 5)) == Interval.closed_open(0, 5)
    assert Interval.open(0, 5).intersection(Interval.closed(0, 5)) == Interval.open(0, 5)
    assert Interval.closed(0, 5).intersection(Interval.open(3, 8)) == Interval.open_closed(3, 5)
    assert Interval.open(3, 8).intersection(Interval.closed(0, 5)) == Interval.open_closed(3, 5)
    assert Interval.closed(3, 8).intersection(Interval.open(0, 5)) == Interval.closed_open(3, 5)
    assert Interval.open(0, 5).intersection(Interval.closed(3, 8)) == Interval.closed_open(3, 5)


def test_intersection_touching_points():
    assert Interval.closed(0, 2).intersection(Interval.closed(2, 4)) == Interval(2, 2)
    assert Interval.closed_open(0, 2).intersection(Interval.closed(2, 4)) is None
    assert Interval.closed(0, 2).intersection(Interval.open_closed(2, 4)) is None


def test_overlaps():
    assert Interval(0, 2).overlaps(Interval(2, 3)) is True
    assert Interval.closed_open(0, 2).overlaps(Interval(2, 3)) is False
    assert Interval(0, 2).overlaps(Interval(1, 1)) is True


def test_is_adjacent():
    assert Interval.closed_open(1, 2).is_adjacent(Interval.closed(2, 3)) is True
    assert Interval.closed(2, 3).is_adjacent(Interval.closed_open(1, 2)) is True
    assert Interval.closed(1, 2).is_adjacent(Interval.open_closed(2, 3)) is True
    assert Interval.closed_open(1, 2).is_adjacent(Interval.open(2, 3)) is False
    assert Interval.closed(1, 2).is_adjacent(Interval.closed(2, 3)) is False
    assert Interval.closed(1, 2).is_adjacent(Interval.closed(3, 4)) is False
    assert Interval.open(3, 4).is_adjacent(Interval.closed(1, 3)) is True


def test_hull():
    assert Interval(0, 1).hull(Interval(5, 6)) == Interval(0, 6)
    assert Interval.open(0, 5).hull(Interval.closed(0, 3)) == Interval.closed_open(0, 5)
    assert Interval.open(0, 5).hull(Interval.closed(3, 5)) == Interval.open_closed(0, 5)
    assert Interval.open(2, 5).hull(Interval.open(0, 3)) == Interval.open(0, 5)
    assert Interval.open(0, 3).hull(Interval.closed(2, 5)) == Interval.open_closed(0, 5)
    assert Interval.closed(3, 5).hull(Interval.open(0, 5)) == Interval.open_closed(0, 5)
    assert Interval.closed(0, 3).hull(Interval.open(2, 5)) == Interval.closed_open(0, 5)
    assert Interval.open(2, 5).hull(Interval.closed(0, 3)) == Interval.closed_open(0, 5)
    assert Interval.closed(2, 6).hull(Interval.open(0, 5)) == Interval.open_closed(0, 6)


def test_clamp():
    iv = Interval.open(0, 10)
    assert iv.clamp(-5) == 0
    assert iv.clamp(15) == 10
    assert iv.clamp(4) == 4
    assert iv.clamp(10) == 10


def test_shift_and_expand():
    assert Interval.closed_open(1, 3).shift(2) == Interval.closed_open(3, 5)
    assert Interval.closed_open(1, 3).shift(-1) == Interval.closed_open(0, 2)
    assert Interval.open(1, 3).expand(1) == Interval.open(0, 4)
    assert Interval(1, 3).expand(-1) == Interval(2, 2)
    with pytest.raises(ValueError):
        Interval(1, 3).expand(-2)


def test_split_at():
    left, right = Interval.open(0, 10).split_at(4)
    assert left == Interval.open(0, 4)
    assert right == Interval.closed_open(4, 10)
    left, right = Interval.closed(0, 10).split_at(4)
    assert left == Interval.closed_open(0, 4)
    assert right == Interval.closed(4, 10)


def test_split_at_rejects_boundaries():
    with pytest.raises(ValueError):
        Interval(0, 10).split_at(0)
    with pytest.raises(ValueError):
        Interval(0, 10).split_at(10)
    with pytest.raises(ValueError):
        Interval(0, 10).split_at(11)


def test_split_into():
    assert Interval.closed(0, 9).split_into(3) == [
        Interval.closed_open(0, 3),
        Interval.closed_open(3, 6),
        Interval.closed(6, 9),
    ]
    assert Interval.open(0, 4).split_into(2) == [Interval.open(0, 2), Interval.closed_open(2, 4)]
    assert Interval(0, 4).split_into(1) == [Interval(0, 4)]
    with pytest.raises(ValueError):
        Interval(0, 4).split_into(0)


def test_str():
    assert str(Interval.closed_open(1, 5)) == "[1, 5)"
    assert str(Interval.open_closed(1, 5)) == "(1, 5]"
