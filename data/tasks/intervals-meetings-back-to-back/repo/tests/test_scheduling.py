import pytest

from intervals import (
    assign_rooms,
    can_attend_all,
    earliest_common_slot,
    free_slots,
    insert_meeting,
    max_concurrent,
    merge_busy,
    total_busy_time,
)


def test_max_concurrent_classic():
    assert max_concurrent([(0, 30), (5, 10), (15, 20)]) == 2
    assert max_concurrent([(1, 5), (2, 6), (3, 7)]) == 3
    assert max_concurrent([(1, 2), (3, 5), (4, 6)]) == 2


def test_max_concurrent_back_to_back_does_not_clash():
    assert max_concurrent([(9, 10), (10, 11), (11, 12)]) == 1


def test_max_concurrent_empty_and_zero_length():
    assert max_concurrent([]) == 0
    assert max_concurrent([(5, 5), (5, 5)]) == 0
    assert max_concurrent([(1, 3), (2, 2)]) == 1


def test_inverted_meetings_are_rejected():
    with pytest.raises(ValueError):
        max_concurrent([(3, 1)])
    with pytest.raises(ValueError):
        can_attend_all([(1, 2), (3, 1)])
    with pytest.raises(ValueError):
        assign_rooms([(3, 1)])
    with pytest.raises(ValueError):
        merge_busy([(3, 1)])


def test_can_attend_all():
    assert can_attend_all([(9, 10), (10, 11)]) is True
    assert can_attend_all([(10, 11), (9, 10)]) is True
    assert can_attend_all([(9, 10), (9.5, 11)]) is False
    assert can_attend_all([]) is True
    assert can_attend_all([(1, 4), (2, 3)]) is False


def test_assign_rooms_reuses_freed_rooms():
    assert assign_rooms([(0, 30), (5, 10), (15, 20)]) == [0, 1, 1]
    assert assign_rooms([(9, 10), (10, 11)]) == [0, 0]


def test_assign_rooms_preserves_input_order():
    assert assign_rooms([(15, 20), (0, 30), (5, 10)]) == [1, 0, 1]
    assert assign_rooms([(1, 5), (2, 6), (3, 7), (6, 8)]) == [0, 1, 2, 0]
    assert assign_rooms([]) == []


def test_assign_rooms_lowest_free_room():
    assert assign_rooms([(0, 10), (0, 3), (4, 6), (5, 12)]) == [1, 0, 0, 2]


def test_merge_busy():
    assert merge_busy([(3, 4), (1, 2), (2, 2.5), (6, 8), (7, 7.5)]) == [(1, 2.5), (3, 4), (6, 8)]
    assert merge_busy([(1, 2), (2, 3)]) == [(1, 3)]
    assert merge_busy([]) == []


def test_free_slots():
    busy = [(9, 10), (12, 13), (12.5, 14)]
    assert free_slots(busy, 8, 17) == [(8, 9), (10, 12), (14, 17)]


def test_free_slots_busy_outside_day():
    assert free_slots([(6, 9), (16, 20)], 8, 17) == [(9, 16)]
    assert free_slots([(5, 6), (18, 19)], 8, 17) == [(8, 17)]
    assert free_slots([(7, 18)], 8, 17) == []


def test_free_slots_min_length():
    busy = [(9, 10), (10.5, 12)]
    assert free_slots(busy, 9, 13, min_length=1) == [(12, 13)]
    assert free_slots(busy, 9, 13, min_length=0.5) == [(10, 10.5), (12, 13)]
    assert free_slots(busy, 9, 13, min_length=1.5) == []


def test_free_slots_edges_and_validation():
    assert free_slots([(8, 9)], 8, 10) == [(9, 10)]
    assert free_slots([(9, 10)], 8, 10) == [(8, 9)]
    assert free_slots([], 8, 8) == []
    with pytest.raises(ValueError):
        free_slots([], 10, 8)


def test_total_busy_time():
    assert total_busy_time([(1, 3), (2, 5), (7, 8)]) == 5
    assert total_busy_time([]) == 0


def test_insert_meeting_merges_overlaps():
    schedule = [(1, 2), (3, 5), (6, 7), (8, 10), (12, 16)]
    assert insert_meeting(schedule, (4, 8)) == [(1, 2), (3, 10), (12, 16)]


def test_insert_meeting_without_overlap_and_touching():
    assert insert_meeting([(1, 3), (6, 9)], (4, 5)) == [(1, 3), (4, 5), (6, 9)]
    assert insert_meeting([(1, 3), (6, 9)], (3, 6)) == [(1, 9)]
    assert insert_meeting([], (1, 2)) == [(1, 2)]
    assert insert_meeting([(1, 2)], (0, 0.5)) == [(0, 0.5), (1, 2)]
    assert insert_meeting([(1, 2)], (5, 6)) == [(1, 2), (5, 6)]
    with pytest.raises(ValueError):
        insert_meeting([], (2, 1))


def test_earliest_common_slot():
    alice = [(9, 10), (13, 14)]
    bob = [(10, 11), (12, 13)]
    assert earliest_common_slot(alice, bob, 1, 9, 17) == (11, 12)
    assert earliest_common_slot(alice, bob, 2, 9, 17) == (14, 16)
    assert earliest_common_slot(alice, bob, 4, 9, 17) is None
    assert earliest_common_slot([], [], 3, 9, 12) == (9, 12)
    with pytest.raises(ValueError):
        earliest_common_slot([], [], 0, 9, 17)
