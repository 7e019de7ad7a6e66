"""Apply one unified-diff hunk to a text, by content (the `edit {"path", "hunk"}` tool).

Models write hunks with wrong line numbers far more often than with wrong context, so the
hunk is located by its context + removed lines; the `@@ -a,b +c,d @@` header (optional) only
breaks ties between several exact matches. Anything ambiguous or non-matching is an error
message for the agent, never a guess.
"""
from __future__ import annotations

import re

_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class HunkError(ValueError):
    """The hunk is malformed or does not apply; the message is shown to the agent."""


def parse_hunk(hunk: str) -> tuple[int | None, list[str], list[str]]:
    """(old start line or None, old lines, new lines) of a single hunk."""
    old: list[str] = []
    new: list[str] = []
    start: int | None = None
    seen_header = False
    lines = hunk.split("\n")
    if lines and lines[-1] == "":
        lines = lines[:-1]
    for raw in lines:
        if not seen_header and not old and not new and raw.startswith(
                ("--- ", "+++ ", "diff --git ", "index ")):
            continue  # file headers are tolerated and ignored: the path comes from `path`
        if raw.startswith("@@"):
            if seen_header or old or new:
                raise HunkError("one hunk per edit (found a second @@ header)")
            m = _HEADER.match(raw)
            if not m:
                raise HunkError(f"bad hunk header {raw!r} (want '@@ -a,b +c,d @@')")
            start = int(m.group(1))
            seen_header = True
            continue
        if raw.startswith("\\"):
            continue  # "\ No newline at end of file"
        tag, body = (raw[:1], raw[1:]) if raw else (" ", "")
        if tag == " ":
            old.append(body)
            new.append(body)
        elif tag == "-":
            old.append(body)
        elif tag == "+":
            new.append(body)
        else:
            raise HunkError(f"bad hunk line {raw!r}: must start with ' ', '-' or '+'")
    if old == new:
        raise HunkError("the hunk changes nothing (no '-' or '+' lines)")
    return start, old, new


def apply_hunk(text: str, hunk: str) -> str:
    """`text` with the hunk applied; HunkError says why not."""
    start, old, new = parse_hunk(hunk)
    ends_with_newline = text.endswith("\n")
    lines = text.split("\n")
    if ends_with_newline:
        lines = lines[:-1]
    if not old:
        if start is None:
            raise HunkError("a hunk without context or removed lines needs an @@ header")
        at = max(start, 1) - 1 if start else 0
        if at > len(lines):
            raise HunkError(f"hunk starts at line {start}, the file has {len(lines)} lines")
        matches = [at]
    else:
        n = len(old)
        matches = [i for i in range(len(lines) - n + 1) if lines[i:i + n] == old]
        if not matches:
            raise HunkError("the hunk's context and '-' lines do not match the file "
                            "(they must be copied exactly, whitespace included)")
        if len(matches) > 1:
            at_header = [i for i in matches if start is not None and i == start - 1]
            if not at_header:
                where = ", ".join(str(i + 1) for i in matches[:10])
                raise HunkError(f"the hunk matches {len(matches)} places (lines {where}); "
                                "add context lines or a correct @@ header")
            matches = at_header
    i = matches[0]
    out = lines[:i] + new + lines[i + len(old):]
    result = "\n".join(out)
    if ends_with_newline or (not text and out):
        result += "\n"
    return result
