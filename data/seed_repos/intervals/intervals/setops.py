"""Operations on collections of intervals."""

from .interval import Interval


def _sort_key(interval):
    """Order by lower bound, closed lower bounds first."""
    return (interval.lo, not interval.left_closed)


def merge(intervals):
    """Merge overlapping or adjacent intervals into a sorted disjoint list.

    Empty intervals are dropped.
    """
    ordered = sorted((iv for iv in intervals if not iv.is_empty), key=_sort_key)
    merged = []
    for interval in ordered:
        if merged and (merged[-1].overlaps(interval) or merged[-1].is_adjacent(interval)):
            merged[-1] = merged[-1].hull(interval)
        else:
            merged.append(interval)
    return merged


def union(first, second):
    """Return the merged union of two interval collections."""
    return merge(list(first) + list(second))


def total_length(intervals):
    """Return the total length covered, counting overlaps once."""
    return sum(interval.length for interval in merge(intervals))


def gaps(intervals):
    """Return the uncovered intervals between the first and last interval."""
    merged = merge(intervals)
    result = []
    for previous, current in zip(merged, merged[1:]):
        result.append(
            Interval(previous.hi, current.lo, not previous.right_closed, not current.left_closed)
        )
    return result


def intersect(first, second):
    """Return the intersection of two interval collections."""
    a = merge(first)
    b = merge(second)
    result = []
    i = j = 0
    while i < len(a) and j < len(b):
        common = a[i].intersection(b[j])
        if common is not None:
            result.append(common)
        if (a[i].hi, a[i].right_closed) < (b[j].hi, b[j].right_closed):
            i += 1
        else:
            j += 1
    return result


def complement(intervals, within):
    """Return the parts of ``within`` not covered by ``intervals``."""
    result = []
    cursor = (within.lo, within.left_closed)
    for interval in merge(intervals):
        clipped = interval.intersection(within)
        if clipped is None:
            continue
        lo, closed = cursor
        if lo < clipped.lo or (lo == clipped.lo and closed and not clipped.left_closed):
            result.append(Interval(lo, clipped.lo, closed, not clipped.left_closed))
        cursor = (clipped.hi, not clipped.right_closed)
    lo, closed = cursor
    if lo < within.hi or (lo == within.hi and closed and within.right_closed):
        result.append(Interval(lo, within.hi, closed, within.right_closed))
    return result


def difference(first, second):
    """Return the parts of ``first`` not covered by ``second``."""
    result = []
    for interval in merge(first):
        result.extend(complement(second, interval))
    return result


def covers(intervals, x):
    """Return True if any interval contains the point ``x``."""
    return any(interval.contains(x) for interval in intervals)


def find_containing(intervals, x):
    """Return the merged interval containing ``x`` or ``None``.

    Uses binary search over the merged, sorted intervals.
    """
    merged = merge(intervals)
    lo, hi = 0, len(merged) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        candidate = merged[mid]
        if candidate.contains(x):
            return candidate
        if x < candidate.lo:
            hi = mid - 1
        else:
            lo = mid + 1
    return None


def span(intervals):
    """Return the hull of all non-empty intervals, or ``None`` if none."""
    result = None
    for interval in intervals:
        if interval.is_empty:
            continue
        result = interval if result is None else result.hull(interval)
    return result
