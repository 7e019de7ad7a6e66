"""A logical clock that advances only when told to."""


class LogicalClock:
    """A monotonically increasing integer counter used as a time source.

    Calling the clock returns the current tick, so it can be passed anywhere
    a zero-argument time function is expected.
    """

    def __init__(self, start=0):
        if start < 0:
            raise ValueError("start must be non-negative")
        self._now = start

    def now(self):
        """Return the current tick."""
        return self._now

    def tick(self, steps=1):
        """Advance the clock by ``steps`` (must be positive) and return the new tick."""
        if steps <= 0:
            raise ValueError("steps must be positive")
        self._now += steps
        return self._now

    def advance_to(self, tick):
        """Move the clock forward to ``tick``; moving backwards is an error."""
        if tick < self._now:
            raise ValueError("clock cannot move backwards")
        self._now = tick
        return self._now

    def __call__(self):
        return self._now
