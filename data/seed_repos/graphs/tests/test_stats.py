from fractions import Fraction

from graphs import (
    DiGraph,
    Graph,
    average_degree,
    degree_histogram,
    degree_sequence,
    density,
    is_complete,
    is_regular,
    isolated_vertices,
    leaves,
    max_degree,
    min_degree,
)


def star():
    g = Graph([(0, 1), (0, 2), (0, 3)])
    g.add_vertex(4)
    return g


def test_degree_sequence_sorted_descending():
    assert degree_sequence(star()) == [3, 1, 1, 1, 0]


def test_max_min_degree():
    assert max_degree(star()) == 3
    assert min_degree(star()) == 0
    assert max_degree(Graph()) == 0
    assert min_degree(Graph()) == 0


def test_average_degree_exact():
    assert average_degree(star()) == Fraction(6, 5)
    assert average_degree(Graph()) == 0


def test_degree_histogram():
    assert degree_histogram(star()) == [1, 3, 0, 1]
    assert degree_histogram(Graph()) == []


def test_isolated_and_leaves():
    assert isolated_vertices(star()) == [4]
    assert leaves(star()) == [1, 2, 3]


def test_density_undirected_and_small():
    assert density(star()) == Fraction(3, 10)
    assert density(Graph([(1, 2)])) == 1
    g = Graph()
    g.add_vertex(1)
    assert density(g) == 0


def test_density_directed():
    g = DiGraph([(1, 2), (2, 3), (3, 1)])
    assert density(g) == Fraction(1, 2)


def test_is_regular():
    assert is_regular(Graph())
    assert is_regular(Graph([(1, 2), (2, 3), (3, 1)]))
    assert not is_regular(star())


def test_is_complete():
    k3 = Graph([(1, 2), (2, 3), (1, 3)])
    assert is_complete(k3)
    assert not is_complete(Graph([(1, 2), (2, 3)]))
    assert not is_complete(DiGraph([(1, 2), (2, 3), (1, 3)]))
    assert is_complete(DiGraph([(1, 2), (2, 1)]))


def test_is_complete_detects_missing_non_adjacent_pair():
    assert not is_complete(Graph([(1, 3), (2, 3)]))
    assert not is_complete(Graph([(1, 2), (1, 3)]))


def test_is_regular_with_single_outlier_last():
    g = Graph([(1, 2)])
    g.add_vertex(3)
    assert not is_regular(g)
    assert not is_regular(Graph([(1, 2), (2, 3)]))


def test_is_complete_returns_false_for_one_way_edges():
    assert is_complete(DiGraph([(2, 1)])) is False
    assert is_complete(DiGraph([(1, 2)])) is False
    assert is_complete(Graph([(1, 2), (3, 4)])) is False
