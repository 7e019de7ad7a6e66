"""Byte-exact source rewriting by AST span.

A mutant must differ from its seed file only where the bug was injected: the reference
patch (mutant -> original) then is a one-hunk diff and restores the seed byte for byte.
`ast.unparse` of the whole file would reformat everything, so operators describe their
change as `Edit`s over the node spans that `ast` reports (`lineno/col_offset/end_*`).
Those column offsets count UTF-8 *bytes*, so all arithmetic here is on the encoded source.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Edit:
    """Replace bytes [start, end) of the UTF-8 source with `text`."""

    start: int
    end: int
    text: str


class SourceMap:
    """A source file's bytes plus line-start offsets, for node <-> byte-span conversion."""

    def __init__(self, source: str):
        self.source = source
        self.data = source.encode("utf-8")
        starts = [0]
        for line in self.data.splitlines(keepends=True):
            starts.append(starts[-1] + len(line))
        self.line_starts = starts

    def offset(self, lineno: int, col: int) -> int:
        return self.line_starts[lineno - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.offset(node.lineno, node.col_offset),
                self.offset(node.end_lineno, node.end_col_offset))

    def text(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.data[start:end].decode("utf-8")

    def slice(self, start: int, end: int) -> str:
        return self.data[start:end].decode("utf-8")

    def line_of(self, offset: int) -> int:
        """1-based line number holding byte `offset`."""
        lo, hi = 0, len(self.line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.line_starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def find_token(self, start: int, end: int, pattern: re.Pattern[str]) -> tuple[int, int, str]:
        """The first match of `pattern` in bytes [start, end), skipping comments.

        Used to locate an operator token between two operand spans (the gap holds only
        whitespace, parentheses, line continuations, comments and the operator itself).
        """
        gap = self.slice(start, end)
        for m in _GAP_TOKEN.finditer(gap):
            if m.group(0).startswith("#"):
                continue
            op = pattern.fullmatch(m.group(0))
            if op:
                s = start + len(gap[: m.start()].encode("utf-8"))
                return s, s + len(m.group(0).encode("utf-8")), m.group(0)
        raise ValueError(f"no operator token in {gap!r}")

    def apply(self, edits: tuple[Edit, ...] | list[Edit]) -> str:
        """The source with `edits` applied (they must not overlap)."""
        out = []
        pos = 0
        for e in sorted(edits, key=lambda e: (e.start, e.end)):
            if e.start < pos:
                raise ValueError("overlapping edits")
            out.append(self.data[pos:e.start])
            out.append(e.text.encode("utf-8"))
            pos = e.end
        out.append(self.data[pos:])
        return b"".join(out).decode("utf-8")


# Tokens that can sit between two operands: comments, multi-word operators, symbols, words.
_GAP_TOKEN = re.compile(
    r"#[^\n]*|not\s+in\b|is\s+not\b|\*\*=?|//=?|<<=?|>>=?|[<>!=]=|->|[-+*/%@&|^<>]=?|=|\w+|\S"
)


def overlaps(a: tuple[Edit, ...], b: tuple[Edit, ...]) -> bool:
    return any(x.start < y.end and y.start < x.end for x in a for y in b)
