"""Adjacency-list graph containers."""


class GraphError(Exception):
    """Raised for invalid graph operations."""


class Graph:
    """An undirected graph with optional edge weights.

    Vertices may be any hashable value. Edges are stored symmetrically in
    an adjacency mapping ``vertex -> {neighbor: weight}``.
    """

    directed = False

    def __init__(self, edges=None):
        """Create a graph, optionally from an iterable of edge tuples.

        Each edge is ``(u, v)`` or ``(u, v, weight)``.
        """
        self._adj = {}
        if edges is not None:
            for edge in edges:
                if len(edge) == 2:
                    self.add_edge(edge[0], edge[1])
                elif len(edge) == 3:
                    self.add_edge(edge[0], edge[1], edge[2])
                else:
                    raise GraphError("edge must have 2 or 3 items: %r" % (edge,))

    def add_vertex(self, v):
        """Add a vertex if it is not already present."""
        if v not in self._adj:
            self._adj[v] = {}

    def add_edge(self, u, v, weight=1):
        """Add an edge between ``u`` and ``v`` with the given weight."""
        if weight < 0:
            raise GraphError("negative weight not allowed: %r" % (weight,))
        self.add_vertex(u)
        self.add_vertex(v)
        self._adj[u][v] = weight
        if not self.directed:
            self._adj[v][u] = weight

    def remove_edge(self, u, v):
        """Remove the edge between ``u`` and ``v``."""
        if not self.has_edge(u, v):
            raise GraphError("no edge %r -> %r" % (u, v))
        del self._adj[u][v]
        if not self.directed and u != v:
            del self._adj[v][u]

    def remove_vertex(self, v):
        """Remove a vertex and every edge touching it."""
        if v not in self._adj:
            raise GraphError("no vertex %r" % (v,))
        del self._adj[v]
        for nbrs in self._adj.values():
            nbrs.pop(v, None)

    def has_vertex(self, v):
        """Return True if ``v`` is a vertex of the graph."""
        return v in self._adj

    def has_edge(self, u, v):
        """Return True if there is an edge from ``u`` to ``v``."""
        return u in self._adj and v in self._adj[u]

    def weight(self, u, v):
        """Return the weight of edge ``(u, v)``."""
        if not self.has_edge(u, v):
            raise GraphError("no edge %r -> %r" % (u, v))
        return self._adj[u][v]

    def neighbors(self, v):
        """Return the neighbors of ``v`` sorted by their repr for determinism."""
        if v not in self._adj:
            raise GraphError("no vertex %r" % (v,))
        return sorted(self._adj[v], key=_sort_key)

    def vertices(self):
        """Return all vertices in a deterministic order."""
        return sorted(self._adj, key=_sort_key)

    def edges(self):
        """Return edges as ``(u, v, weight)`` tuples.

        Undirected edges are reported once, with endpoints ordered.
        """
        result = []
        for u in self.vertices():
            for v in self.neighbors(u):
                if self.directed or _sort_key(u) <= _sort_key(v):
                    result.append((u, v, self._adj[u][v]))
        return result

    def vertex_count(self):
        """Return the number of vertices."""
        return len(self._adj)

    def edge_count(self):
        """Return the number of edges."""
        total = sum(len(nbrs) for nbrs in self._adj.values())
        if self.directed:
            return total
        loops = sum(1 for v, nbrs in self._adj.items() if v in nbrs)
        return (total + loops) // 2

    def degree(self, v):
        """Return the degree of ``v``; self-loops count twice."""
        if v not in self._adj:
            raise GraphError("no vertex %r" % (v,))
        nbrs = self._adj[v]
        return len(nbrs) + (1 if v in nbrs else 0)

    def total_weight(self):
        """Return the sum of all edge weights."""
        return sum(w for _, _, w in self.edges())

    def copy(self):
        """Return an independent copy of the graph."""
        other = type(self)()
        for v, nbrs in self._adj.items():
            other._adj[v] = dict(nbrs)
        return other

    def __contains__(self, v):
        return v in self._adj

    def __len__(self):
        return len(self._adj)

    def __repr__(self):
        return "%s(vertices=%d, edges=%d)" % (
            type(self).__name__,
            self.vertex_count(),
            self.edge_count(),
        )


class DiGraph(Graph):
    """A directed graph with optional edge weights."""

    directed = True

    def in_degree(self, v):
        """Return the number of edges entering ``v``."""
        if v not in self._adj:
            raise GraphError("no vertex %r" % (v,))
        return sum(1 for nbrs in self._adj.values() if v in nbrs)

    def out_degree(self, v):
        """Return the number of edges leaving ``v``."""
        if v not in self._adj:
            raise GraphError("no vertex %r" % (v,))
        return len(self._adj[v])

    def degree(self, v):
        """Return in-degree plus out-degree."""
        return self.in_degree(v) + self.out_degree(v)

    def predecessors(self, v):
        """Return the vertices with an edge into ``v``."""
        if v not in self._adj:
            raise GraphError("no vertex %r" % (v,))
        return sorted((u for u, nbrs in self._adj.items() if v in nbrs), key=_sort_key)

    def reversed(self):
        """Return a new digraph with every edge reversed."""
        other = DiGraph()
        for v in self._adj:
            other.add_vertex(v)
        for u, v, w in self.edges():
            other.add_edge(v, u, w)
        return other


def _sort_key(v):
    """Key that orders mixed vertex types deterministically."""
    return (type(v).__name__, v)
