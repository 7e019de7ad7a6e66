"""Breadth-first and depth-first traversal utilities."""

from collections import deque

from .graph import GraphError


def bfs_order(graph, start):
    """Return vertices reachable from ``start`` in breadth-first order."""
    if not graph.has_vertex(start):
        raise GraphError("no vertex %r" % (start,))
    seen = {start}
    order = []
    queue = deque([start])
    while queue:
        v = queue.popleft()
        order.append(v)
        for w in graph.neighbors(v):
            if w not in seen:
                seen.add(w)
                queue.append(w)
    return order


def dfs_order(graph, start):
    """Return vertices reachable from ``start`` in depth-first preorder.

    Neighbors are explored in sorted order, matching a recursive DFS.
    """
    if not graph.has_vertex(start):
        raise GraphError("no vertex %r" % (start,))
    seen = set()
    order = []
    stack = [start]
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        order.append(v)
        for w in reversed(graph.neighbors(v)):
            if w not in seen:
                stack.append(w)
    return order


def bfs_levels(graph, start):
    """Return a mapping of vertex -> hop distance from ``start``."""
    if not graph.has_vertex(start):
        raise GraphError("no vertex %r" % (start,))
    levels = {start: 0}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in graph.neighbors(v):
            if w not in levels:
                levels[w] = levels[v] + 1
                queue.append(w)
    return levels


def vertices_within(graph, start, max_hops):
    """Return sorted vertices at most ``max_hops`` edges away from ``start``."""
    if max_hops < 0:
        raise ValueError("max_hops must be non-negative")
    levels = bfs_levels(graph, start)
    return sorted(v for v, d in levels.items() if d <= max_hops)


def has_path(graph, source, target):
    """Return True if ``target`` is reachable from ``source``."""
    if not graph.has_vertex(source) or not graph.has_vertex(target):
        return False
    if source == target:
        return True
    return target in bfs_levels(graph, source)


def connected_components(graph):
    """Return the connected components of an undirected graph.

    Each component is a sorted list; components are ordered by their
    smallest vertex.
    """
    if graph.directed:
        raise GraphError("connected_components requires an undirected graph")
    seen = set()
    components = []
    for v in graph.vertices():
        if v in seen:
            continue
        component = bfs_order(graph, v)
        seen.update(component)
        components.append(sorted(component))
    return components


def component_count(graph):
    """Return the number of connected components."""
    return len(connected_components(graph))


def is_connected(graph):
    """Return True if the undirected graph is connected (empty counts)."""
    return component_count(graph) <= 1


def is_bipartite(graph):
    """Return True if the undirected graph can be two-colored."""
    return two_coloring(graph) is not None


def two_coloring(graph):
    """Return a vertex -> 0/1 coloring, or None if the graph is not bipartite."""
    color = {}
    for root in graph.vertices():
        if root in color:
            continue
        color[root] = 0
        queue = deque([root])
        while queue:
            v = queue.popleft()
            for w in graph.neighbors(v):
                if w not in color:
                    color[w] = 1 - color[v]
                    queue.append(w)
                elif color[w] == color[v]:
                    return None
    return color
