"""Word and sentence tokenizing and counting."""

_SENTENCE_END = ".!?"


def words(text):
    """Split ``text`` into words.

    A word is a run of letters or digits; an apostrophe between two such
    characters is kept (``"don't"`` is one word).
    """
    result = []
    current = []
    last = len(text) - 1
    for i, ch in enumerate(text):
        if ch.isalnum():
            current.append(ch)
        elif ch == "'" and current and i < last and text[i + 1].isalnum():
            current.append(ch)
        elif current:
            result.append("".join(current))
            current = []
    if current:
        result.append("".join(current))
    return result


def sentences(text):
    """Split ``text`` into sentences.

    A sentence ends with one or more of ``.``, ``!`` or ``?`` followed by
    whitespace or the end of the text.  A trailing fragment without
    terminal punctuation is returned as the last sentence.
    """
    result = []
    start = 0
    i = 0
    n = len(text)
    while i < n:
        if text[i] not in _SENTENCE_END:
            i += 1
            continue
        j = i + 1
        while j < n and text[j] in _SENTENCE_END:
            j += 1
        if j == n or text[j].isspace():
            sentence = text[start:j].strip()
            if sentence:
                result.append(sentence)
            start = j
        i = j
    tail = text[start:].strip()
    if tail:
        result.append(tail)
    return result


def ngrams(items, n):
    """Return the list of contiguous ``n``-tuples of ``items``."""
    if n < 1:
        raise ValueError("n must be at least 1")
    return [tuple(items[i : i + n]) for i in range(len(items) - n + 1)]


def word_count(text):
    """Return the number of words in ``text``."""
    return len(words(text))


def word_frequencies(text, case_sensitive=False):
    """Map each word to the number of times it occurs."""
    counts = {}
    for word in words(text):
        key = word if case_sensitive else word.lower()
        counts[key] = counts.get(key, 0) + 1
    return counts


def most_common(text, n=None):
    """Return ``(word, count)`` pairs, most frequent first.

    Ties are broken alphabetically.  ``n`` limits the number of pairs.
    """
    frequencies = word_frequencies(text)
    ordered = sorted(frequencies.items(), key=lambda item: (-item[1], item[0]))
    if n is not None:
        ordered = ordered[:n]
    return ordered


def char_count(text, ignore_spaces=False):
    """Count characters, optionally ignoring all whitespace."""
    if ignore_spaces:
        return sum(1 for ch in text if not ch.isspace())
    return len(text)


def count_substring(text, sub, overlapping=False):
    """Count occurrences of ``sub`` in ``text``."""
    if not sub:
        raise ValueError("substring must not be empty")
    count = 0
    start = 0
    step = 1 if overlapping else len(sub)
    while True:
        index = text.find(sub, start)
        if index < 0:
            return count
        count += 1
        start = index + step


def average_word_length(text):
    """Return the mean length of the words in ``text`` (0.0 if none)."""
    tokens = words(text)
    if not tokens:
        return 0.0
    return sum(len(token) for token in tokens) / len(tokens)
