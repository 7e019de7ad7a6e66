"""Line wrapping, truncation, padding and indentation."""


def wrap(text, width):
    """Greedily wrap ``text`` into lines of at most ``width`` characters.

    Whitespace is normalised to single spaces.  Words longer than ``width``
    are broken into ``width``-sized chunks.
    """
    if width < 1:
        raise ValueError("width must be at least 1")
    lines = []
    current = ""
    for word in text.split():
        while len(word) > width:
            if current:
                lines.append(current)
                current = ""
            lines.append(word[:width])
            word = word[width:]
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= width:
            current = current + " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def fill(text, width):
    """Wrap ``text`` and join the resulting lines with newlines."""
    return "\n".join(wrap(text, width))


def truncate(text, limit, ellipsis="..."):
    """Shorten ``text`` to at most ``limit`` characters.

    If the text has to be cut, the result ends with ``ellipsis`` and is
    exactly ``limit`` characters long.
    """
    if limit < 0:
        raise ValueError("limit must be non-negative")
    if len(text) <= limit:
        return text
    if limit <= len(ellipsis):
        return ellipsis[:limit]
    return text[: limit - len(ellipsis)] + ellipsis


def truncate_words(text, max_words, ellipsis="..."):
    """Keep at most ``max_words`` words, appending ``ellipsis`` if cut."""
    if max_words < 0:
        raise ValueError("max_words must be non-negative")
    words = text.split()
    if len(words) <= max_words:
        return " ".join(words)
    return " ".join(words[:max_words]) + ellipsis


def _check_fill(fill_char):
    """Validate that ``fill_char`` is a single character."""
    if len(fill_char) != 1:
        raise ValueError("fill character must be exactly one character")


def pad_left(text, width, fill_char=" "):
    """Right-align ``text`` in a field of ``width`` characters."""
    _check_fill(fill_char)
    missing = width - len(text)
    if missing <= 0:
        return text
    return fill_char * missing + text


def pad_right(text, width, fill_char=" "):
    """Left-align ``text`` in a field of ``width`` characters."""
    _check_fill(fill_char)
    missing = width - len(text)
    if missing <= 0:
        return text
    return text + fill_char * missing


def center(text, width, fill_char=" "):
    """Center ``text`` in ``width`` characters; odd padding goes right."""
    _check_fill(fill_char)
    missing = width - len(text)
    if missing <= 0:
        return text
    left = missing // 2
    right = missing - left
    return fill_char * left + text + fill_char * right


def indent(text, prefix, skip_blank=True):
    """Prefix every line of ``text`` with ``prefix``.

    Blank (whitespace-only) lines are left untouched unless ``skip_blank``
    is False.
    """
    out = []
    for line in text.split("\n"):
        if skip_blank and not line.strip():
            out.append(line)
        else:
            out.append(prefix + line)
    return "\n".join(out)


def dedent(text):
    """Remove the common leading spaces from all non-blank lines."""
    lines = text.split("\n")
    margin = None
    for line in lines:
        stripped = line.lstrip(" ")
        if not stripped:
            continue
        width = len(line) - len(stripped)
        if margin is None or width < margin:
            margin = width
    if not margin:
        return text
    return "\n".join(line[margin:] for line in lines)
