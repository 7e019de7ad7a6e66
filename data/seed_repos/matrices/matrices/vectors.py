"""Vector helpers operating on plain Python lists."""

from fractions import Fraction

from .errors import ShapeError


def _check_lengths(u, v):
    """Raise ``ShapeError`` unless ``u`` and ``v`` have equal length."""
    if len(u) != len(v):
        raise ShapeError("vector lengths differ: %d vs %d" % (len(u), len(v)))


def dot(u, v):
    """Return the dot product of two equal-length vectors."""
    _check_lengths(u, v)
    return sum(a * b for a, b in zip(u, v))


def norm_squared(v):
    """Return the squared Euclidean norm of ``v``."""
    return dot(v, v)


def add_vectors(u, v):
    """Return the element-wise sum."""
    _check_lengths(u, v)
    return [a + b for a, b in zip(u, v)]


def sub_vectors(u, v):
    """Return the element-wise difference ``u - v``."""
    _check_lengths(u, v)
    return [a - b for a, b in zip(u, v)]


def scale_vector(k, v):
    """Return ``v`` scaled by ``k``."""
    return [k * a for a in v]


def cross(u, v):
    """Return the cross product of two 3-vectors."""
    if len(u) != 3 or len(v) != 3:
        raise ShapeError("cross product needs 3-vectors")
    return [
        u[1] * v[2] - u[2] * v[1],
        u[2] * v[0] - u[0] * v[2],
        u[0] * v[1] - u[1] * v[0],
    ]


def is_orthogonal(u, v):
    """Return True if ``u`` and ``v`` have zero dot product."""
    return dot(u, v) == 0


def is_zero(v):
    """Return True if every component is zero."""
    return all(a == 0 for a in v)


def projection(u, onto):
    """Return the exact projection of ``u`` onto the vector ``onto``."""
    denom = norm_squared(onto)
    if denom == 0:
        raise ValueError("cannot project onto the zero vector")
    factor = Fraction(dot(u, onto), denom)
    return [factor * a for a in onto]


def squared_distance(u, v):
    """Return the squared Euclidean distance between ``u`` and ``v``."""
    return norm_squared(sub_vectors(u, v))


def manhattan_distance(u, v):
    """Return the L1 distance between ``u`` and ``v``."""
    _check_lengths(u, v)
    return sum(abs(a - b) for a, b in zip(u, v))


def argmax_abs(v, start=0):
    """Return the index of the first entry of largest magnitude from ``start`` on."""
    if start >= len(v) or start < 0:
        raise IndexError("start out of range")
    best = start
    for i in range(start + 1, len(v)):
        if abs(v[i]) > abs(v[best]):
            best = i
    return best
