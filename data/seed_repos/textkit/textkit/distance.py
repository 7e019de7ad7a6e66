"""String distance and similarity metrics."""


def levenshtein(a, b):
    """Return the edit distance (insert/delete/substitute) between a and b."""
    if a == b:
        return 0
    if not a:
        return len(b)
    if not b:
        return len(a)
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        current = [i]
        for j, char_b in enumerate(b, 1):
            cost = 0 if char_a == char_b else 1
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            )
        previous = current
    return previous[-1]


def hamming(a, b):
    """Return the number of positions at which equal-length a and b differ."""
    if len(a) != len(b):
        raise ValueError("hamming distance needs strings of equal length")
    return sum(1 for x, y in zip(a, b) if x != y)


def similarity(a, b):
    """Return a similarity score in ``[0, 1]`` based on edit distance."""
    longest = max(len(a), len(b))
    if longest == 0:
        return 1.0
    return 1.0 - levenshtein(a, b) / longest


def common_prefix(strings):
    """Return the longest prefix shared by all ``strings``."""
    if not strings:
        return ""
    prefix = strings[0]
    for other in strings[1:]:
        i = 0
        limit = min(len(prefix), len(other))
        while i < limit and prefix[i] == other[i]:
            i += 1
        prefix = prefix[:i]
        if not prefix:
            break
    return prefix


def common_suffix(strings):
    """Return the longest suffix shared by all ``strings``."""
    reversed_strings = [s[::-1] for s in strings]
    return common_prefix(reversed_strings)[::-1]


def lcs_length(a, b):
    """Return the length of the longest common subsequence of a and b."""
    if not a or not b:
        return 0
    previous = [0] * (len(b) + 1)
    for char_a in a:
        current = [0]
        for j, char_b in enumerate(b, 1):
            if char_a == char_b:
                current.append(previous[j - 1] + 1)
            else:
                current.append(max(previous[j], current[j - 1]))
        previous = current
    return previous[-1]


def closest_match(word, candidates, max_distance=None):
    """Return the candidate with the smallest edit distance to ``word``.

    The earliest candidate wins ties.  Candidates farther away than
    ``max_distance`` are ignored; ``None`` is returned if none qualify.
    """
    best = None
    best_distance = None
    for candidate in candidates:
        distance = levenshtein(word, candidate)
        if max_distance is not None and distance > max_distance:
            continue
        if best_distance is None or distance < best_distance:
            best = candidate
            best_distance = distance
    return best
