"""Exact linear algebra on :class:`Matrix` using ``fractions.Fraction``."""

from fractions import Fraction

from .errors import ShapeError, SingularMatrixError
from .matrix import Matrix


def _fraction_rows(m):
    """Return the rows of ``m`` converted to ``Fraction``."""
    return [[Fraction(a) for a in row] for row in m.to_list()]


def _simplify(value):
    """Return ``value`` as an ``int`` when it is an integral ``Fraction``."""
    if isinstance(value, Fraction) and value.denominator == 1:
        return value.numerator
    return value


def _find_pivot(rows, col, start):
    """Return the first row index at or below ``start`` with a nonzero in ``col``."""
    for r in range(start, len(rows)):
        if rows[r][col] != 0:
            return r
    return None


def row_echelon(m):
    """Return ``(echelon_rows, swaps)`` from Gaussian elimination.

    The result is a list of ``Fraction`` rows in row echelon form; ``swaps``
    counts row interchanges, which flip the determinant's sign.
    """
    rows = _fraction_rows(m)
    n_rows, n_cols = m.shape
    swaps = 0
    pivot_row = 0
    for col in range(n_cols):
        if pivot_row >= n_rows:
            break
        p = _find_pivot(rows, col, pivot_row)
        if p is None:
            continue
        if p != pivot_row:
            rows[p], rows[pivot_row] = rows[pivot_row], rows[p]
            swaps += 1
        pivot = rows[pivot_row][col]
        for r in range(pivot_row + 1, n_rows):
            factor = rows[r][col] / pivot
            if factor != 0:
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[pivot_row])]
        pivot_row += 1
    return rows, swaps


def reduced_row_echelon(m):
    """Return the reduced row echelon form of ``m`` as a ``Matrix``."""
    rows, _ = row_echelon(m)
    n_rows, n_cols = m.shape
    for r in range(n_rows - 1, -1, -1):
        lead = next((c for c in range(n_cols) if rows[r][c] != 0), None)
        if lead is None:
            continue
        pivot = rows[r][lead]
        rows[r] = [a / pivot for a in rows[r]]
        for above in range(r):
            factor = rows[above][lead]
            if factor != 0:
                rows[above] = [a - factor * b for a, b in zip(rows[above], rows[r])]
    return Matrix(rows).map(_simplify)


def rank(m):
    """Return the rank of ``m``."""
    rows, _ = row_echelon(m)
    return sum(1 for row in rows if any(a != 0 for a in row))


def determinant(m):
    """Return the exact determinant of a square matrix via elimination."""
    if not m.is_square():
        raise ShapeError("determinant requires a square matrix")
    rows, swaps = row_echelon(m)
    result = Fraction(1)
    for i in range(m.n_rows):
        result *= rows[i][i]
    if swaps % 2 == 1:
        result = -result
    return _simplify(result)


def determinant_cofactor(m):
    """Return the determinant by cofactor expansion along the first row."""
    if not m.is_square():
        raise ShapeError("determinant requires a square matrix")
    n = m.n_rows
    if n == 1:
        return m[0, 0]
    if n == 2:
        return m[0, 0] * m[1, 1] - m[0, 1] * m[1, 0]
    total = 0
    for j in range(n):
        entry = m[0, j]
        if entry == 0:
            continue
        sign = 1 if j % 2 == 0 else -1
        total += sign * entry * determinant_cofactor(m.minor_matrix(0, j))
    return total


def cofactor(m, i, j):
    """Return the ``(i, j)`` cofactor of a square matrix."""
    sign = -1 if (i + j) % 2 else 1
    return sign * determinant(m.minor_matrix(i, j))


def is_invertible(m):
    """Return True if ``m`` is square with a nonzero determinant."""
    return m.is_square() and determinant(m) != 0


def inverse(m):
    """Return the exact inverse using Gauss-Jordan elimination."""
    if not m.is_square():
        raise ShapeError("only square matrices can be inverted")
    n = m.n_rows
    aug = _fraction_rows(m.hstack(Matrix.identity(n)))
    for col in range(n):
        p = _find_pivot(aug, col, col)
        if p is None:
            raise SingularMatrixError("matrix is singular")
        aug[col], aug[p] = aug[p], aug[col]
        pivot = aug[col][col]
        aug[col] = [a / pivot for a in aug[col]]
        for r in range(n):
            if r != col and aug[r][col] != 0:
                factor = aug[r][col]
                aug[r] = [a - factor * b for a, b in zip(aug[r], aug[col])]
    return Matrix([row[n:] for row in aug]).map(_simplify)


def solve(m, b):
    """Solve ``m x = b`` for a square invertible ``m``; return ``x`` as a list."""
    if len(b) != m.n_rows:
        raise ShapeError("right-hand side has wrong length")
    return inverse(m).apply(list(b))


def adjugate(m):
    """Return the adjugate (transpose of the cofactor matrix)."""
    n = m.n_rows
    if not m.is_square() or n < 2:
        raise ShapeError("adjugate requires a square matrix of size at least 2")
    return Matrix([[cofactor(m, i, j) for j in range(n)] for i in range(n)]).transpose()


def nullity(m):
    """Return the dimension of the null space (columns minus rank)."""
    return m.n_cols - rank(m)
