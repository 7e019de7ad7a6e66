"""A small immutable dense matrix type backed by lists of lists."""

from .errors import ShapeError


class Matrix:
    """A rectangular matrix with at least one row and one column."""

    __slots__ = ("_rows",)

    def __init__(self, rows):
        """Create a matrix from a sequence of equal-length row sequences."""
        rows = [list(row) for row in rows]
        if not rows or not rows[0]:
            raise ShapeError("matrix must have at least one row and one column")
        width = len(rows[0])
        for i, row in enumerate(rows):
            if len(row) != width:
                raise ShapeError("row %d has length %d, expected %d" % (i, len(row), width))
        self._rows = rows

    @classmethod
    def zeros(cls, n_rows, n_cols):
        """Return an ``n_rows`` x ``n_cols`` matrix of zeros."""
        if n_rows < 1 or n_cols < 1:
            raise ShapeError("dimensions must be positive")
        return cls([[0] * n_cols for _ in range(n_rows)])

    @classmethod
    def identity(cls, n):
        """Return the ``n`` x ``n`` identity matrix."""
        if n < 1:
            raise ShapeError("dimension must be positive")
        return cls([[1 if i == j else 0 for j in range(n)] for i in range(n)])

    @classmethod
    def from_columns(cls, columns):
        """Build a matrix whose columns are the given sequences."""
        columns = [list(c) for c in columns]
        if not columns:
            raise ShapeError("need at least one column")
        return cls(columns).transpose()

    @classmethod
    def diagonal(cls, values):
        """Return a square matrix with ``values`` on the main diagonal."""
        values = list(values)
        if not values:
            raise ShapeError("need at least one diagonal value")
        rows = [[0] * len(values) for _ in values]
        for i, v in enumerate(values):
            rows[i][i] = v
        return cls(rows)

    @property
    def shape(self):
        """Return ``(rows, cols)``."""
        return len(self._rows), len(self._rows[0])

    @property
    def n_rows(self):
        """Number of rows."""
        return len(self._rows)

    @property
    def n_cols(self):
        """Number of columns."""
        return len(self._rows[0])

    def is_square(self):
        """Return True if the matrix has as many rows as columns."""
        return self.n_rows == self.n_cols

    def __getitem__(self, index):
        i, j = index
        return self._rows[i][j]

    def row(self, i):
        """Return a copy of row ``i``."""
        return list(self._rows[i])

    def col(self, j):
        """Return a copy of column ``j``."""
        if j < -self.n_cols or j >= self.n_cols:
            raise IndexError("column index out of range")
        return [row[j] for row in self._rows]

    def to_list(self):
        """Return a deep copy of the rows."""
        return [list(row) for row in self._rows]

    def _check_same_shape(self, other):
        """Raise ``ShapeError`` unless ``other`` has the same shape."""
        if self.shape != other.shape:
            raise ShapeError("shape mismatch: %r vs %r" % (self.shape, other.shape))

    def __eq__(self, other):
        if not isinstance(other, Matrix):
            return NotImplemented
        return self._rows == other._rows

    def __hash__(self):
        return hash(tuple(tuple(row) for row in self._rows))

    def __add__(self, other):
        self._check_same_shape(other)
        return Matrix([[a + b for a, b in zip(r1, r2)] for r1, r2 in zip(self._rows, other._rows)])

    def __sub__(self, other):
        self._check_same_shape(other)
        return Matrix([[a - b for a, b in zip(r1, r2)] for r1, r2 in zip(self._rows, other._rows)])

    def scale(self, k):
        """Return the matrix with every entry multiplied by ``k``."""
        return Matrix([[k * a for a in row] for row in self._rows])

    def __mul__(self, k):
        if isinstance(k, Matrix):
            raise TypeError("use @ for matrix multiplication")
        return self.scale(k)

    __rmul__ = __mul__

    def __neg__(self):
        return self.scale(-1)

    def matmul(self, other):
        """Return the matrix product ``self @ other``."""
        if self.n_cols != other.n_rows:
            raise ShapeError("cannot multiply %r by %r" % (self.shape, other.shape))
        cols = other.transpose()._rows
        return Matrix([[sum(a * b for a, b in zip(row, col)) for col in cols] for row in self._rows])

    __matmul__ = matmul

    def apply(self, vector):
        """Multiply the matrix by a column vector given as a list."""
        if len(vector) != self.n_cols:
            raise ShapeError("vector length %d does not match %d columns" % (len(vector), self.n_cols))
        return [sum(a * b for a, b in zip(row, vector)) for row in self._rows]

    def transpose(self):
        """Return the transpose."""
        return Matrix([list(col) for col in zip(*self._rows)])

    def power(self, n):
        """Return the matrix raised to a non-negative integer power."""
        if not self.is_square():
            raise ShapeError("only square matrices have powers")
        if n < 0:
            raise ValueError("exponent must be non-negative")
        result = Matrix.identity(self.n_rows)
        base = self
        while n > 0:
            if n % 2 == 1:
                result = result @ base
            base = base @ base
            n //= 2
        return result

    def trace(self):
        """Return the sum of the diagonal entries of a square matrix."""
        if not self.is_square():
            raise ShapeError("trace requires a square matrix")
        return sum(self._rows[i][i] for i in range(self.n_rows))

    def diagonal_entries(self):
        """Return the main diagonal (length ``min(rows, cols)``)."""
        return [self._rows[i][i] for i in range(min(self.shape))]

    def submatrix(self, row_start, row_stop, col_start, col_stop):
        """Return rows ``row_start:row_stop`` and columns ``col_start:col_stop``.

        Bounds follow slice semantics (stop is exclusive) but must select a
        non-empty block within the matrix.
        """
        if not (0 <= row_start < row_stop <= self.n_rows):
            raise ShapeError("invalid row range %d:%d" % (row_start, row_stop))
        if not (0 <= col_start < col_stop <= self.n_cols):
            raise ShapeError("invalid column range %d:%d" % (col_start, col_stop))
        return Matrix([row[col_start:col_stop] for row in self._rows[row_start:row_stop]])

    def minor_matrix(self, i, j):
        """Return the matrix with row ``i`` and column ``j`` removed."""
        if self.n_rows < 2 or self.n_cols < 2:
            raise ShapeError("matrix too small to remove a row and column")
        return Matrix([row[:j] + row[j + 1:] for k, row in enumerate(self._rows) if k != i])

    def hstack(self, other):
        """Return ``[self | other]``; row counts must match."""
        if self.n_rows != other.n_rows:
            raise ShapeError("row counts differ")
        return Matrix([a + b for a, b in zip(self._rows, other._rows)])

    def vstack(self, other):
        """Return ``self`` stacked above ``other``; column counts must match."""
        if self.n_cols != other.n_cols:
            raise ShapeError("column counts differ")
        return Matrix(self._rows + other._rows)

    def is_symmetric(self):
        """Return True if the matrix equals its transpose."""
        return self.is_square() and self == self.transpose()

    def is_upper_triangular(self):
        """Return True if every entry below the diagonal is zero."""
        for i in range(1, self.n_rows):
            for j in range(min(i, self.n_cols)):
                if self._rows[i][j] != 0:
                    return False
        return True

    def map(self, func):
        """Return a new matrix with ``func`` applied to every entry."""
        return Matrix([[func(a) for a in row] for row in self._rows])

    def __repr__(self):
        return "Matrix(%r)" % (self._rows,)
