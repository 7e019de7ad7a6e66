"""Identifier and title case conversions."""

SMALL_WORDS = frozenset(
    {"a", "an", "and", "as", "at", "but", "by", "for", "in", "of", "on", "or", "the", "to"}
)


def split_identifier(name):
    """Split an identifier written in any common style into lowercase words.

    Handles ``snake_case``, ``kebab-case``, ``camelCase``, ``PascalCase``,
    acronyms (``"HTTPServer"`` -> ``["http", "server"]``) and digits.
    """
    parts = []
    current = ""
    last = len(name) - 1
    for i, ch in enumerate(name):
        if not ch.isalnum():
            if current:
                parts.append(current)
                current = ""
            continue
        if current and ch.isupper():
            prev = name[i - 1]
            following = name[i + 1] if i < last else ""
            if prev.islower() or prev.isdigit() or (prev.isupper() and following.islower()):
                parts.append(current)
                current = ""
        current += ch
    if current:
        parts.append(current)
    return [part.lower() for part in parts]


def snake_case(name):
    """Convert ``name`` to ``snake_case``."""
    return "_".join(split_identifier(name))


def kebab_case(name):
    """Convert ``name`` to ``kebab-case``."""
    return "-".join(split_identifier(name))


def constant_case(name):
    """Convert ``name`` to ``CONSTANT_CASE``."""
    return "_".join(split_identifier(name)).upper()


def camel_case(name):
    """Convert ``name`` to ``camelCase``."""
    parts = split_identifier(name)
    if not parts:
        return ""
    return parts[0] + "".join(part.capitalize() for part in parts[1:])


def pascal_case(name):
    """Convert ``name`` to ``PascalCase``."""
    return "".join(part.capitalize() for part in split_identifier(name))


def title_case(text):
    """Title-case a sentence.

    Small words (articles, short prepositions, conjunctions) stay lowercase
    unless they are the first or the last word.
    """
    tokens = text.split()
    last = len(tokens) - 1
    out = []
    for i, token in enumerate(tokens):
        lower = token.lower()
        if 0 < i < last and lower in SMALL_WORDS:
            out.append(lower)
        else:
            out.append(lower[:1].upper() + lower[1:])
    return " ".join(out)


def swap_case(text):
    """Swap upper and lower case letters."""
    out = []
    for ch in text:
        if ch.isupper():
            out.append(ch.lower())
        elif ch.islower():
            out.append(ch.upper())
        else:
            out.append(ch)
    return "".join(out)


def is_snake_case(name):
    """Return True if ``name`` is a valid lowercase snake_case identifier."""
    if not name or name[0] == "_" or name[-1] == "_":
        return False
    if "__" in name or name[0].isdigit():
        return False
    return all(ch == "_" or ch.isdigit() or ("a" <= ch <= "z") for ch in name)
