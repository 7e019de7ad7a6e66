"""Fixed-capacity ring buffer and bounded FIFO queue."""


class Full(Exception):
    """Raised when putting into a full bounded queue."""


class Empty(Exception):
    """Raised when taking from an empty buffer or queue."""


class RingBuffer:
    """A circular buffer that overwrites its oldest item when full."""

    def __init__(self, capacity, items=()):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._items = [None] * capacity
        self._start = 0
        self._size = 0
        self.overwritten = 0
        for item in items:
            self.append(item)

    @property
    def capacity(self):
        """Maximum number of items held."""
        return len(self._items)

    def _index(self, offset):
        """Translate a logical offset into a physical slot index."""
        return (self._start + offset) % self.capacity

    def is_full(self):
        """Return True if the buffer holds ``capacity`` items."""
        return self._size == self.capacity

    def is_empty(self):
        """Return True if the buffer holds no items."""
        return self._size == 0

    def append(self, item):
        """Add ``item`` at the newest end, dropping the oldest when full."""
        if self.is_full():
            self._items[self._start] = item
            self._start = self._index(1)
            self.overwritten += 1
            return
        self._items[self._index(self._size)] = item
        self._size += 1

    def extend(self, items):
        """Append every item in order."""
        for item in items:
            self.append(item)

    def popleft(self):
        """Remove and return the oldest item."""
        if self.is_empty():
            raise Empty("buffer is empty")
        item = self._items[self._start]
        self._items[self._start] = None
        self._start = self._index(1)
        self._size -= 1
        return item

    def pop(self):
        """Remove and return the newest item."""
        if self.is_empty():
            raise Empty("buffer is empty")
        slot = self._index(self._size - 1)
        item = self._items[slot]
        self._items[slot] = None
        self._size -= 1
        return item

    def peek(self):
        """Return the oldest item without removing it."""
        if self.is_empty():
            raise Empty("buffer is empty")
        return self._items[self._start]

    def peek_newest(self):
        """Return the newest item without removing it."""
        if self.is_empty():
            raise Empty("buffer is empty")
        return self._items[self._index(self._size - 1)]

    def __getitem__(self, index):
        if index < 0:
            index += self._size
        if index < 0 or index >= self._size:
            raise IndexError("ring buffer index out of range")
        return self._items[self._index(index)]

    def to_list(self):
        """Return items from oldest to newest."""
        return [self._items[self._index(i)] for i in range(self._size)]

    def last(self, n):
        """Return the ``n`` newest items, oldest first."""
        if n <= 0:
            return []
        items = self.to_list()
        return items[-n:]

    def __len__(self):
        return self._size

    def __iter__(self):
        return iter(self.to_list())


class BoundedQueue:
    """A FIFO queue with a hard capacity limit."""

    def __init__(self, capacity):
        self._buffer = RingBuffer(capacity)
        self.rejected = 0

    @property
    def capacity(self):
        """Maximum number of queued items."""
        return self._buffer.capacity

    def put(self, item):
        """Enqueue ``item`` or raise ``Full``."""
        if self._buffer.is_full():
            self.rejected += 1
            raise Full("queue is full")
        self._buffer.append(item)

    def offer(self, item):
        """Enqueue ``item`` if there is room; return whether it was accepted."""
        try:
            self.put(item)
        except Full:
            return False
        return True

    def get(self):
        """Dequeue and return the oldest item or raise ``Empty``."""
        return self._buffer.popleft()

    def drain(self, limit=None):
        """Dequeue up to ``limit`` items (all when None) and return them."""
        count = len(self._buffer) if limit is None else min(limit, len(self._buffer))
        return [self._buffer.popleft() for _ in range(count)]

    def remaining_capacity(self):
        """Return how many more items fit."""
        return self.capacity - len(self._buffer)

    def __len__(self):
        return len(self._buffer)
