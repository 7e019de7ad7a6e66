import pytest

from matrices import Matrix, ShapeError

A = Matrix([[1, 2, 3], [4, 5, 6]])
B = Matrix([[7, 8], [9, 10], [11, 12]])


def test_constructor_validates_shape():
    with pytest.raises(ShapeError):
        Matrix([])
    with pytest.raises(ShapeError):
        Matrix([[]])
    with pytest.raises(ShapeError) as info:
        Matrix([[1, 2], [3]])
    assert "row 1" in str(info.value)


def test_constructor_copies_input():
    rows = [[1, 2], [3, 4]]
    m = Matrix(rows)
    rows[0][0] = 99
    assert m[0, 0] == 1


def test_shape_properties():
    assert A.shape == (2, 3)
    assert A.n_rows == 2
    assert A.n_cols == 3
    assert not A.is_square()
    assert Matrix([[1]]).is_square()


def test_zeros_and_identity():
    assert Matrix.zeros(2, 3) == Matrix([[0, 0, 0], [0, 0, 0]])
    assert Matrix.identity(3) == Matrix([[1, 0, 0], [0, 1, 0], [0, 0, 1]])
    assert Matrix.identity(1) == Matrix([[1]])
    for args in ((0, 1), (1, 0)):
        with pytest.raises(ShapeError):
            Matrix.zeros(*args)
    with pytest.raises(ShapeError):
        Matrix.identity(0)


def test_from_columns_and_diagonal():
    assert Matrix.from_columns([[1, 2], [3, 4], [5, 6]]) == Matrix([[1, 3, 5], [2, 4, 6]])
    with pytest.raises(ShapeError):
        Matrix.from_columns([])
    assert Matrix.diagonal([2, 3]) == Matrix([[2, 0], [0, 3]])
    with pytest.raises(ShapeError):
        Matrix.diagonal([])


def test_indexing_rows_and_columns():
    assert A[1, 2] == 6
    assert A[0, 0] == 1
    assert A.row(1) == [4, 5, 6]
    assert A.col(1) == [2, 5]
    assert A.col(-1) == [3, 6]
    with pytest.raises(IndexError):
        A.col(3)
    with pytest.raises(IndexError):
        A.col(-4)


def test_row_and_to_list_are_copies():
    m = Matrix([[1, 2]])
    m.row(0)[0] = 9
    m.to_list()[0][1] = 9
    assert m == Matrix([[1, 2]])


def test_add_and_sub():
    other = Matrix([[6, 5, 4], [3, 2, 1]])
    assert A + other == Matrix([[7, 7, 7], [7, 7, 7]])
    assert A - other == Matrix([[-5, -3, -1], [1, 3, 5]])
    with pytest.raises(ShapeError):
        A + B
    with pytest.raises(ShapeError):
        A - B


def test_scale_and_negate():
    assert A * 2 == Matrix([[2, 4, 6], [8, 10, 12]])
    assert 3 * A == A.scale(3)
    assert -A == Matrix([[-1, -2, -3], [-4, -5, -6]])
    with pytest.raises(TypeError):
        A * B


def test_matmul():
    assert A @ B == Matrix([[58, 64], [139, 154]])
    assert B @ A == Matrix([[39, 54, 69], [49, 68, 87], [59, 82, 105]])
    with pytest.raises(ShapeError):
        A @ A


def test_matmul_identity():
    assert Matrix.identity(2) @ A == A
    assert A @ Matrix.identity(3) == A


def test_apply_vector():
    assert A.apply([1, 0, -1]) == [-2, -2]
    with pytest.raises(ShapeError):
        A.apply([1, 2])


def test_transpose():
    assert A.transpose() == Matrix([[1, 4], [2, 5], [3, 6]])
    assert A.transpose().transpose() == A


def test_power():
    fib = Matrix([[1, 1], [1, 0]])
    assert fib.power(0) == Matrix.identity(2)
    assert fib.power(1) == fib
    assert fib.power(2) == Matrix([[2, 1], [1, 1]])
    assert fib.power(10) == Matrix([[89, 55], [55, 34]])
    assert fib.power(7) == Matrix([[21, 13], [13, 8]])
    with pytest.raises(ValueError):
        fib.power(-1)
    with pytest.raises(ShapeError):
        A.power(2)


def test_trace_and_diagonal_entries():
    assert Matrix([[1, 2], [3, 4]]).trace() == 5
    with pytest.raises(ShapeError):
        A.trace()
    assert A.diagonal_entries() == [1, 5]
    assert B.diagonal_entries() == [7, 10]


