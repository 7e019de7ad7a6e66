"""Mutation operators (SPEC §2): every operator, on a tiny seed family built here, produces
code that compiles, changes behaviour on at least one of the family's tests, and is undone
byte for byte by its reference patch (mutant -> seed) through `git apply`."""
from __future__ import annotations

import ast
import sys
import types

import pytest

from rlvr.tasks.operators import (OPERATORS, SINGLE_OPERATORS, FunctionContext, Mutant,
                                  apply_site, function_mutants, function_names, sites)
from rlvr.tasks.patches import apply_patch, make_patch
from taskkit import MINIKIT_CORE as CORE
from taskkit import MINIKIT_CORE_PATH as CORE_PATH
from taskkit import MINIKIT_TESTS as TESTS

def _load(source: str) -> types.ModuleType:
    """Import `source` as minikit.core and run the family's test functions against it."""
    mod = types.ModuleType("minikit.core")
    exec(compile(source, CORE_PATH, "exec"), mod.__dict__)
    return mod


def failing_tests(source: str) -> list[str]:
    core = _load(source)
    pkg = types.ModuleType("minikit")
    pkg.core = core
    saved = {k: sys.modules.get(k) for k in ("minikit", "minikit.core")}
    sys.modules.update({"minikit": pkg, "minikit.core": core})
    try:
        ns: dict = {}
        exec(compile(TESTS, "test_core.py", "exec"), ns)
        failed = []
        for name, fn in sorted(ns.items()):
            if name.startswith("test_") and callable(fn):
                try:
                    fn()
                except (Exception, pytest.fail.Exception):  # noqa: BLE001 - a failing test
                    failed.append(name)
        return failed
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def test_seed_family_passes_its_own_tests():
    assert failing_tests(CORE) == []


def _mutants_of(op: str) -> list[tuple[str, Mutant]]:
    out = []
    for qualname in function_names(CORE):
        for site in OPERATORS[op](FunctionContext(CORE, qualname)):
            out.append((qualname, Mutant(op, site.params, apply_site(CORE, site), qualname,
                                         site.edits)))
    return out


ALL_OPERATORS = sorted(OPERATORS)


def test_registry_has_every_required_operator():
    assert set(OPERATORS) >= {
        "comparison_flip", "boundary_shift", "arithmetic_swap", "boolean_swap",
        "negate_condition", "swap_arguments", "remove_statement", "wrong_return",
        "slice_off_by_one", "wrong_variable", "combined"}
    assert "combined" not in SINGLE_OPERATORS


@pytest.mark.parametrize("op", ALL_OPERATORS)
def test_operator_mutants_compile_differ_and_are_reversible(op):
    mutants = _mutants_of(op)
    assert mutants, f"{op}: no site in the tiny family"
    for qualname, m in mutants:
        assert m.source != CORE
        ast.parse(m.source)  # syntactically valid
        # only the mutated function's lines differ
        node = FunctionContext(CORE, qualname).node
        old, new = CORE.splitlines(), m.source.splitlines()
        assert old[:node.lineno - 1] == new[:node.lineno - 1], (op, m.params)
        tail = len(old) - node.end_lineno
        assert old[len(old) - tail:] == new[len(new) - tail:], (op, m.params)
    # the reference (mutant -> seed) restores the seed byte for byte, via git apply
    for _, m in mutants[:25]:
        reference = make_patch({CORE_PATH: m.source}, {CORE_PATH: CORE})
        assert reference.startswith(f"diff --git a/{CORE_PATH} b/{CORE_PATH}\n")
        assert apply_patch({CORE_PATH: m.source}, reference) == {CORE_PATH: CORE}


@pytest.mark.parametrize("op", ALL_OPERATORS)
def test_operator_changes_behaviour_on_a_family_test(op):
    broken = [(m.params, failing_tests(m.source)) for _, m in _mutants_of(op)]
    assert any(fails for _, fails in broken), f"{op}: no mutant fails any family test"


def test_operator_examples_are_the_expected_edits():
    def one(op, qualname, **match):
        for site in OPERATORS[op](FunctionContext(CORE, qualname)):
            if all(site.params.get(k) == v for k, v in match.items()):
                return apply_site(CORE, site)
        raise AssertionError(f"no {op} site {match} in {qualname}")

    assert "    if x <= low:\n" in one("comparison_flip", "clamp", **{"from": "<"})
    assert "count != 1" in one("comparison_flip", "describe", **{"from": "=="})
    assert "count == 2" in one("boundary_shift", "describe", delta=1)
    assert "range((len(items) - size + 1) + 1)" in one("boundary_shift", "window", delta=1,
                                                       **{"from": "len(items) - size + 1"})
    assert "result -= v  # running sum" in one("arithmetic_swap", "total")
    assert "return a > 0 or b > 0" in one("boolean_swap", "both_positive")
    assert "    if not (x < low):\n" in one("negate_condition", "clamp", line=6)
    assert "clamp(max(values) - min(values), 100, 0)" in one("swap_arguments", "span", index=1)
    assert "out.append" not in one("remove_statement", "window", statement="expr")
    assert "            pass\n" in one("remove_statement", "Counter.bump", statement="raise")
    assert "    return None\n" in one("wrong_return", "clamp", line=10)
    assert "items[i:(i + size) - 1]" in one("slice_off_by_one", "window", bound="upper",
                                            delta=-1)
    assert "        return high\n    if x > high" in one("wrong_variable", "clamp", line=7,
                                                        **{"from": "low", "to": "high"})


