import pytest

from graphs import (
    CycleError,
    DiGraph,
    Graph,
    GraphError,
    find_cycle,
    has_cycle,
    in_degrees,
    longest_path_length,
    sinks,
    sources,
    topological_sort,
)


def dag():
    return DiGraph([(5, 11), (7, 11), (7, 8), (3, 8), (3, 10), (11, 2), (11, 9), (11, 10), (8, 9)])


def test_in_degrees():
    assert in_degrees(dag()) == {2: 1, 3: 0, 5: 0, 7: 0, 8: 2, 9: 2, 10: 2, 11: 2}


def test_topological_sort_smallest_first():
    assert topological_sort(dag()) == [3, 5, 7, 8, 11, 2, 9, 10]


def test_topological_sort_respects_all_edges():
    g = dag()
    order = topological_sort(g)
    pos = {v: i for i, v in enumerate(order)}
    for u, v, _ in g.edges():
        assert pos[u] < pos[v]


def test_topological_sort_isolated_and_empty():
    g = DiGraph()
    assert topological_sort(g) == []
    g.add_vertex(2)
    g.add_vertex(1)
    assert topological_sort(g) == [1, 2]


def test_topological_sort_cycle_raises():
    g = DiGraph([(1, 2), (2, 3), (3, 1), (0, 1)])
    with pytest.raises(CycleError):
        topological_sort(g)


def test_topological_sort_requires_digraph():
    with pytest.raises(GraphError):
        topological_sort(Graph([(1, 2)]))


def test_find_cycle_returns_closed_cycle():
    g = DiGraph([(1, 2), (2, 3), (3, 4), (4, 2)])
    assert find_cycle(g) == [2, 3, 4, 2]


def test_find_cycle_self_loop_and_acyclic():
    assert find_cycle(DiGraph([(1, 2), (2, 2)])) == [2, 2]
    assert find_cycle(dag()) is None


def test_find_cycle_diamond_is_not_a_cycle():
    g = DiGraph([(1, 2), (1, 3), (2, 4), (3, 4)])
    assert find_cycle(g) is None
    assert not has_cycle(g)


def test_has_cycle_in_later_component():
    g = DiGraph([(1, 2), (5, 6), (6, 5)])
    assert has_cycle(g)
    assert find_cycle(g) == [5, 6, 5]


def test_longest_path_length():
    assert longest_path_length(dag()) == 2
    chain = DiGraph([(1, 2), (2, 3), (3, 4), (1, 4)])
    assert longest_path_length(chain) == 3
    assert longest_path_length(DiGraph()) == 0


def test_sources_and_sinks():
    g = dag()
    assert sources(g) == [3, 5, 7]
    assert sinks(g) == [2, 9, 10]


def test_topological_sort_keeps_ready_list_sorted():
    g = DiGraph([(1, 2)])
    g.add_vertex(3)
    assert topological_sort(g) == [1, 2, 3]
