"""Exception types for the matrices package."""


class ShapeError(ValueError):
    """Raised when matrix or vector dimensions are incompatible."""


class SingularMatrixError(ValueError):
    """Raised when an operation needs an invertible matrix."""
