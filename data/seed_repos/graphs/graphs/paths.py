"""Shortest path algorithms and path helpers."""

import heapq
from collections import deque

from .graph import GraphError
from .traversal import bfs_levels

INFINITY = float("inf")


def reconstruct_path(parents, source, target):
    """Rebuild the path from ``source`` to ``target`` using a parent map.

    Returns an empty list when ``target`` was never reached.
    """
    if target != source and target not in parents:
        return []
    path = [target]
    current = target
    while current != source:
        current = parents[current]
        path.append(current)
    path.reverse()
    return path


def bfs_shortest_path(graph, source, target):
    """Return a path with the fewest edges, or an empty list."""
    if not graph.has_vertex(source):
        raise GraphError("no vertex %r" % (source,))
    if not graph.has_vertex(target):
        raise GraphError("no vertex %r" % (target,))
    parents = {}
    seen = {source}
    queue = deque([source])
    while queue:
        v = queue.popleft()
        if v == target:
            break
        for w in graph.neighbors(v):
            if w not in seen:
                seen.add(w)
                parents[w] = v
                queue.append(w)
    return reconstruct_path(parents, source, target)


def dijkstra(graph, source):
    """Return ``(dist, parents)`` for single-source shortest paths.

    ``dist`` maps every reachable vertex to its distance; ``parents``
    maps each reached vertex other than ``source`` to its predecessor.
    """
    if not graph.has_vertex(source):
        raise GraphError("no vertex %r" % (source,))
    dist = {source: 0}
    parents = {}
    heap = [(0, 0, source)]
    counter = 1
    while heap:
        d, _, v = heapq.heappop(heap)
        if d > dist[v]:
            continue
        for w in graph.neighbors(v):
            nd = d + graph.weight(v, w)
            if w not in dist or nd < dist[w]:
                dist[w] = nd
                parents[w] = v
                heapq.heappush(heap, (nd, counter, w))
                counter += 1
    return dist, parents


def shortest_path(graph, source, target):
    """Return ``(distance, path)`` of the cheapest weighted path.

    Returns ``(INFINITY, [])`` when ``target`` is unreachable.
    """
    if not graph.has_vertex(target):
        raise GraphError("no vertex %r" % (target,))
    dist, parents = dijkstra(graph, source)
    if target not in dist:
        return INFINITY, []
    return dist[target], reconstruct_path(parents, source, target)


def distance(graph, source, target):
    """Return the weighted distance between two vertices."""
    return shortest_path(graph, source, target)[0]


def path_weight(graph, path):
    """Return the total weight along ``path``; raises if an edge is missing."""
    total = 0
    for i in range(len(path) - 1):
        total += graph.weight(path[i], path[i + 1])
    return total


def is_simple_path(graph, path):
    """Return True if ``path`` follows existing edges without repeats."""
    if not path:
        return False
    if len(set(path)) != len(path):
        return False
    for u, v in zip(path, path[1:]):
        if not graph.has_edge(u, v):
            return False
    return True


def eccentricity(graph, v):
    """Return the greatest hop distance from ``v`` to any reachable vertex."""
    return max(bfs_levels(graph, v).values())


def diameter(graph):
    """Return the largest eccentricity over all vertices (0 for empty)."""
    best = 0
    for v in graph.vertices():
        e = eccentricity(graph, v)
        if e > best:
            best = e
    return best
