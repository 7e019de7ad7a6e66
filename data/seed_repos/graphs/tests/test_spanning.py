import pytest

from graphs import DiGraph, Graph, GraphError, UnionFind, is_spanning_tree, kruskal_mst, mst_weight, spanning_tree


def test_union_find_basic():
    uf = UnionFind([1, 2, 3, 4])
    assert uf.set_count() == 4
    assert uf.union(1, 2)
    assert uf.union(3, 4)
    assert not uf.union(2, 1)
    assert uf.connected(1, 2)
    assert not uf.connected(1, 3)
    assert uf.set_count() == 2


def test_union_find_sizes_and_unknown():
    uf = UnionFind("abcde")
    uf.union("a", "b")
    uf.union("c", "a")
    assert uf.set_size("b") == 3
    assert uf.set_size("d") == 1
    with pytest.raises(KeyError):
        uf.find("z")


def test_union_by_size_keeps_larger_root():
    uf = UnionFind([1, 2, 3])
    uf.union(2, 3)
    uf.union(1, 2)
    assert uf.find(1) == 2
    assert uf.find(3) == 2


def test_union_find_path_compression():
    uf = UnionFind()
    for i in range(5):
        uf.add(i)
    uf._parent.update({1: 0, 2: 1, 3: 2, 4: 3})
    assert uf.find(4) == 0
    assert uf._parent == {0: 0, 1: 0, 2: 0, 3: 0, 4: 0}


def test_union_find_add_is_idempotent():
    uf = UnionFind([1, 2])
    uf.union(1, 2)
    uf.add(2)
    assert uf.connected(1, 2)
    assert uf.set_size(1) == 2


def square_with_diagonal():
    return Graph([(1, 2, 1), (2, 3, 2), (3, 4, 1), (4, 1, 3), (1, 3, 2)])


def test_kruskal_mst_edges():
    assert kruskal_mst(square_with_diagonal()) == [(1, 2, 1), (3, 4, 1), (1, 3, 2)]


def test_mst_weight():
    assert mst_weight(square_with_diagonal()) == 4
    assert mst_weight(Graph()) == 0


def test_kruskal_forest_on_disconnected_graph():
    g = Graph([(1, 2, 5), (3, 4, 2), (4, 5, 1), (3, 5, 1)])
    assert kruskal_mst(g) == [(3, 5, 1), (4, 5, 1), (1, 2, 5)]


def test_kruskal_rejects_digraph():
    with pytest.raises(GraphError):
        kruskal_mst(DiGraph([(1, 2)]))


def test_spanning_tree_keeps_isolated_vertices():
    g = square_with_diagonal()
    g.add_vertex(9)
    t = spanning_tree(g)
    assert t.vertices() == [1, 2, 3, 4, 9]
    assert t.edge_count() == 3
    assert t.total_weight() == 4


def test_is_spanning_tree():
    g = square_with_diagonal()
    assert is_spanning_tree(g, kruskal_mst(g))
    assert is_spanning_tree(g, [(1, 2, 1), (2, 3, 2), (3, 4, 1)])
    assert not is_spanning_tree(g, [(1, 2, 1), (2, 3, 2)])
    assert not is_spanning_tree(g, [(1, 2, 1), (2, 3, 2), (1, 3, 2)])
    assert not is_spanning_tree(g, [(1, 2, 1), (2, 3, 2), (2, 4, 1)])


def test_is_spanning_tree_empty_graph():
    assert is_spanning_tree(Graph(), [])
    assert not is_spanning_tree(Graph(), [(1, 2, 1)])


def test_boolean_results_are_real_booleans():
    uf = UnionFind([1, 2])
    assert uf.union(1, 2) is True
    assert uf.union(2, 1) is False
    g = square_with_diagonal()
    assert is_spanning_tree(g, [(1, 2, 1)]) is False
    assert is_spanning_tree(g, [(1, 2, 1), (2, 3, 2), (2, 4, 1)]) is False
    assert is_spanning_tree(g, [(1, 2, 1), (2, 3, 2), (1, 3, 2)]) is False
