"""`ast.parse` for threaded host code.

CPython 3.11 keeps the AST constructor's recursion counter in per-interpreter state, so two
threads building trees at once can corrupt it and one of them fails with `SystemError: AST
constructor recursion depth mismatch` (python/cpython#106905; seen by pytest#10763 and
others). The worker threads of rollout (the scripted teacher), synthesis (operators, public
tests, instructions) and curation (wrong solutions) all parse sources; big real-library
modules made the race frequent. One process-wide lock around the parse is enough: a parse is
short next to the suite runs it sits between.
"""
from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """`ast.parse(source, filename, mode)`, one thread at a time."""
    with _LOCK:
        return ast.parse(source, filename, mode)
