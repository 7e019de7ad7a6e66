import weakref

import pytest

from caching import BoundedQueue, Empty, Full, RingBuffer


def test_capacity_validation():
    with pytest.raises(ValueError):
        RingBuffer(0)
    assert RingBuffer(1).capacity == 1


def test_append_until_full():
    rb = RingBuffer(3)
    assert rb.is_empty()
    rb.append(1)
    rb.append(2)
    assert not rb.is_full()
    rb.append(3)
    assert rb.is_full()
    assert rb.to_list() == [1, 2, 3]
    assert rb.overwritten == 0


def test_overwrites_oldest_when_full():
    rb = RingBuffer(3, items=range(5))
    assert rb.to_list() == [2, 3, 4]
    assert len(rb) == 3
    assert rb.overwritten == 2
    assert rb.peek() == 2
    assert rb.peek_newest() == 4


def test_popleft_and_pop():
    rb = RingBuffer(3, items=[1, 2, 3])
    assert rb.popleft() == 1
    assert rb.pop() == 3
    assert rb.to_list() == [2]
    rb.extend([4, 5])
    assert rb.to_list() == [2, 4, 5]
    assert rb.pop() == 5
    assert rb.popleft() == 2
    assert rb.popleft() == 4
    assert rb.is_empty()


def test_wraparound_after_pops():
    rb = RingBuffer(3, items=[1, 2, 3])
    rb.popleft()
    rb.popleft()
    rb.extend([4, 5])
    assert rb.to_list() == [3, 4, 5]
    rb.append(6)
    assert rb.to_list() == [4, 5, 6]
    assert rb.peek_newest() == 6


def test_empty_errors():
    rb = RingBuffer(2)
    for method in (rb.pop, rb.popleft, rb.peek, rb.peek_newest):
        with pytest.raises(Empty):
            method()


def test_indexing():
    rb = RingBuffer(4, items=range(6))
    assert rb[0] == 2
    assert rb[3] == 5
    assert rb[-1] == 5
    assert rb[-4] == 2
    with pytest.raises(IndexError):
        rb[4]
    with pytest.raises(IndexError):
        rb[-5]


def test_indexing_partial_buffer():
    rb = RingBuffer(4, items=[7, 8])
    assert rb[1] == 8
    assert rb[-2] == 7
    with pytest.raises(IndexError):
        rb[2]


def test_last_and_iter():
    rb = RingBuffer(4, items=range(1, 7))
    assert rb.last(2) == [5, 6]
    assert rb.last(1) == [6]
    assert rb.last(10) == [3, 4, 5, 6]
    assert rb.last(0) == []
    assert rb.last(-1) == []
    assert list(rb) == [3, 4, 5, 6]


def test_bounded_queue_fifo():
    q = BoundedQueue(2)
    q.put("a")
    q.put("b")
    assert q.get() == "a"
    q.put("c")
    assert q.get() == "b"
    assert q.get() == "c"
    with pytest.raises(Empty):
        q.get()


def test_bounded_queue_full():
    q = BoundedQueue(1)
    q.put(1)
    with pytest.raises(Full):
        q.put(2)
    assert not q.offer(3)
    assert q.rejected == 2
    assert len(q) == 1
    assert q.get() == 1
    assert q.offer(4)
    assert q.rejected == 2


def test_bounded_queue_drain_and_capacity():
    q = BoundedQueue(5)
    for i in range(4):
        q.put(i)
    assert q.capacity == 5
    assert q.remaining_capacity() == 1
    assert q.drain(2) == [0, 1]
    assert q.drain(10) == [2, 3]
    assert q.drain() == []
    q.put(9)
    assert q.drain() == [9]
    assert q.remaining_capacity() == 5


class _Item:
    pass


def test_popped_items_are_released():
    for method in ("popleft", "pop"):
        rb = RingBuffer(2)
        item = _Item()
        ref = weakref.ref(item)
        rb.append(item)
        del item
        getattr(rb, method)()
        assert ref() is None, method


def test_offer_returns_booleans():
    q = BoundedQueue(1)
    assert q.offer(1) is True
    assert q.offer(2) is False