def test_submatrix():
    m = Matrix([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    assert m.submatrix(0, 2, 1, 3) == Matrix([[2, 3], [5, 6]])
    assert m.submatrix(2, 3, 0, 1) == Matrix([[7]])
    assert m.submatrix(0, 3, 0, 3) == m


@pytest.mark.parametrize("bounds", [(-1, 1, 0, 1), (1, 1, 0, 1), (0, 4, 0, 1), (0, 1, 2, 2), (0, 1, 0, 4), (0, 1, -1, 1)])
def test_submatrix_invalid_ranges(bounds):
    m = Matrix([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    with pytest.raises(ShapeError, match="invalid"):
        m.submatrix(*bounds)


def test_minor_matrix():
    m = Matrix([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    assert m.minor_matrix(0, 0) == Matrix([[5, 6], [8, 9]])
    assert m.minor_matrix(1, 2) == Matrix([[1, 2], [7, 8]])
    assert m.minor_matrix(2, 1) == Matrix([[1, 3], [4, 6]])
    with pytest.raises(ShapeError):
        Matrix([[1, 2]]).minor_matrix(0, 0)
    with pytest.raises(ShapeError):
        Matrix([[1], [2]]).minor_matrix(0, 0)


def test_hstack_and_vstack():
    left = Matrix([[1], [2]])
    right = Matrix([[3, 4], [5, 6]])
    assert left.hstack(right) == Matrix([[1, 3, 4], [2, 5, 6]])
    assert right.vstack(Matrix([[7, 8]])) == Matrix([[3, 4], [5, 6], [7, 8]])
    with pytest.raises(ShapeError):
        left.hstack(Matrix([[1]]))
    with pytest.raises(ShapeError):
        left.vstack(right)


def test_is_symmetric():
    assert Matrix([[1, 2], [2, 1]]).is_symmetric()
    assert not Matrix([[1, 2], [3, 1]]).is_symmetric()
    assert not A.is_symmetric()


def test_is_upper_triangular():
    assert Matrix([[1, 2], [0, 3]]).is_upper_triangular()
    assert not Matrix([[1, 2], [4, 3]]).is_upper_triangular()
    assert not Matrix([[1, 2, 3], [0, 4, 5], [0, 6, 7]]).is_upper_triangular()
    assert Matrix([[1, 2, 3], [0, 4, 5]]).is_upper_triangular()
    assert not Matrix([[1], [0], [2]]).is_upper_triangular()
    assert Matrix([[5]]).is_upper_triangular()


def test_map_equality_hash_repr():
    assert A.map(lambda x: x % 2) == Matrix([[1, 0, 1], [0, 1, 0]])
    assert Matrix([[1, 2]]) != Matrix([[1], [2]])
    assert Matrix([[1]]) != [[1]]
    assert hash(Matrix([[1, 2]])) == hash(Matrix([[1, 2]]))
    assert repr(Matrix([[1, 2]])) == "Matrix([[1, 2]])"


def test_zeros_single_row_or_column_and_messages():
    assert Matrix.zeros(1, 1) == Matrix([[0]])
    assert Matrix.zeros(1, 2).shape == (1, 2)
    assert Matrix.zeros(3, 1).shape == (3, 1)
    with pytest.raises(ShapeError, match="positive"):
        Matrix.zeros(0, 1)
    with pytest.raises(ShapeError, match="positive"):
        Matrix.zeros(2, 0)


def test_col_negative_bound_and_message():
    assert A.col(-3) == [1, 4]
    with pytest.raises(IndexError, match="column index out of range"):
        A.col(3)
    with pytest.raises(IndexError, match="column index out of range"):
        A.col(-4)


def test_minor_matrix_too_small_message():
    with pytest.raises(ShapeError, match="too small"):
        Matrix([[1, 2]]).minor_matrix(0, 0)
    with pytest.raises(ShapeError, match="too small"):
        Matrix([[1], [2]]).minor_matrix(0, 0)


def test_constructors_accept_iterators():
    assert Matrix.from_columns(iter([(1, 2), (3, 4)])) == Matrix([[1, 3], [2, 4]])
    assert Matrix.diagonal(x for x in [4, 5]) == Matrix([[4, 0], [0, 5]])
    with pytest.raises(ShapeError, match="at least one column"):
        Matrix.from_columns(iter([]))
    with pytest.raises(ShapeError, match="diagonal"):
        Matrix.diagonal(iter([]))


def test_comparisons_return_real_booleans():
    assert (Matrix([[1]]) == [[1]]) is False
    assert Matrix([[1, 2], [4, 3]]).is_upper_triangular() is False
    assert Matrix([[1, 2], [0, 3]]).is_upper_triangular() is True
