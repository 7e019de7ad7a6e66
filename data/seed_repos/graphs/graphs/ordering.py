"""Topological ordering and cycle detection for directed graphs."""

from .graph import GraphError


class CycleError(GraphError):
    """Raised when a topological order is requested for a cyclic graph."""


def in_degrees(graph):
    """Return a mapping vertex -> number of incoming edges."""
    degrees = {v: 0 for v in graph.vertices()}
    for _, v, _ in graph.edges():
        degrees[v] += 1
    return degrees


def topological_sort(graph):
    """Return vertices in topological order using Kahn's algorithm.

    Ties are broken by choosing the smallest available vertex, so the
    result is deterministic. Raises ``CycleError`` if a cycle exists.
    """
    if not graph.directed:
        raise GraphError("topological_sort requires a directed graph")
    degrees = in_degrees(graph)
    ready = sorted(v for v, d in degrees.items() if d == 0)
    order = []
    while ready:
        v = ready.pop(0)
        order.append(v)
        for w in graph.neighbors(v):
            degrees[w] -= 1
            if degrees[w] == 0:
                ready.append(w)
                ready.sort()
    if len(order) < graph.vertex_count():
        raise CycleError("graph contains a cycle")
    return order


def has_cycle(graph):
    """Return True if the directed graph contains a cycle."""
    return find_cycle(graph) is not None


def find_cycle(graph):
    """Return one directed cycle as a vertex list closing on itself, or None.

    Uses an iterative three-color DFS.
    """
    white, gray, black = 0, 1, 2
    color = {v: white for v in graph.vertices()}
    parent = {}
    for root in graph.vertices():
        if color[root] != white:
            continue
        stack = [(root, iter(graph.neighbors(root)))]
        color[root] = gray
        while stack:
            v, it = stack[-1]
            advanced = False
            for w in it:
                if color[w] == gray:
                    cycle = [w]
                    node = v
                    while node != w:
                        cycle.append(node)
                        node = parent[node]
                    cycle.append(w)
                    cycle.reverse()
                    return cycle
                if color[w] == white:
                    color[w] = gray
                    parent[w] = v
                    stack.append((w, iter(graph.neighbors(w))))
                    advanced = True
                    break
            if not advanced:
                color[v] = black
                stack.pop()
    return None


def longest_path_length(graph):
    """Return the number of edges on the longest path in a DAG."""
    order = topological_sort(graph)
    length = {v: 0 for v in order}
    for v in order:
        for w in graph.neighbors(v):
            if length[v] + 1 > length[w]:
                length[w] = length[v] + 1
    return max(length.values(), default=0)


def sources(graph):
    """Return vertices with no incoming edges."""
    return [v for v, d in in_degrees(graph).items() if d == 0]


def sinks(graph):
    """Return vertices with no outgoing edges."""
    return [v for v in graph.vertices() if len(graph.neighbors(v)) == 0]
