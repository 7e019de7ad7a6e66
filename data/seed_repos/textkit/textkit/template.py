"""A tiny ``{placeholder}`` template renderer.

Syntax: ``{name}`` inserts a value, ``{user.name}`` looks up nested
mappings, ``{name|fallback}`` supplies a default, and ``{{`` / ``}}``
produce literal braces.
"""


class TemplateError(ValueError):
    """Raised for malformed templates."""


_MISSING = object()


def parse_template(template):
    """Split ``template`` into literal strings and ``(name, default)`` tuples.

    ``default`` is ``None`` when the placeholder has no ``|fallback`` part.
    """
    tokens = []
    literal = []
    i = 0
    n = len(template)
    while i < n:
        ch = template[i]
        if ch == "{":
            if i + 1 < n and template[i + 1] == "{":
                literal.append("{")
                i += 2
                continue
            end = template.find("}", i + 1)
            if end < 0:
                raise TemplateError(f"unclosed placeholder at position {i}")
            body = template[i + 1 : end]
            name, sep, default = body.partition("|")
            name = name.strip()
            if not name:
                raise TemplateError(f"empty placeholder at position {i}")
            if literal:
                tokens.append("".join(literal))
                literal = []
            tokens.append((name, default if sep else None))
            i = end + 1
        elif ch == "}":
            if i + 1 < n and template[i + 1] == "}":
                literal.append("}")
                i += 2
                continue
            raise TemplateError(f"unmatched '}}' at position {i}")
        else:
            literal.append(ch)
            i += 1
    if literal:
        tokens.append("".join(literal))
    return tokens


def placeholders(template):
    """Return the distinct placeholder names in order of first appearance."""
    names = []
    for token in parse_template(template):
        if isinstance(token, tuple) and token[0] not in names:
            names.append(token[0])
    return names


def lookup(context, dotted_name):
    """Resolve a dotted name such as ``"user.name"`` in nested mappings.

    Returns the module-private missing sentinel if any segment is absent.
    """
    value = context
    for part in dotted_name.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return _MISSING
    return value


def render(template, context, strict=True):
    """Render ``template`` with values from ``context``.

    Missing names use their default if one is given; otherwise a
    ``KeyError`` is raised when ``strict`` is true, or the placeholder is
    kept verbatim when it is false.
    """
    out = []
    for token in parse_template(template):
        if isinstance(token, str):
            out.append(token)
            continue
        name, default = token
        value = lookup(context, name)
        if value is not _MISSING:
            out.append(str(value))
        elif default is not None:
            out.append(default)
        elif strict:
            raise KeyError(name)
        else:
            out.append("{" + name + "}")
    return "".join(out)


def escape(text):
    """Escape braces so that ``text`` renders literally."""
    return text.replace("{", "{{").replace("}", "}}")
