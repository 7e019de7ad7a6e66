import pytest

from graphs import DiGraph, Graph, GraphError


def test_add_edge_is_symmetric_in_undirected_graph():
    g = Graph()
    g.add_edge("a", "b", 3)
    assert g.has_edge("a", "b")
    assert g.has_edge("b", "a")
    assert g.weight("b", "a") == 3


def test_add_edge_is_one_way_in_digraph():
    g = DiGraph()
    g.add_edge("a", "b", 2)
    assert g.has_edge("a", "b")
    assert not g.has_edge("b", "a")


def test_constructor_accepts_two_and_three_tuples():
    g = Graph([(1, 2), (2, 3, 5)])
    assert g.weight(1, 2) == 1
    assert g.weight(2, 3) == 5
    assert g.vertex_count() == 3


def test_constructor_rejects_bad_edge_tuple():
    with pytest.raises(GraphError):
        Graph([(1,)])
    with pytest.raises(GraphError):
        Graph([(1, 2, 3, 4)])


def test_negative_weight_rejected_but_zero_allowed():
    g = Graph()
    with pytest.raises(GraphError):
        g.add_edge(1, 2, -1)
    assert not g.has_vertex(1)
    g.add_edge(1, 2, 0)
    assert g.weight(1, 2) == 0


def test_add_vertex_is_idempotent_and_keeps_edges():
    g = Graph([(1, 2)])
    g.add_vertex(1)
    assert g.has_edge(1, 2)
    assert g.vertex_count() == 2


def test_remove_edge_undirected_removes_both_directions():
    g = Graph([(1, 2), (2, 3)])
    g.remove_edge(2, 1)
    assert not g.has_edge(1, 2)
    assert not g.has_edge(2, 1)
    assert g.has_edge(2, 3)
    assert g.edge_count() == 1


def test_remove_self_loop():
    g = Graph([(1, 1), (1, 2)])
    g.remove_edge(1, 1)
    assert not g.has_edge(1, 1)
    assert g.edge_count() == 1


def test_remove_edge_digraph_keeps_reverse_edge():
    g = DiGraph([(1, 2), (2, 1)])
    g.remove_edge(1, 2)
    assert not g.has_edge(1, 2)
    assert g.has_edge(2, 1)


def test_remove_missing_edge_raises():
    g = Graph([(1, 2)])
    with pytest.raises(GraphError):
        g.remove_edge(1, 3)


def test_remove_vertex_drops_incident_edges():
    g = Graph([(1, 2), (2, 3), (1, 3)])
    g.remove_vertex(2)
    assert g.vertices() == [1, 3]
    assert g.edges() == [(1, 3, 1)]
    with pytest.raises(GraphError):
        g.remove_vertex(2)


def test_weight_of_missing_edge_raises():
    g = Graph([(1, 2)])
    with pytest.raises(GraphError):
        g.weight(2, 5)
    with pytest.raises(GraphError):
        g.weight(9, 1)


def test_has_edge_with_unknown_vertex_is_false():
    g = Graph([(1, 2)])
    assert not g.has_edge(7, 1)
    assert not g.has_edge(1, 7)


def test_neighbors_sorted_and_missing_vertex_raises():
    g = Graph([(5, 3), (5, 1), (5, 4)])
    assert g.neighbors(5) == [1, 3, 4]
    with pytest.raises(GraphError):
        g.neighbors(0)


def test_vertices_sorted_with_mixed_types():
    g = Graph()
    for v in ["b", 2, "a", 1]:
        g.add_vertex(v)
    assert g.vertices() == [1, 2, "a", "b"]


def test_edges_reported_once_for_undirected():
    g = Graph([(2, 1, 4), (3, 2, 5)])
    assert g.edges() == [(1, 2, 4), (2, 3, 5)]


def test_edges_reports_both_directions_for_digraph():
    g = DiGraph([(2, 1, 4), (1, 2, 6)])
    assert g.edges() == [(1, 2, 6), (2, 1, 4)]


def test_edge_count_with_self_loop_undirected():
    g = Graph([(1, 1), (1, 2), (2, 3)])
    assert g.edge_count() == 3


def test_edge_count_digraph():
    g = DiGraph([(1, 2), (2, 1), (2, 2)])
    assert g.edge_count() == 3


def test_degree_counts_self_loop_twice():
    g = Graph([(1, 1), (1, 2)])
    assert g.degree(1) == 3
    assert g.degree(2) == 1
    with pytest.raises(GraphError):
        g.degree(3)


def test_digraph_in_out_degree():
    g = DiGraph([(1, 2), (1, 3), (3, 2)])
    assert g.out_degree(1) == 2
    assert g.in_degree(1) == 0
    assert g.in_degree(2) == 2
    assert g.out_degree(2) == 0
    assert g.degree(3) == 2


def test_digraph_degree_missing_vertex_raises():
    g = DiGraph([(1, 2)])
    with pytest.raises(GraphError):
        g.in_degree(9)
    with pytest.raises(GraphError):
        g.out_degree(9)
    with pytest.raises(GraphError):
        g.predecessors(9)


def test_predecessors():
    g = DiGraph([(3, 1), (2, 1), (1, 4)])
    assert g.predecessors(1) == [2, 3]
    assert g.predecessors(3) == []


def test_reversed_digraph():
    g = DiGraph([(1, 2, 7), (2, 3, 8)])
    g.add_vertex(9)
    r = g.reversed()
    assert r.edges() == [(2, 1, 7), (3, 2, 8)]
    assert r.vertices() == [1, 2, 3, 9]
    assert g.has_edge(1, 2)


def test_total_weight():
    g = Graph([(1, 2, 3), (2, 3, 4), (3, 3, 10)])
    assert g.total_weight() == 17


def test_copy_is_independent():
    g = DiGraph([(1, 2, 3)])
    c = g.copy()
    c.add_edge(2, 3)
    c.remove_edge(1, 2)
    assert isinstance(c, DiGraph)
    assert g.has_edge(1, 2)
    assert not g.has_vertex(3)


def test_contains_len_and_repr():
    g = Graph([(1, 2), (2, 3)])
    assert 2 in g
    assert 4 not in g
    assert len(g) == 3
    assert repr(g) == "Graph(vertices=3, edges=2)"
    assert repr(DiGraph([(1, 2)])) == "DiGraph(vertices=2, edges=1)"


def test_edge_count_with_multiple_self_loops():
    g = Graph([(1, 1), (2, 2), (1, 2)])
    assert g.edge_count() == 3
    assert g.degree(1) == 3
