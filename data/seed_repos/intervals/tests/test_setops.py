from intervals import (
    Interval,
    complement,
    covers,
    difference,
    find_containing,
    gaps,
    intersect,
    merge,
    span,
    total_length,
    union,
)

C = Interval.closed
O = Interval.open
CO = Interval.closed_open
OC = Interval.open_closed


def test_merge_overlapping_and_sorting():
    assert merge([C(5, 7), C(1, 3), C(2, 4)]) == [C(1, 4), C(5, 7)]


def test_merge_chains_into_last_interval():
    assert merge([C(0, 1), C(3, 5), C(4, 6)]) == [C(0, 1), C(3, 6)]
    assert merge([C(0, 1), C(3, 5), CO(5, 6), C(8, 9)]) == [C(0, 1), CO(3, 6), C(8, 9)]


def test_merge_adjacent_half_open():
    assert merge([CO(0, 1), CO(1, 2), CO(3, 4)]) == [CO(0, 2), CO(3, 4)]


def test_merge_keeps_separated_open_bounds():
    assert merge([CO(0, 1), OC(1, 2)]) == [CO(0, 1), OC(1, 2)]
    assert merge([C(0, 1), C(1, 2)]) == [C(0, 2)]


def test_merge_contained_and_empty():
    assert merge([C(0, 10), C(2, 3), O(4, 4)]) == [C(0, 10)]
    assert merge([]) == []
    assert merge([O(1, 1)]) == []


def test_merge_same_start_prefers_closed():
    assert merge([O(0, 2), C(0, 1)]) == [CO(0, 2)]


def test_union():
    assert union([C(0, 2)], [C(1, 5), C(7, 8)]) == [C(0, 5), C(7, 8)]
    assert union([], []) == []


def test_total_length_counts_overlap_once():
    assert total_length([C(0, 4), C(2, 6), C(10, 11)]) == 7
    assert total_length([]) == 0


def test_gaps():
    assert gaps([C(0, 1), C(3, 4), C(6, 9)]) == [O(1, 3), O(4, 6)]
    assert gaps([CO(0, 1), OC(1, 2)]) == [C(1, 1)]
    assert gaps([CO(0, 1), CO(2, 3)]) == [CO(1, 2)]
    assert gaps([C(0, 5)]) == []
    assert gaps([]) == []


def test_intersect_lists():
    a = [C(0, 2), C(5, 10), C(13, 23), C(24, 25)]
    b = [C(1, 5), C(8, 12), C(15, 24), C(25, 26)]
    assert intersect(a, b) == [C(1, 2), C(5, 5), C(8, 10), C(15, 23), C(24, 24), C(25, 25)]


def test_intersect_with_open_bounds_and_empty():
    assert intersect([CO(0, 5)], [C(5, 8)]) == []
    assert intersect([CO(0, 5), C(6, 7)], [C(4, 6)]) == [CO(4, 5), C(6, 6)]
    assert intersect([C(0, 3)], [CO(0, 3), C(3, 4)]) == [C(0, 3)]
    assert intersect([], [C(0, 1)]) == []


def test_complement_basic():
    assert complement([C(2, 3), C(5, 6)], C(0, 10)) == [CO(0, 2), O(3, 5), OC(6, 10)]


def test_complement_touching_within_bounds():
    assert complement([C(0, 3)], C(0, 10)) == [OC(3, 10)]
    assert complement([C(7, 10)], C(0, 10)) == [CO(0, 7)]
    assert complement([C(0, 10)], C(0, 10)) == []
    assert complement([], C(0, 10)) == [C(0, 10)]


def test_complement_single_point_gaps():
    assert complement([O(0, 5)], C(0, 5)) == [C(0, 0), C(5, 5)]
    assert complement([O(0, 5)], O(0, 5)) == []
    assert complement([CO(0, 2), OC(2, 4)], C(0, 4)) == [C(2, 2)]


def test_complement_ignores_outside_intervals():
    assert complement([C(-5, -1), C(20, 30)], C(0, 10)) == [C(0, 10)]
    assert complement([C(-5, 2), C(8, 30)], C(0, 10)) == [O(2, 8)]


def test_difference():
    assert difference([C(0, 10)], [C(3, 4)]) == [CO(0, 3), OC(4, 10)]
    assert difference([C(0, 2), C(5, 6)], [C(1, 5)]) == [CO(0, 1), OC(5, 6)]
    assert difference([C(0, 1)], []) == [C(0, 1)]
    assert difference([], [C(0, 1)]) == []


def test_covers():
    intervals = [CO(0, 1), C(2, 3)]
    assert covers(intervals, 0) is True
    assert covers(intervals, 1) is False
    assert covers(intervals, 3) is True
    assert covers([], 0) is False


def test_find_containing():
    intervals = [C(10, 12), CO(0, 2), O(4, 6), C(7, 8), C(20, 30)]
    assert find_containing(intervals, 1) == CO(0, 2)
    assert find_containing(intervals, 5) == O(4, 6)
    assert find_containing(intervals, 10) == C(10, 12)
    assert find_containing(intervals, 30) == C(20, 30)
    assert find_containing(intervals, 7) == C(7, 8)


def test_find_containing_misses():
    intervals = [CO(0, 2), O(4, 6), C(7, 8), C(10, 12), C(20, 30)]
    assert find_containing(intervals, 2) is None
    assert find_containing(intervals, 4) is None
    assert find_containing(intervals, 6) is None
    assert find_containing(intervals, -1) is None
    assert find_containing(intervals, 31) is None
    assert find_containing([], 0) is None


def test_span():
    assert span([C(5, 6), O(0, 1), O(9, 9)]) == OC(0, 6)
    assert span([O(3, 3)]) is None
    assert span([]) is None
