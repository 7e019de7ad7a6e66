from fractions import Fraction

import pytest

from matrices import (
    ShapeError,
    add_vectors,
    argmax_abs,
    cross,
    dot,
    is_orthogonal,
    is_zero,
    manhattan_distance,
    norm_squared,
    projection,
    scale_vector,
    squared_distance,
    sub_vectors,
)


def test_dot():
    assert dot([1, 2, 3], [4, 5, 6]) == 32
    assert dot([], []) == 0
    with pytest.raises(ShapeError):
        dot([1, 2], [1])


def test_norm_squared():
    assert norm_squared([3, 4]) == 25
    assert norm_squared([-2]) == 4


def test_add_sub_scale():
    assert add_vectors([1, 2], [10, 20]) == [11, 22]
    assert sub_vectors([1, 2], [10, 20]) == [-9, -18]
    assert scale_vector(3, [1, -2]) == [3, -6]
    with pytest.raises(ShapeError):
        add_vectors([1], [1, 2])
    with pytest.raises(ShapeError):
        sub_vectors([1], [1, 2])


def test_cross_product():
    assert cross([1, 0, 0], [0, 1, 0]) == [0, 0, 1]
    assert cross([0, 1, 0], [1, 0, 0]) == [0, 0, -1]
    assert cross([2, 3, 4], [5, 6, 7]) == [-3, 6, -3]
    with pytest.raises(ShapeError):
        cross([1, 2], [3, 4])
    with pytest.raises(ShapeError):
        cross([1, 2, 3], [3, 4])


def test_orthogonal_and_zero():
    assert is_orthogonal([1, 1], [1, -1])
    assert not is_orthogonal([1, 1], [1, 0])
    assert is_zero([0, 0])
    assert not is_zero([0, 1])
    assert is_zero([])


def test_projection_exact():
    assert projection([2, 3], [1, 0]) == [2, 0]
    assert projection([1, 2], [1, 1]) == [Fraction(3, 2), Fraction(3, 2)]
    with pytest.raises(ValueError):
        projection([1, 2], [0, 0])


def test_distances():
    assert squared_distance([1, 2], [4, 6]) == 25
    assert manhattan_distance([1, 2], [4, -6]) == 11
    with pytest.raises(ShapeError):
        manhattan_distance([1], [])


def test_argmax_abs():
    assert argmax_abs([1, -5, 3]) == 1
    assert argmax_abs([4, -4, 2]) == 0
    assert argmax_abs([4, 1, 7, -7], start=1) == 2
    assert argmax_abs([9, 1], start=1) == 1
    with pytest.raises(IndexError):
        argmax_abs([1, 2], start=2)
    with pytest.raises(IndexError):
        argmax_abs([1, 2], start=-1)


def test_length_mismatch_messages_report_both_lengths():
    for func in (dot, add_vectors, sub_vectors, manhattan_distance, squared_distance):
        with pytest.raises(ShapeError, match="2 vs 1"):
            func([1, 2], [3])
