import pytest

from graphs import (
    INFINITY,
    DiGraph,
    Graph,
    GraphError,
    bfs_shortest_path,
    diameter,
    dijkstra,
    distance,
    eccentricity,
    is_simple_path,
    path_weight,
    reconstruct_path,
    shortest_path,
)


def weighted():
    return Graph([
        ("a", "b", 4),
        ("a", "c", 1),
        ("c", "b", 2),
        ("b", "d", 5),
        ("c", "d", 8),
        ("d", "e", 3),
    ])


def test_reconstruct_path_basic():
    parents = {2: 1, 3: 2, 4: 3}
    assert reconstruct_path(parents, 1, 4) == [1, 2, 3, 4]
    assert reconstruct_path(parents, 1, 2) == [1, 2]


def test_reconstruct_path_source_and_unreached():
    assert reconstruct_path({}, 1, 1) == [1]
    assert reconstruct_path({2: 1}, 1, 5) == []


def test_bfs_shortest_path_fewest_edges():
    g = Graph([(1, 2), (2, 3), (3, 4), (1, 5), (5, 4)])
    assert bfs_shortest_path(g, 1, 4) == [1, 5, 4]
    assert bfs_shortest_path(g, 1, 1) == [1]


def test_bfs_shortest_path_unreachable_and_missing():
    g = DiGraph([(1, 2), (3, 2)])
    assert bfs_shortest_path(g, 1, 3) == []
    with pytest.raises(GraphError):
        bfs_shortest_path(g, 1, 9)
    with pytest.raises(GraphError):
        bfs_shortest_path(g, 9, 1)


def test_dijkstra_distances_and_parents():
    dist, parents = dijkstra(weighted(), "a")
    assert dist == {"a": 0, "b": 3, "c": 1, "d": 8, "e": 11}
    assert parents == {"b": "c", "c": "a", "d": "b", "e": "d"}


def test_dijkstra_unknown_source():
    with pytest.raises(GraphError):
        dijkstra(weighted(), "z")


def test_dijkstra_equal_cost_keeps_first_found():
    g = Graph([(1, 2, 1), (1, 3, 1), (2, 4, 1), (3, 4, 1)])
    dist, parents = dijkstra(g, 1)
    assert dist[4] == 2
    assert parents[4] == 2


def test_dijkstra_zero_weight_edges():
    g = DiGraph([(1, 2, 0), (2, 3, 0), (1, 3, 1)])
    dist, parents = dijkstra(g, 1)
    assert dist == {1: 0, 2: 0, 3: 0}
    assert parents[3] == 2


def test_shortest_path_weighted():
    assert shortest_path(weighted(), "a", "e") == (11, ["a", "c", "b", "d", "e"])
    assert distance(weighted(), "e", "c") == 10


def test_shortest_path_unreachable_is_infinite():
    g = DiGraph([(1, 2, 1)])
    assert shortest_path(g, 2, 1) == (INFINITY, [])
    with pytest.raises(GraphError):
        shortest_path(g, 1, 5)


def test_path_weight():
    g = weighted()
    assert path_weight(g, ["a", "c", "b", "d"]) == 8
    assert path_weight(g, ["a"]) == 0
    assert path_weight(g, []) == 0
    with pytest.raises(GraphError):
        path_weight(g, ["a", "e"])


def test_is_simple_path():
    g = weighted()
    assert is_simple_path(g, ["a", "c", "d"])
    assert is_simple_path(g, ["e"])
    assert not is_simple_path(g, [])
    assert not is_simple_path(g, ["a", "c", "a"])
    assert not is_simple_path(g, ["a", "d"])


def test_eccentricity_and_diameter():
    g = Graph([(1, 2), (2, 3), (3, 4), (2, 5)])
    assert eccentricity(g, 2) == 2
    assert eccentricity(g, 1) == 3
    assert diameter(g) == 3
    assert diameter(Graph()) == 0


def test_dijkstra_mixed_vertex_types_with_equal_distances():
    g = Graph([(0, "a", 1), (0, 1, 1), ("a", "b", 1), (1, "b", 1)])
    dist, parents = dijkstra(g, 0)
    assert dist == {0: 0, 1: 1, "a": 1, "b": 2}
    assert parents["b"] == 1


def test_dijkstra_stale_heap_entries_are_skipped():
    g = DiGraph([(1, 2, 10), (1, 3, 1), (3, 2, 1), (2, 4, 1)])
    dist, parents = dijkstra(g, 1)
    assert dist == {1: 0, 2: 2, 3: 1, 4: 3}
    assert parents == {2: 3, 3: 1, 4: 2}


def test_directed_path_helpers_follow_edge_direction():
    g = DiGraph([(1, 2, 5), (2, 3, 7)])
    assert path_weight(g, [1, 2, 3]) == 12
    with pytest.raises(GraphError):
        path_weight(g, [3, 2])
    assert is_simple_path(g, [1, 2, 3]) is True
    assert is_simple_path(g, [3, 2, 1]) is False
    assert is_simple_path(g, [1, 2, 1]) is False
    assert is_simple_path(g, []) is False
