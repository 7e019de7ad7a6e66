"""Union-find and minimum spanning trees."""

from .graph import Graph, GraphError


class UnionFind:
    """Disjoint-set forest with path compression and union by size."""

    def __init__(self, items=()):
        """Create singleton sets for each item."""
        self._parent = {}
        self._size = {}
        for item in items:
            self.add(item)

    def add(self, item):
        """Add ``item`` as a new singleton set if unseen."""
        if item not in self._parent:
            self._parent[item] = item
            self._size[item] = 1

    def find(self, item):
        """Return the representative of the set containing ``item``."""
        if item not in self._parent:
            raise KeyError(item)
        root = item
        while self._parent[root] != root:
            root = self._parent[root]
        while self._parent[item] != root:
            nxt = self._parent[item]
            self._parent[item] = root
            item = nxt
        return root

    def union(self, a, b):
        """Merge the sets of ``a`` and ``b``; return False if already joined."""
        ra = self.find(a)
        rb = self.find(b)
        if ra == rb:
            return False
        if self._size[ra] < self._size[rb]:
            ra, rb = rb, ra
        self._parent[rb] = ra
        self._size[ra] += self._size[rb]
        return True

    def connected(self, a, b):
        """Return True if ``a`` and ``b`` are in the same set."""
        return self.find(a) == self.find(b)

    def set_size(self, item):
        """Return the size of the set containing ``item``."""
        return self._size[self.find(item)]

    def set_count(self):
        """Return the number of disjoint sets."""
        return sum(1 for item, parent in self._parent.items() if item == parent)


def kruskal_mst(graph):
    """Return the edges of a minimum spanning forest as ``(u, v, w)`` tuples.

    Edges are considered in order of weight, then endpoints.
    """
    if graph.directed:
        raise GraphError("kruskal_mst requires an undirected graph")
    uf = UnionFind(graph.vertices())
    chosen = []
    for u, v, w in sorted(graph.edges(), key=lambda e: (e[2], e[0], e[1])):
        if uf.union(u, v):
            chosen.append((u, v, w))
            if len(chosen) == graph.vertex_count() - 1:
                break
    return chosen


def mst_weight(graph):
    """Return the total weight of a minimum spanning forest."""
    return sum(w for _, _, w in kruskal_mst(graph))


def spanning_tree(graph):
    """Return the minimum spanning forest as a new ``Graph``."""
    tree = Graph()
    for v in graph.vertices():
        tree.add_vertex(v)
    for u, v, w in kruskal_mst(graph):
        tree.add_edge(u, v, w)
    return tree


def is_spanning_tree(graph, edges):
    """Return True if ``edges`` form a spanning tree of the connected graph."""
    n = graph.vertex_count()
    if n == 0:
        return not edges
    if len(edges) != n - 1:
        return False
    uf = UnionFind(graph.vertices())
    for u, v, _ in edges:
        if not graph.has_edge(u, v) or not uf.union(u, v):
            return False
    return uf.set_count() == 1
