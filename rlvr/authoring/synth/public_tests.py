"""Public tests: a few hidden tests copied into the agent's workspace.

The agent must be able to *see* the bug (SPEC §3 / ENVIRONMENT: the fix has to be decidable
from the observation of running the public tests), so a task shows some FAIL_TO_PASS tests
and, as a regression hint, some PASS_TO_PASS ones. Each public file is the hidden test module
minus the test functions that were not selected: imports, constants, helpers and fixtures are
kept verbatim (line spans cut by AST, nothing re-rendered). Support files of the suite
(`conftest.py`, helper modules) are copied whole so the selected tests still run.
"""
from __future__ import annotations

import ast
import random
from collections import defaultdict
from functools import lru_cache

from rlvr import ast_parse

PUBLIC_DIR = "tests"


def split_node_id(test_id: str) -> tuple[str, list[str]]:
    """`test_a.py::TestX::test_y[p]` -> ("test_a.py", ["TestX", "test_y"])."""
    path, *names = test_id.split("::")
    return path, [n.split("[", 1)[0] for n in names]


def select_public(fail_to_pass: list[str], pass_to_pass: list[str], *, n_fail: int,
                  n_pass: int, rng: random.Random,
                  groups: list[list[str]] | None = None) -> list[str]:
    """Up to `n_fail` FAIL_TO_PASS and `n_pass` PASS_TO_PASS ids (at least one failing one).

    `groups` (for a task with several bugs: the tests each bug alone breaks) makes the
    failing selection show every bug: one test of each group first, then the rest at random.
    Passing tests are preferred from the modules the failing ones live in: they exercise the
    same API and read as the regression context of the bug."""
    f2p = sorted(fail_to_pass)
    chosen: list[str] = []
    for group in groups or []:
        options = sorted(set(group) & set(f2p))
        if options and not set(options) & set(chosen):
            chosen.append(rng.choice(options))
    rest = [t for t in f2p if t not in chosen]
    want = max(0, min(max(1, n_fail), len(f2p)) - len(chosen))
    chosen_fail = sorted(chosen + rng.sample(rest, want))
    modules = {split_node_id(t)[0] for t in chosen_fail}
    p2p = sorted(pass_to_pass)
    near = [t for t in p2p if split_node_id(t)[0] in modules]
    far = [t for t in p2p if split_node_id(t)[0] not in modules]
    rng.shuffle(near)
    rng.shuffle(far)
    chosen_pass = (near + far)[:max(0, n_pass)]
    return sorted(chosen_fail + chosen_pass)


def _is_test_name(name: str) -> bool:
    return name.startswith("test")


def _span(node: ast.stmt) -> tuple[int, int]:
    """1-based inclusive line span including decorators."""
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return start, node.end_lineno


def prune_module(source: str, keep: set[tuple[str, ...]]) -> str:
    """`source` without the test functions / test-class methods not named in `keep`
    (name paths like ("test_x",) or ("TestY", "test_z")). A test class left without tests
    goes too. Everything else stays byte-identical."""
    tree = _parse(source)
    drop: list[tuple[int, int]] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_test_name(node.name):
            if (node.name,) not in keep:
                drop.append(_span(node))
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            methods = [m for m in node.body if isinstance(m, (ast.FunctionDef,
                                                              ast.AsyncFunctionDef))
                       and _is_test_name(m.name)]
            kept = [m for m in methods if (node.name, m.name) in keep]
            if not kept:
                drop.append(_span(node))
            else:
                drop.extend(_span(m) for m in methods if m not in kept)
    lines = source.splitlines(keepends=True)
    dropped = set()
    for start, end in drop:
        dropped.update(range(start, end + 1))
    out = [line for i, line in enumerate(lines, 1) if i not in dropped]
    return _collapse_blank_runs("".join(out))


@lru_cache(maxsize=128)
def _parse(source: str) -> ast.Module:
    """One parse per hidden test module (every task of a family prunes the same ones);
    `prune_module` only reads the tree."""
    return ast_parse.parse(source)


def _collapse_blank_runs(text: str) -> str:
    """Cutting functions leaves stacks of blank lines; keep at most two in a row."""
    out, blank = [], 0
    for line in text.splitlines(keepends=True):
        blank = blank + 1 if not line.strip() else 0
        if blank <= 2:
            out.append(line)
    return "".join(out)


def materialise(hidden_tests: dict[str, str], selected: list[str]) -> tuple[
        dict[str, str], dict[str, str]]:
    """(public files {repo path: text}, {hidden id: public id}) for the selected tests."""
    wanted: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    for tid in selected:
        path, names = split_node_id(tid)
        if path not in hidden_tests:
            raise KeyError(f"public test {tid!r}: no such hidden test file")
        wanted[path].add(tuple(names))
    files: dict[str, str] = {}
    for path, text in hidden_tests.items():
        base = path.rsplit("/", 1)[-1]
        if path in wanted:
            files[f"{PUBLIC_DIR}/{path}"] = prune_module(text, wanted[path])
        elif not base.startswith("test_") and not base.endswith("_test.py"):
            files[f"{PUBLIC_DIR}/{path}"] = text  # conftest.py, helpers, data files
    mapping = {tid: f"{PUBLIC_DIR}/{tid}" for tid in selected}
    return files, mapping
