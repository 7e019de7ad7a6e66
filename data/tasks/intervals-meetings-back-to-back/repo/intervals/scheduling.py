"""Scheduling helpers for half-open ``(start, end)`` time slots.

A meeting ``(9, 10)`` occupies ``[9, 10)``, so it does not clash with a
meeting that starts at 10.
"""


def _validate(meetings):
    """Raise ``ValueError`` if any meeting ends before it starts."""
    for start, end in meetings:
        if end < start:
            raise ValueError(f"meeting ends before it starts: {(start, end)}")


def max_concurrent(meetings):
    """Return the largest number of meetings running at the same instant.

    This is also the minimum number of rooms required.
    """
    _validate(meetings)
    events = []
    for start, end in meetings:
        if start == end:
            continue
        events.append((start, 1))
        events.append((end, -1))
    events.sort()
    current = best = 0
    for _, delta in events:
        current += delta
        best = max(best, current)
    return best


def can_attend_all(meetings):
    """Return True if no two meetings overlap."""
    _validate(meetings)
    ordered = sorted(meetings)
    for previous, current in zip(ordered, ordered[1:]):
        if current[0] <= previous[1]:
            return False
    return True


def assign_rooms(meetings):
    """Greedily assign rooms; returns a room index for each meeting.

    Meetings are processed by start time and always take the
    lowest-numbered free room.  The result is in input order.
    """
    _validate(meetings)
    order = sorted(range(len(meetings)), key=lambda i: (meetings[i][0], meetings[i][1], i))
    room_free_at = []
    assignment = [0] * len(meetings)
    for index in order:
        start, end = meetings[index]
        for room, free_at in enumerate(room_free_at):
            if free_at <= start:
                room_free_at[room] = end
                assignment[index] = room
                break
        else:
            assignment[index] = len(room_free_at)
            room_free_at.append(end)
    return assignment


def merge_busy(meetings):
    """Merge overlapping or touching busy slots into sorted disjoint slots."""
    _validate(meetings)
    merged = []
    for start, end in sorted(meetings):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def free_slots(busy, day_start, day_end, min_length=0):
    """Return the free ``(start, end)`` slots within the working day.

    Slots shorter than ``min_length`` (and empty slots) are omitted.
    """
    if day_end < day_start:
        raise ValueError("day ends before it starts")
    result = []
    cursor = day_start
    for start, end in merge_busy(busy):
        if end <= cursor:
            continue
        if start >= day_end:
            break
        if start > cursor and start - cursor >= min_length:
            result.append((cursor, start))
        cursor = max(cursor, end)
    if cursor < day_end and day_end - cursor >= min_length:
        result.append((cursor, day_end))
    return result


def total_busy_time(meetings):
    """Return the total time covered by at least one meeting."""
    return sum(end - start for start, end in merge_busy(meetings))


def insert_meeting(schedule, meeting):
    """Insert ``meeting`` into a sorted disjoint schedule, merging as needed."""
    start, end = meeting
    if end < start:
        raise ValueError("meeting ends before it starts")
    result = []
    index = 0
    while index < len(schedule) and schedule[index][1] < start:
        result.append(schedule[index])
        index += 1
    while index < len(schedule) and schedule[index][0] <= end:
        start = min(start, schedule[index][0])
        end = max(end, schedule[index][1])
        index += 1
    result.append((start, end))
    result.extend(schedule[index:])
    return result


def earliest_common_slot(first_busy, second_busy, duration, day_start, day_end):
    """Return the earliest slot of ``duration`` free for both, or ``None``."""
    if duration <= 0:
        raise ValueError("duration must be positive")
    combined = list(first_busy) + list(second_busy)
    slots = free_slots(combined, day_start, day_end, duration)
    if not slots:
        return None
    start = slots[0][0]
    return (start, start + duration)
