"""Degree statistics and simple structural measures."""

from fractions import Fraction


def degree_sequence(graph):
    """Return the vertex degrees sorted in non-increasing order."""
    return sorted((graph.degree(v) for v in graph.vertices()), reverse=True)


def max_degree(graph):
    """Return the largest degree, or 0 for an empty graph."""
    seq = degree_sequence(graph)
    return seq[0] if seq else 0


def min_degree(graph):
    """Return the smallest degree, or 0 for an empty graph."""
    seq = degree_sequence(graph)
    return seq[-1] if seq else 0


def average_degree(graph):
    """Return the mean degree as an exact ``Fraction``."""
    n = graph.vertex_count()
    if n == 0:
        return Fraction(0)
    return Fraction(sum(degree_sequence(graph)), n)


def degree_histogram(graph):
    """Return a list where index ``k`` holds the number of vertices of degree ``k``."""
    seq = degree_sequence(graph)
    if not seq:
        return []
    hist = [0] * (seq[0] + 1)
    for d in seq:
        hist[d] += 1
    return hist


def isolated_vertices(graph):
    """Return vertices with degree zero."""
    return [v for v in graph.vertices() if graph.degree(v) == 0]


def leaves(graph):
    """Return vertices with degree exactly one."""
    return [v for v in graph.vertices() if graph.degree(v) == 1]


def density(graph):
    """Return edge density as a ``Fraction`` in ``[0, 1]``.

    Self-loops are not counted as possible edges.
    """
    n = graph.vertex_count()
    if n < 2:
        return Fraction(0)
    possible = n * (n - 1)
    if not graph.directed:
        possible //= 2
    return Fraction(graph.edge_count(), possible)


def is_regular(graph):
    """Return True if every vertex has the same degree."""
    seq = degree_sequence(graph)
    return len(seq) == 0 or seq[0] == seq[-1]


def is_complete(graph):
    """Return True if every pair of distinct vertices is adjacent."""
    vs = graph.vertices()
    for i, u in enumerate(vs):
        for v in vs[i + 1:]:
            if not graph.has_edge(u, v):
                return False
            if graph.directed and not graph.has_edge(v, u):
                return False
    return True
