from fractions import Fraction

import pytest

from matrices import (
    Matrix,
    ShapeError,
    SingularMatrixError,
    adjugate,
    cofactor,
    determinant,
    determinant_cofactor,
    inverse,
    is_invertible,
    nullity,
    rank,
    reduced_row_echelon,
    row_echelon,
    solve,
)

M3 = Matrix([[2, -3, 1], [2, 0, -1], [1, 4, 5]])


def test_determinant_small_cases():
    assert determinant(Matrix([[7]])) == 7
    assert determinant(Matrix([[1, 2], [3, 4]])) == -2
    assert determinant(M3) == 49
    assert determinant(Matrix.identity(4)) == 1


def test_determinant_requires_row_swap():
    m = Matrix([[0, 1], [1, 0]])
    assert determinant(m) == -1
    m3 = Matrix([[0, 0, 1], [0, 1, 0], [1, 0, 0]])
    assert determinant(m3) == -1
    cyc = Matrix([[0, 1, 0], [0, 0, 1], [1, 0, 0]])
    assert determinant(cyc) == 1


def test_determinant_singular_and_fractional():
    assert determinant(Matrix([[1, 2], [2, 4]])) == 0
    assert determinant(Matrix([[Fraction(1, 2), 1], [1, 4]])) == 1
    assert determinant(Matrix([[1, 2], [3, Fraction(1, 3)]])) == Fraction(-17, 3)


def test_determinant_returns_int_when_integral():
    assert isinstance(determinant(M3), int)


def test_determinant_non_square():
    with pytest.raises(ShapeError):
        determinant(Matrix([[1, 2]]))
    with pytest.raises(ShapeError):
        determinant_cofactor(Matrix([[1, 2]]))


def test_determinant_cofactor_matches_elimination():
    m4 = Matrix([[1, 0, 2, -1], [3, 0, 0, 5], [2, 1, 4, -3], [1, 0, 5, 0]])
    assert determinant_cofactor(m4) == 30
    assert determinant(m4) == 30
    assert determinant_cofactor(M3) == 49
    assert determinant_cofactor(Matrix([[1, 2], [3, 4]])) == -2
    assert determinant_cofactor(Matrix([[-3]])) == -3


def test_cofactor_signs():
    m = Matrix([[1, 2, 3], [0, 4, 5], [1, 0, 6]])
    assert cofactor(m, 0, 0) == 24
    assert cofactor(m, 0, 1) == 5
    assert cofactor(m, 1, 0) == -12
    assert cofactor(m, 2, 2) == 4


def test_row_echelon_and_swaps():
    rows, swaps = row_echelon(Matrix([[0, 2], [3, 4]]))
    assert rows == [[3, 4], [0, 2]]
    assert swaps == 1
    rows, swaps = row_echelon(Matrix([[1, 2], [3, 4]]))
    assert rows == [[1, 2], [0, -2]]
    assert swaps == 0


def test_row_echelon_skips_zero_columns():
    rows, swaps = row_echelon(Matrix([[0, 1, 2], [0, 2, 5], [0, 0, 0]]))
    assert rows == [[0, 1, 2], [0, 0, 1], [0, 0, 0]]
    assert swaps == 0


def test_row_echelon_wide_matrix_stops_at_last_row():
    rows, _ = row_echelon(Matrix([[1, 2, 3, 4], [2, 4, 7, 9]]))
    assert rows == [[1, 2, 3, 4], [0, 0, 1, 1]]


def test_reduced_row_echelon():
    m = Matrix([[1, 2, -1, -4], [2, 3, -1, -11], [-2, 0, -3, 22]])
    assert reduced_row_echelon(m) == Matrix([[1, 0, 0, -8], [0, 1, 0, 1], [0, 0, 1, -2]])


def test_reduced_row_echelon_with_fractions_and_zero_rows():
    m = Matrix([[2, 4], [1, 2], [0, 3]])
    assert reduced_row_echelon(m) == Matrix([[1, 0], [0, 1], [0, 0]])
    assert reduced_row_echelon(Matrix([[2, 1]])) == Matrix([[1, Fraction(1, 2)]])


def test_rank_and_nullity():
    assert rank(Matrix([[1, 2], [2, 4]])) == 1
    assert rank(M3) == 3
    assert rank(Matrix([[0, 0], [0, 0]])) == 0
    assert rank(Matrix([[1, 2, 3], [4, 5, 6], [7, 8, 9]])) == 2
    assert nullity(Matrix([[1, 2, 3], [2, 4, 6]])) == 2
    assert nullity(Matrix.identity(3)) == 0


def test_inverse_integer_matrix():
    m = Matrix([[2, 1], [7, 4]])
    assert inverse(m) == Matrix([[4, -1], [-7, 2]])
    assert m @ inverse(m) == Matrix.identity(2)


def test_inverse_fractions_and_pivoting():
    m = Matrix([[0, 2], [4, 0]])
    assert inverse(m) == Matrix([[0, Fraction(1, 4)], [Fraction(1, 2), 0]])
    assert inverse(M3) @ M3 == Matrix.identity(3)


def test_inverse_errors():
    with pytest.raises(SingularMatrixError):
        inverse(Matrix([[1, 2], [2, 4]]))
    with pytest.raises(ShapeError):
        inverse(Matrix([[1, 2, 3], [4, 5, 6]]))


def test_is_invertible():
    assert is_invertible(M3)
    assert not is_invertible(Matrix([[1, 2], [2, 4]]))
    assert not is_invertible(Matrix([[1, 2]]))


def test_solve():
    m = Matrix([[2, 1, -1], [-3, -1, 2], [-2, 1, 2]])
    assert solve(m, [8, -11, -3]) == [2, 3, -1]
    assert solve(Matrix([[2, 0], [0, 4]]), [1, 1]) == [Fraction(1, 2), Fraction(1, 4)]
    with pytest.raises(ShapeError):
        solve(m, [1, 2])


def test_adjugate():
    m = Matrix([[1, 2], [3, 4]])
    assert adjugate(m) == Matrix([[4, -2], [-3, 1]])
    assert adjugate(M3) == inverse(M3).scale(determinant(M3)).map(int)
    with pytest.raises(ShapeError):
        adjugate(Matrix([[5]]))
    with pytest.raises(ShapeError):
        adjugate(Matrix([[1, 2]]))


def test_determinant_with_three_row_swaps():
    cycle4 = Matrix([[0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [1, 0, 0, 0]])
    assert row_echelon(cycle4)[1] == 3
    assert determinant(cycle4) == -1
    assert determinant_cofactor(cycle4) == -1


def test_adjugate_rejects_non_square_with_message():
    with pytest.raises(ShapeError, match="adjugate"):
        adjugate(Matrix([[1, 2, 3], [4, 5, 6]]))
    with pytest.raises(ShapeError, match="adjugate"):
        adjugate(Matrix([[7]]))
