"""URL slug generation."""

_ALLOWED = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")

_TRANSLITERATIONS = {
    "ä": "ae",
    "ö": "oe",
    "ü": "ue",
    "ß": "ss",
    "é": "e",
    "è": "e",
    "ê": "e",
    "à": "a",
    "á": "a",
    "ç": "c",
    "ñ": "n",
    "ø": "o",
    "å": "a",
    "í": "i",
    "î": "i",
    "ó": "o",
    "ô": "o",
    "ú": "u",
    "û": "u",
}


def transliterate(text):
    """Replace common accented characters with ASCII equivalents.

    Capitalisation of the first replacement letter follows the original
    character, so ``"Ärger"`` becomes ``"Aerger"``.
    """
    out = []
    for ch in text:
        lower = ch.lower()
        replacement = _TRANSLITERATIONS.get(lower)
        if replacement is None:
            out.append(ch)
            continue
        if ch != lower:
            replacement = replacement[0].upper() + replacement[1:]
        out.append(replacement)
    return "".join(out)


def _slug_parts(text):
    """Return the lowercase alphanumeric runs of ``text``."""
    parts = []
    current = []
    for ch in transliterate(text).lower():
        if ch in _ALLOWED:
            current.append(ch)
        elif current:
            parts.append("".join(current))
            current = []
    if current:
        parts.append("".join(current))
    return parts


def _cut_parts(parts, separator, max_length):
    """Join as many leading parts as fit within ``max_length``."""
    result = ""
    for part in parts:
        candidate = part if not result else result + separator + part
        if len(candidate) > max_length:
            break
        result = candidate
    if not result and parts:
        result = parts[0][:max_length]
    return result


def slugify(text, separator="-", max_length=None):
    """Convert ``text`` into a lowercase URL slug.

    Runs of characters that are not ASCII letters or digits collapse into a
    single ``separator``; leading and trailing separators never appear.  When
    ``max_length`` is given the slug is cut on a word boundary so that it is
    at most that long (a single overlong word is hard-truncated).
    """
    if max_length is not None and max_length < 0:
        raise ValueError("max_length must be non-negative")
    parts = _slug_parts(text)
    slug = separator.join(parts)
    if max_length is not None and len(slug) > max_length:
        slug = _cut_parts(parts, separator, max_length)
    return slug


def is_slug(text, separator="-"):
    """Return True if ``text`` is already a well-formed slug."""
    if not text:
        return False
    if text.startswith(separator) or text.endswith(separator):
        return False
    if separator + separator in text:
        return False
    return all(ch in _ALLOWED or ch == separator for ch in text)


def unique_slug(text, taken, separator="-"):
    """Return a slug for ``text`` that does not occur in ``taken``.

    Collisions are resolved by appending ``-2``, ``-3`` and so on.
    """
    base = slugify(text, separator)
    if base not in taken:
        return base
    counter = 2
    while f"{base}{separator}{counter}" in taken:
        counter += 1
    return f"{base}{separator}{counter}"