def test_no_mutation_touches_docstrings_or_other_functions():
    for op in SINGLE_OPERATORS:
        for _, m in _mutants_of(op):
            assert '"""Limit x to [low, high]."""' in m.source
            assert "Ünïcode" in m.source


def test_unicode_before_a_site_keeps_byte_offsets_right():
    src = 'def f(s):\n    t = "ää"; return s[1:] + t if len(s) > 2 else t\n'
    got = {m.source for m in function_mutants(src, "f", limit=100, seed=0,
                                              operators=("comparison_flip",))}
    assert got == {src.replace("> 2", ">= 2")}


def test_arithmetic_swap_skips_string_concatenation():
    src = 'def f(a):\n    s = "x"\n    return s + "-" + str(a) + "y", a + 1\n'
    got = [m.source for m in function_mutants(src, "f", limit=100, seed=0,
                                              operators=("arithmetic_swap",))]
    assert got == [src.replace("a + 1", "a - 1")]


def test_wrong_variable_respects_kind_and_binding_order():
    src = ("def f(n, m, text):\n    k = len(text)\n    later = 3\n"
           "    return n + k, text\n")
    sub = {(m.params["from"], m.params["to"]) for m in
           function_mutants(src, "f", limit=1000, seed=0, operators=("wrong_variable",))}
    # k (int) and later (int) may stand in for each other where bound; n/m/text are unknown
    assert ("k", "later") in sub and ("k", "text") not in sub and ("text", "k") not in sub
    assert ("n", "m") in sub and ("text", "n") in sub
    assert ("text", "later") not in sub


def test_combined_pairs_two_operators_without_overlap():
    fn = FunctionContext(CORE, "clamp")
    combos = OPERATORS["combined"](fn)
    assert combos
    for c in combos[:50]:
        ops = [p["operator"] for p in c.params["parts"]]
        assert len(ops) == 2 and ops[0] != ops[1]
        mutated = apply_site(CORE, c)
        ast.parse(mutated)
        reference = make_patch({CORE_PATH: mutated}, {CORE_PATH: CORE})
        assert apply_patch({CORE_PATH: mutated}, reference) == {CORE_PATH: CORE}


def test_function_mutants_is_deterministic_sampled_and_distinct():
    a = function_mutants(CORE, "window", limit=5, seed=3)
    b = function_mutants(CORE, "window", limit=5, seed=3)
    c = function_mutants(CORE, "window", limit=5, seed=4)
    everything = function_mutants(CORE, "window", limit=10_000, seed=0)
    assert [m.source for m in a] == [m.source for m in b]
    assert len(a) == 5 and len({m.source for m in a}) == 5
    assert [m.source for m in a] != [m.source for m in c]
    assert {m.source for m in a} <= {m.source for m in everything}
    assert all(m.source != CORE and m.qualname == "window" for m in everything)
    assert all(isinstance(m.operator, str) and isinstance(m.params, dict) for m in a)
    assert {m.operator for m in everything} >= {"boundary_shift", "remove_statement",
                                               "slice_off_by_one", "wrong_return"}


def test_function_mutants_of_a_nested_function():
    src = ("def memoize(fn):\n    def decorate(key):\n        def wrapper(x):\n"
           "            return fn(x) + key\n        return wrapper\n    return decorate\n")
    ms = function_mutants(src, "memoize.decorate.wrapper", limit=100, seed=0)
    assert ms and all(m.source.count("\n") >= 5 for m in ms)
    assert {m.operator for m in ms} >= {"arithmetic_swap", "wrong_return"}
    assert all(m.source.splitlines()[:3] == src.splitlines()[:3] for m in ms)


def test_only_the_function_is_compiled_but_context_dependent_code_still_counts():
    # `nonlocal` does not compile outside its enclosing function: the whole-module
    # fallback must accept these mutants, and reject a mutant that really breaks.
    src = ("def counter():\n    count = 0\n\n    def bump(step):\n        nonlocal count\n"
           "        count += step\n        return count\n\n    return bump\n")
    ms = function_mutants(src, "counter.bump", limit=100, seed=0)
    assert {m.operator for m in ms} >= {"arithmetic_swap", "wrong_return"}
    for m in ms:
        compile(m.source, "m.py", "exec")


def test_function_mutants_method_qualname_and_unknown_function():
    ms = function_mutants(CORE, "Counter.bump", limit=100, seed=0)
    assert ms and all("def bump" in m.source for m in ms)
    with pytest.raises(KeyError):
        function_mutants(CORE, "nope", limit=1, seed=0)


def test_sites_enumeration_is_in_source_order():
    for op in SINGLE_OPERATORS:
        got = sites(CORE, "clamp", (op,))
        lines = [(s.params["line"], s.params["col"]) for s in got]
        assert lines == sorted(lines), op


def test_site_params_identify_a_site_uniquely():
    src = ('def f(text, a, b, c):\n    x = a + b + c\n'
           '    return text.replace("{", "{{").replace("}", "}}"), x\n')
    for source in (CORE, src):
        for q in function_names(source):
            got = sites(source, q)
            keys = [(s.operator, repr(sorted(s.params.items()))) for s in got]
            assert len(keys) == len(set(keys)), q


def test_seed_families_in_repo_mutate_cleanly():
    """Every operator's mutants of the real seed families compile (when they exist)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "data" / "seed_repos"
    modules = sorted(p for p in root.glob("*/*/*.py") if p.parent.name != "tests")
    if not modules:
        pytest.skip("no seed families checked out")
    for path in modules[:12]:
        src = path.read_text()
        for q in function_names(src)[:6]:
            for m in function_mutants(src, q, limit=20, seed=0):
                compile(m.source, str(path), "exec")
