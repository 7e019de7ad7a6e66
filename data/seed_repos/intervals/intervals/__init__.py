"""intervals: numeric intervals with open and closed bounds."""

from .interval import Interval
from .parsing import format_interval, format_number, parse_interval, parse_many, parse_number
from .scheduling import (
    assign_rooms,
    can_attend_all,
    earliest_common_slot,
    free_slots,
    insert_meeting,
    max_concurrent,
    merge_busy,
    total_busy_time,
)
from .setops import (
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

__all__ = [
    "Interval",
    "assign_rooms",
    "can_attend_all",
    "complement",
    "covers",
    "difference",
    "earliest_common_slot",
    "find_containing",
    "format_interval",
    "format_number",
    "free_slots",
    "gaps",
    "insert_meeting",
    "intersect",
    "max_concurrent",
    "merge",
    "merge_busy",
    "parse_interval",
    "parse_many",
    "parse_number",
    "span",
    "total_busy_time",
    "total_length",
    "union",
]
