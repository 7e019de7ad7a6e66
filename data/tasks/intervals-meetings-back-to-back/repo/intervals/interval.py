"""The :class:`Interval` type."""

from dataclasses import dataclass


def _tighter_lower(a, b):
    """Return the more restrictive of two ``(value, closed)`` lower bounds."""
    if a[0] > b[0]:
        return a
    if b[0] > a[0]:
        return b
    return (a[0], a[1] and b[1])


def _tighter_upper(a, b):
    """Return the more restrictive of two ``(value, closed)`` upper bounds."""
    if a[0] < b[0]:
        return a
    if b[0] < a[0]:
        return b
    return (a[0], a[1] and b[1])


def _looser_lower(a, b):
    """Return the less restrictive of two ``(value, closed)`` lower bounds."""
    if a[0] < b[0]:
        return a
    if b[0] < a[0]:
        return b
    return (a[0], a[1] or b[1])


def _looser_upper(a, b):
    """Return the less restrictive of two ``(value, closed)`` upper bounds."""
    if a[0] > b[0]:
        return a
    if b[0] > a[0]:
        return b
    return (a[0], a[1] or b[1])


@dataclass(frozen=True)
class Interval:
    """An interval between ``lo`` and ``hi`` with open or closed ends.

    ``Interval(1, 5)`` is the closed interval ``[1, 5]``;
    ``Interval(1, 5, right_closed=False)`` is ``[1, 5)``.
    """

    lo: float
    hi: float
    left_closed: bool = True
    right_closed: bool = True

    def __post_init__(self):
        if self.lo > self.hi:
            raise ValueError(f"lower bound {self.lo} exceeds upper bound {self.hi}")

    @classmethod
    def closed(cls, lo, hi):
        """Build ``[lo, hi]``."""
        return cls(lo, hi, True, True)

    @classmethod
    def open(cls, lo, hi):
        """Build ``(lo, hi)``."""
        return cls(lo, hi, False, False)

    @classmethod
    def closed_open(cls, lo, hi):
        """Build the half-open interval ``[lo, hi)``."""
        return cls(lo, hi, True, False)

    @classmethod
    def open_closed(cls, lo, hi):
        """Build the half-open interval ``(lo, hi]``."""
        return cls(lo, hi, False, True)

    @property
    def is_empty(self):
        """True if the interval contains no points."""
        return self.lo == self.hi and not (self.left_closed and self.right_closed)

    @property
    def length(self):
        """The distance between the bounds."""
        return self.hi - self.lo

    @property
    def midpoint(self):
        """The point halfway between the bounds."""
        return (self.lo + self.hi) / 2

    def contains(self, x):
        """Return True if the point ``x`` lies in the interval."""
        if x < self.lo or x > self.hi:
            return False
        if x == self.lo and not self.left_closed:
            return False
        if x == self.hi and not self.right_closed:
            return False
        return True

    def __contains__(self, x):
        return self.contains(x)

    def contains_interval(self, other):
        """Return True if every point of ``other`` lies in this interval."""
        if other.is_empty:
            return True
        if other.lo < self.lo or other.hi > self.hi:
            return False
        if other.lo == self.lo and other.left_closed and not self.left_closed:
            return False
        if other.hi == self.hi and other.right_closed and not self.right_closed:
            return False
        return True

    def intersection(self, other):
        """Return the common part of both intervals, or ``None``."""
        lo, left_closed = _tighter_lower((self.lo, self.left_closed), (other.lo, other.left_closed))
        hi, right_closed = _tighter_upper((self.hi, self.right_closed), (other.hi, other.right_closed))
        if lo > hi:
            return None
        if lo == hi and not (left_closed and right_closed):
            return None
        return Interval(lo, hi, left_closed, right_closed)

    def overlaps(self, other):
        """Return True if the intervals share at least one point."""
        return self.intersection(other) is not None

    def is_adjacent(self, other):
        """Return True if the intervals touch without overlapping.

        ``[1, 2)`` and ``[2, 3]`` are adjacent; ``[1, 2)`` and ``(2, 3]``
        are not, because the point 2 belongs to neither.
        """
        if self.hi == other.lo:
            return self.right_closed != other.left_closed
        if other.hi == self.lo:
            return other.right_closed != self.left_closed
        return False

    def hull(self, other):
        """Return the smallest interval containing both intervals."""
        lo, left_closed = _looser_lower((self.lo, self.left_closed), (other.lo, other.left_closed))
        hi, right_closed = _looser_upper((self.hi, self.right_closed), (other.hi, other.right_closed))
        return Interval(lo, hi, left_closed, right_closed)

    def clamp(self, x):
        """Clamp ``x`` to the range ``[lo, hi]``, ignoring openness."""
        if x < self.lo:
            return self.lo
        if x > self.hi:
            return self.hi
        return x

    def shift(self, delta):
        """Return the interval moved by ``delta``."""
        return Interval(self.lo + delta, self.hi + delta, self.left_closed, self.right_closed)

    def expand(self, amount):
        """Grow (or shrink, for negative ``amount``) both ends by ``amount``."""
        lo = self.lo - amount
        hi = self.hi + amount
        if lo > hi:
            raise ValueError("interval would shrink below zero length")
        return Interval(lo, hi, self.left_closed, self.right_closed)

    def split_at(self, point):
        """Split at ``point`` into ``(left, right)`` halves.

        The point itself goes to the right half.  Raises ``ValueError`` if
        ``point`` is not strictly inside the interval.
        """
        if point <= self.lo or point >= self.hi:
            raise ValueError(f"split point {point} is not inside the interval")
        left = Interval(self.lo, point, self.left_closed, False)
        right = Interval(point, self.hi, True, self.right_closed)
        return left, right

    def split_into(self, parts):
        """Split into ``parts`` consecutive pieces of equal length."""
        if parts < 1:
            raise ValueError("parts must be at least 1")
        if parts == 1:
            return [self]
        step = self.length / parts
        pieces = []
        start = self.lo
        for index in range(parts):
            end = self.hi if index == parts - 1 else self.lo + step * (index + 1)
            left_closed = self.left_closed if index == 0 else True
            right_closed = self.right_closed if index == parts - 1 else False
            pieces.append(Interval(start, end, left_closed, right_closed))
            start = end
        return pieces

    def __str__(self):
        left = "[" if self.left_closed else "("
        right = "]" if self.right_closed else ")"
        return f"{left}{self.lo}, {self.hi}{right}"
