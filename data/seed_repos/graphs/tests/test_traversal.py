import pytest

from graphs import (
    DiGraph,
    Graph,
    GraphError,
    bfs_levels,
    bfs_order,
    component_count,
    connected_components,
    dfs_order,
    has_path,
    is_bipartite,
    is_connected,
    two_coloring,
    vertices_within,
)


def tree():
    return Graph([(1, 2), (1, 3), (2, 4), (2, 5), (3, 6)])


def test_bfs_order_visits_level_by_level():
    assert bfs_order(tree(), 1) == [1, 2, 3, 4, 5, 6]


def test_bfs_order_from_leaf():
    assert bfs_order(tree(), 6) == [6, 3, 1, 2, 4, 5]


def test_dfs_order_preorder():
    assert dfs_order(tree(), 1) == [1, 2, 4, 5, 3, 6]


def test_dfs_order_with_cycle_visits_each_once():
    g = Graph([(1, 2), (2, 3), (3, 1), (3, 4)])
    assert dfs_order(g, 1) == [1, 2, 3, 4]


def test_dfs_order_directed_respects_direction():
    g = DiGraph([(1, 2), (3, 1), (2, 4)])
    assert dfs_order(g, 1) == [1, 2, 4]
    assert dfs_order(g, 4) == [4]


def test_traversal_unknown_start_raises():
    g = tree()
    with pytest.raises(GraphError):
        bfs_order(g, 99)
    with pytest.raises(GraphError):
        dfs_order(g, 99)
    with pytest.raises(GraphError):
        bfs_levels(g, 99)


def test_bfs_levels():
    assert bfs_levels(tree(), 1) == {1: 0, 2: 1, 3: 1, 4: 2, 5: 2, 6: 2}
    assert bfs_levels(tree(), 4) == {4: 0, 2: 1, 1: 2, 5: 2, 3: 3, 6: 4}


def test_vertices_within_boundaries():
    g = tree()
    assert vertices_within(g, 4, 0) == [4]
    assert vertices_within(g, 4, 1) == [2, 4]
    assert vertices_within(g, 4, 2) == [1, 2, 4, 5]
    with pytest.raises(ValueError):
        vertices_within(g, 4, -1)


def test_has_path():
    g = DiGraph([(1, 2), (2, 3)])
    g.add_vertex(4)
    assert has_path(g, 1, 3)
    assert not has_path(g, 3, 1)
    assert has_path(g, 4, 4)
    assert not has_path(g, 1, 4)


def test_has_path_missing_vertices_is_false():
    g = Graph([(1, 2)])
    assert not has_path(g, 1, 9)
    assert not has_path(g, 9, 1)
    assert not has_path(g, 9, 9)


def test_connected_components():
    g = Graph([(5, 6), (1, 2), (3, 2)])
    g.add_vertex(4)
    assert connected_components(g) == [[1, 2, 3], [4], [5, 6]]
    assert component_count(g) == 3


def test_connected_components_rejects_digraph():
    with pytest.raises(GraphError):
        connected_components(DiGraph([(1, 2)]))


def test_is_connected():
    assert is_connected(Graph())
    assert is_connected(tree())
    g = tree()
    g.add_vertex(7)
    assert not is_connected(g)


def test_is_bipartite_even_and_odd_cycles():
    square = Graph([(1, 2), (2, 3), (3, 4), (4, 1)])
    triangle = Graph([(1, 2), (2, 3), (3, 1)])
    assert is_bipartite(square)
    assert not is_bipartite(triangle)


def test_is_bipartite_disconnected_second_component_odd():
    g = Graph([(1, 2), (10, 11), (11, 12), (12, 10)])
    assert not is_bipartite(g)


def test_two_coloring_alternates():
    g = Graph([(1, 2), (2, 3), (3, 4)])
    g.add_vertex(9)
    assert two_coloring(g) == {1: 0, 2: 1, 3: 0, 4: 1, 9: 0}


def test_self_loop_is_not_bipartite():
    assert two_coloring(Graph([(1, 1)])) is None


def test_has_path_returns_real_booleans():
    g = DiGraph([(1, 2)])
    assert has_path(g, 1, 2) is True
    assert has_path(g, 2, 1) is False
    assert has_path(g, 1, 7) is False
