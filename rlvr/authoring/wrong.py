"""Deliberately wrong solutions a task's hidden suite must reject (SPEC §1 rule 3).

Each is a whole target *state* (file dict) rather than a diff, so suite runs can be cached
by state and shared between tasks that reach the same one (sibling mutants of a family).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache

from rlvr import ast_parse
from rlvr.tasks.model import Task
from rlvr.tasks.operators import function_mutants


@dataclass(frozen=True)
class WrongSolution:
    kind: str          # empty | stub | mutant | edits_tests
    label: str         # e.g. "stub:money/core.py:Money.split"
    files: dict[str, str]


def function_spans(source: str) -> dict[str, tuple[int, int]]:
    """qualname -> (first line, last line), 1-based inclusive, for every (nested) def."""
    return dict(_function_spans(source))


@lru_cache(maxsize=512)
def _function_spans(source: str) -> tuple[tuple[str, tuple[int, int]], ...]:
    # Memoised: every task of a family compares against the same seed module.
    spans: dict[str, tuple[int, int]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                    spans[name] = (start, child.end_lineno)
                visit(child, name + ".")

    visit(ast_parse.parse(source), "")
    return tuple(spans.items())


def changed_functions(before: str, after: str) -> list[str]:
    """Functions of `after` whose source differs from `before` (same qualname)."""
    try:
        spans_b, spans_a = function_spans(before), function_spans(after)
    except SyntaxError:
        return []
    lb, la = before.splitlines(), after.splitlines()
    out = []
    for name, (s, e) in spans_a.items():
        if name not in spans_b:
            out.append(name)
            continue
        sb, eb = spans_b[name]
        if lb[sb - 1:eb] != la[s - 1:e]:
            out.append(name)
    # innermost first changes only: drop a function whose change is inside a changed child
    return [n for n in out if not any(o != n and o.startswith(n + ".") for o in out)]


@lru_cache(maxsize=512)
def stub_function(source: str, qualname: str, constant: str = "None") -> str:
    """`source` with `qualname`'s body replaced by `return <constant>` (docstring kept).
    Memoised: the tasks of one function share their fixed module, hence their stub."""
    tree = ast_parse.parse(source)
    target = _find(tree, qualname)
    body = target.body
    keep = 1 if (body and isinstance(body[0], ast.Expr)
                 and isinstance(getattr(body[0], "value", None), ast.Constant)
                 and isinstance(body[0].value.value, str)) else 0
    lines = source.splitlines(keepends=True)
    first = body[keep] if keep < len(body) else body[-1]
    indent = " " * first.col_offset
    start = (first.lineno - 1) if keep < len(body) else body[-1].end_lineno
    end = body[-1].end_lineno
    new = f"{indent}return {constant}\n"
    return "".join(lines[:start]) + new + "".join(lines[end:])


def _find(tree: ast.AST, qualname: str) -> ast.FunctionDef:
    node: ast.AST = tree
    for part in qualname.split("."):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                    and child.name == part:
                node = child
                break
        else:
            raise KeyError(qualname)
    return node  # type: ignore[return-value]


def wrong_solutions(task: Task, fixed: dict[str, str], *, max_mutants: int,
                    seed: int) -> list[WrongSolution]:
    """Empty patch, a constant stub and other mutants of each function the reference
    changes, and a patch that guts a public test (the verifier must refuse it outright)."""
    buggy = task.repo_files
    out = [WrongSolution("empty", "empty", dict(buggy))]
    for path in sorted(set(fixed) & set(buggy)):
        if fixed[path] == buggy[path] or not path.endswith(".py") or path in task.public_tests:
            continue
        for qualname in changed_functions(buggy[path], fixed[path]):
            try:
                stub = stub_function(fixed[path], qualname)
            except (KeyError, SyntaxError):
                continue
            out.append(WrongSolution("stub", f"stub:{path}:{qualname}", {**buggy, path: stub}))
            for i, mutant in enumerate(_mutants(fixed[path], qualname, max_mutants, seed)):
                if mutant == buggy[path] or mutant == fixed[path]:
                    continue
                out.append(WrongSolution("mutant", f"mutant{i}:{path}:{qualname}",
                                         {**buggy, path: mutant}))
    if task.public_tests:
        test_path = sorted(task.public_tests)[0]
        gutted = "def test_everything_passes():\n    assert True\n"
        out.append(WrongSolution("edits_tests", f"edits_tests:{test_path}",
                                 {**buggy, test_path: gutted}))
    return out


def _mutants(source: str, qualname: str, limit: int, seed: int) -> list[str]:
    if limit <= 0:
        return []
    try:
        return [m.source for m in function_mutants(source, qualname, limit=limit, seed=seed)]
    except (KeyError, SyntaxError):  # a def the operators cannot address: the stub still runs
        return []
