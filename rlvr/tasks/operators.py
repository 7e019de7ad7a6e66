"""Bug-injection operators over one function's AST (SPEC §2).

Each operator is a small named unit in `OPERATORS` (name -> `Operator`), in the spirit of
verl's `core_algos` registry: `sites(fn)` enumerates, deterministically and in source order,
every place in one function where that bug can be injected, as a `Site` = JSON-able params
(which node, what it becomes) + byte-span `Edit`s. Applying the edits touches only the
mutated node's span (see spans.py), so everything else in the file stays byte-identical and
the reference patch mutant -> seed is minimal.

Public API used by curation to build "other mutants of the same function" as wrong
solutions: `function_mutants(source, qualname, *, limit, seed) -> list[Mutant]`.
"""
from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Iterator

from rlvr import ast_parse
from rlvr.tasks.spans import Edit, SourceMap, overlaps


@dataclass(frozen=True)
class Site:
    """One injectable bug: `params` says where and what (line/col .. end_line/end_col: the
    mutated node's span, 1-based lines and 0-based byte columns), `edits` how."""

    operator: str
    params: dict
    edits: tuple[Edit, ...]


@dataclass(frozen=True)
class Mutant:
    """A whole mutated file. `params` identify the site(s) within `qualname`."""

    operator: str
    params: dict
    source: str
    qualname: str = ""
    edits: tuple[Edit, ...] = field(default=(), repr=False, compare=False)


class FunctionContext:
    """One function of one file: its node, the byte map, and scope facts operators need."""

    def __init__(self, source: str, qualname: str):
        # One parse and byte map per module, shared by the contexts of all its functions
        # (enumeration, sibling mutants and curation's wrong solutions each walk every
        # function of a module); operators only read the tree.
        self.tree, self.map = _parsed(source)
        self.qualname = qualname
        self.node = find_function(self.tree, qualname)
        body = self.node.body
        if body and _is_docstring(body[0]):
            body = body[1:]
        self.body = body
        self._nodes: list[ast.AST] | None = None

    # ---- traversal ---------------------------------------------------------------------
    def nodes(self) -> list[ast.AST]:
        """Every node in the function body (nested scopes included), in source order."""
        if self._nodes is None:  # every operator asks, several times
            out = []
            for stmt in self.body:
                out.extend(ast.walk(stmt))
            self._nodes = sorted((n for n in out if hasattr(n, "lineno")),
                                 key=lambda n: (n.lineno, n.col_offset, -n.end_lineno,
                                                -n.end_col_offset, type(n).__name__))
        return list(self._nodes)

    def of_type(self, *types: type) -> list:
        return [n for n in self.nodes() if isinstance(n, types)]

    def blocks(self) -> Iterator[list[ast.stmt]]:
        """Every statement list (body / orelse / finalbody / handler body) in the function."""
        yield self.body
        for stmt in self.body:
            for node in ast.walk(stmt):
                for name in ("body", "orelse", "finalbody"):
                    block = getattr(node, name, None)
                    if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                        yield block  # match_case bodies too: ast.walk visits the cases

    def at(self, node: ast.AST) -> dict:
        """Where a site is: the node's full span (a start alone is ambiguous: in
        `s.replace(a, b).replace(c, d)` or `a + b + c` two nodes start at the same place)."""
        return {"line": node.lineno, "col": node.col_offset,
                "end_line": node.end_lineno, "end_col": node.end_col_offset}


@lru_cache(maxsize=256)
def _parsed(source: str) -> tuple[ast.Module, SourceMap]:
    return ast_parse.parse(source), SourceMap(source)


def _is_docstring(stmt: ast.stmt) -> bool:
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str))


def find_function(tree: ast.Module, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """The function `qualname` of a parsed module: "f", "Class.method", or a nested def
    ("outer.inner", "Class.method.helper")."""
    scope: list[ast.stmt] = tree.body
    parts = qualname.split(".")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        wanted = (ast.FunctionDef, ast.AsyncFunctionDef) if last else (
            ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        match = [n for n in scope if isinstance(n, wanted) and n.name == part]
        if not match:
            raise KeyError(f"no function {qualname!r} in module")
        node = match[-1]  # a later definition shadows an earlier one
        scope = node.body
    return node


def function_names(source: str) -> list[str]:
    """Qualnames of the module-level functions and class methods of a file, in source order."""
    tree = ast_parse.parse(source)
    out = []

    def walk(scope, prefix):
        for node in scope:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append(prefix + node.name)
            elif isinstance(node, ast.ClassDef):
                walk(node.body, f"{prefix}{node.name}.")

    walk(tree.body, "")
    return list(dict.fromkeys(out))


# ---- registry ------------------------------------------------------------------------------
Operator = Callable[[FunctionContext], list[Site]]
OPERATORS: dict[str, Operator] = {}


def register(name: str):
    def deco(fn: Operator) -> Operator:
        fn.operator_name = name  # type: ignore[attr-defined]
        OPERATORS[name] = fn
        return fn

    return deco


def _site(name: str, params: dict, *edits: Edit) -> Site:
    return Site(name, params, tuple(edits))


# ---- comparison flip -----------------------------------------------------------------------
_CMP_FLIP = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==",
             "in": "not in", "not in": "in", "is": "is not", "is not": "is"}
_CMP_TOKEN = re.compile(r"<=|>=|==|!=|<|>|not\s+in|is\s+not|in|is")


@register("comparison_flip")
def comparison_flip(fn: FunctionContext) -> list[Site]:
    """`a < b` -> `a <= b`, `==` <-> `!=`, `in` <-> `not in`, `is` <-> `is not` (one
    site per operator of a chained comparison)."""
    sites = []
    for node in fn.of_type(ast.Compare):
        operands = [node.left, *node.comparators]
        for i in range(len(node.ops)):
            s, e, tok = fn.map.find_token(fn.map.span(operands[i])[1],
                                          fn.map.span(operands[i + 1])[0], _CMP_TOKEN)
            op = " ".join(tok.split())
            new = _CMP_FLIP[op]
            sites.append(_site("comparison_flip",
                               {**fn.at(node), "index": i, "from": op, "to": new},
                               Edit(s, e, new)))
    return sites


# ---- boundary +-1 ------------------------------------------------------------------------
def _int_constant(node: ast.AST) -> int | None:
    """The value of an int literal (`3`, `-1`), else None (bools are not ints here)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant) and type(node.operand.value) is int):
        return -node.operand.value
    return None


def _shift(fn: FunctionContext, node: ast.AST, delta: int) -> str:
    value = _int_constant(node)
    if value is not None:
        return str(value + delta)
    return f"({fn.map.text(node)}) {'+' if delta > 0 else '-'} 1"


def _slice_bounds(fn: FunctionContext) -> set[int]:
    return {id(b) for s in fn.of_type(ast.Slice) for b in (s.lower, s.upper, s.step) if b}


@register("boundary_shift")
def boundary_shift(fn: FunctionContext) -> list[Site]:
    """An integer literal k -> k+1 / k-1, and a non-literal `range(...)` bound b -> b+-1.
    Slice bounds belong to `slice_off_by_one`."""
    sites = []
    in_slice = _slice_bounds(fn)
    range_args = set()
    for call in fn.of_type(ast.Call):
        if isinstance(call.func, ast.Name) and call.func.id == "range":
            range_args.update(id(a) for a in call.args if not isinstance(a, ast.Starred))
    covered = set()
    for node in fn.nodes():
        if id(node) in in_slice or id(node) in covered:
            continue
        value = _int_constant(node)
        is_range_bound = id(node) in range_args
        if value is None and not is_range_bound:
            continue
        if isinstance(node, ast.UnaryOp):
            covered.add(id(node.operand))
        s, e = fn.map.span(node)
        for delta in (1, -1):
            new = _shift(fn, node, delta)
            params = {**fn.at(node), "delta": delta, "from": fn.map.text(node), "to": new}
            sites.append(_site("boundary_shift", params, Edit(s, e, new)))
    return sites


# ---- arithmetic operator swap ------------------------------------------------------------
_ARITH_SWAP = {"+": "-", "-": "+", "*": "//", "/": "*", "//": "*", "%": "//", "**": "*"}
_ARITH_TOKEN = re.compile(r"\*\*=?|//=?|[-+*/%]=?")
_ARITH_TYPES = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
_SEQUENCE_KINDS = ("str", "bytes", "list", "tuple")


def _stringy(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)))


@register("arithmetic_swap")
def arithmetic_swap(fn: FunctionContext) -> list[Site]:
    """`+` <-> `-`, `*` -> `//`, `/` -> `*`, `//` -> `*`, `%` -> `//`, `**` -> `*`, also in
    augmented assignments. Operations on strings / sequences (`"%s" % x`, `s + "-"`,
    `parts + [x]`, as far as a coarse static type says) are left alone: swapping there only
    makes a TypeError, not a plausible arithmetic bug."""
    sites = []
    names = _local_names(fn)

    def sequence_like(node: ast.AST) -> bool:
        if isinstance(node, ast.Name) and node.id in names:
            return names[node.id][1] in _SEQUENCE_KINDS
        return _stringy(node) or _kind(node) in _SEQUENCE_KINDS

    for node in fn.nodes():
        if isinstance(node, ast.BinOp) and isinstance(node.op, _ARITH_TYPES):
            if sequence_like(node.left) or sequence_like(node.right):
                continue
            gap = (fn.map.span(node.left)[1], fn.map.span(node.right)[0])
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, _ARITH_TYPES):
            if sequence_like(node.value) or sequence_like(node.target):
                continue
            gap = (fn.map.span(node.target)[1], fn.map.span(node.value)[0])
        else:
            continue
        s, e, tok = fn.map.find_token(*gap, _ARITH_TOKEN)
        aug = tok.endswith("=")
        op = tok[:-1] if aug else tok
        new = _ARITH_SWAP[op] + ("=" if aug else "")
        sites.append(_site("arithmetic_swap", {**fn.at(node), "from": tok, "to": new},
                           Edit(s, e, new)))
    return sites


# ---- boolean operator swap -----------------------------------------------------------------
_BOOL_TOKEN = re.compile(r"and|or")


@register("boolean_swap")
def boolean_swap(fn: FunctionContext) -> list[Site]:
    """`a and b` <-> `a or b` (every operator of one flat chain)."""
    sites = []
    for node in fn.of_type(ast.BoolOp):
        edits = []
        for left, right in zip(node.values, node.values[1:]):
            s, e, tok = fn.map.find_token(fn.map.span(left)[1], fn.map.span(right)[0],
                                          _BOOL_TOKEN)
            edits.append(Edit(s, e, "or" if tok == "and" else "and"))
        old = "and" if isinstance(node.op, ast.And) else "or"
        sites.append(_site("boolean_swap",
                           {**fn.at(node), "from": old, "to": "or" if old == "and" else "and"},
                           *edits))
    return sites


# ---- negated condition ---------------------------------------------------------------------
@register("negate_condition")
def negate_condition(fn: FunctionContext) -> list[Site]:
    """The test of an `if` / `elif` / `while` / conditional expression / comprehension
    filter: `t` -> `not (t)`, and `not t` -> `t`."""
    tests = []
    for node in fn.nodes():
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            tests.append(node.test)
        elif isinstance(node, ast.comprehension):
            tests.extend(node.ifs)
    sites = []
    for test in sorted(tests, key=lambda t: (t.lineno, t.col_offset)):
        s, e = fn.map.span(test)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            new = fn.map.text(test.operand)
            if isinstance(test.operand, (ast.BoolOp, ast.IfExp, ast.NamedExpr, ast.Lambda)):
                new = f"({new})"
            how = "drop_not"
        else:
            new = f"not ({fn.map.text(test)})"
            how = "add_not"
        sites.append(_site("negate_condition", {**fn.at(test), "how": how}, Edit(s, e, new)))
    return sites


# ---- swapped call arguments ----------------------------------------------------------------
@register("swap_arguments")
def swap_arguments(fn: FunctionContext) -> list[Site]:
    """Two adjacent positional arguments of a call trade places: `f(a, b)` -> `f(b, a)`."""
    sites = []
    for call in fn.of_type(ast.Call):
        args = call.args
        for i in range(len(args) - 1):
            a, b = args[i], args[i + 1]
            if isinstance(a, ast.Starred) or isinstance(b, ast.Starred):
                continue
            ta, tb = fn.map.text(a), fn.map.text(b)
            if ta == tb:
                continue
            (sa, ea), (sb, eb) = fn.map.span(a), fn.map.span(b)
            sites.append(_site("swap_arguments", {**fn.at(call), "index": i},
                               Edit(sa, ea, tb), Edit(sb, eb, ta)))
    return sites


# ---- removed statement ---------------------------------------------------------------------
_REMOVABLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Raise, ast.Continue,
              ast.Break, ast.Delete)


def _removable(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Expr):
        return not _is_docstring(stmt) and not isinstance(stmt.value, ast.Constant)
    if isinstance(stmt, ast.AnnAssign):
        return stmt.value is not None
    if isinstance(stmt, ast.If):
        # a guard clause: `if cond: return/raise/continue/break` with no else
        return (not stmt.orelse and len(stmt.body) == 1
                and isinstance(stmt.body[0], (ast.Return, ast.Raise, ast.Continue, ast.Break)))
    return isinstance(stmt, _REMOVABLE)


@register("remove_statement")
def remove_statement(fn: FunctionContext) -> list[Site]:
    """Delete an assignment, call statement, raise, break/continue, or guard clause. Whole
    lines go when the statement owns them; a block's only statement becomes `pass`."""
    sites = []
    m = fn.map
    for block in fn.blocks():
        for stmt in block:
            if not _removable(stmt):
                continue
            s, e = m.span(stmt)
            first, last = m.line_starts[stmt.lineno - 1], m.line_starts[stmt.end_lineno]
            before = m.data[first:s]
            after = m.data[e:last]
            trailing = after.strip()
            owns_lines = not before.strip() and (not trailing or trailing.startswith(b"#"))
            if len(block) > 1 and owns_lines:
                edit = Edit(first, last, "")
            else:
                edit = Edit(s, e, "pass")
            kind = type(stmt).__name__.lower()
            sites.append(_site("remove_statement", {**fn.at(stmt), "statement": kind}, edit))
    return sorted(sites, key=lambda x: (x.params["line"], x.params["col"]))


# ---- wrong return value --------------------------------------------------------------------
@register("wrong_return")
def wrong_return(fn: FunctionContext) -> list[Site]:
    """`return x` -> `return None`; a boolean literal flips; a boolean-valued expression
    (comparison, `and`/`or`, `not`) is negated. Bare `return` / `return None` are left."""
    sites = []
    for ret in fn.of_type(ast.Return):
        value = ret.value
        if value is None or (isinstance(value, ast.Constant) and value.value is None):
            continue
        if isinstance(value, ast.Constant) and isinstance(value.value, bool):
            new = str(not value.value)
        elif isinstance(value, (ast.Compare, ast.BoolOp)) or (
                isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not)):
            new = f"not ({fn.map.text(value)})"
        else:
            new = "None"
        s, e = fn.map.span(value)
        sites.append(_site("wrong_return", {**fn.at(ret), "to": new if new in
                                            ("None", "True", "False") else "negated"},
                           Edit(s, e, new)))
    return sites


# ---- off-by-one slice bound ----------------------------------------------------------------
@register("slice_off_by_one")
def slice_off_by_one(fn: FunctionContext) -> list[Site]:
    """A slice's start or stop bound b -> b+1 / b-1 (`s[i:j]` -> `s[i:j + 1]`)."""
    sites = []
    for sl in fn.of_type(ast.Slice):
        for bound in ("lower", "upper"):
            node = getattr(sl, bound)
            if node is None:
                continue
            s, e = fn.map.span(node)
            for delta in (1, -1):
                new = _shift(fn, node, delta)
                sites.append(_site("slice_off_by_one",
                                   {**fn.at(node), "bound": bound, "delta": delta},
                                   Edit(s, e, new)))
    return sites


# ---- wrong variable of the same type -------------------------------------------------------
_CALL_KINDS = {"len": "int", "int": "int", "sum": "num", "abs": "num", "round": "num",
               "str": "str", "repr": "str", "float": "float", "list": "list",
               "sorted": "list", "dict": "dict", "set": "set", "frozenset": "set",
               "tuple": "tuple", "bool": "bool", "ord": "int", "chr": "str"}
_ANNOTATION_KINDS = {"int": "int", "float": "float", "str": "str", "bool": "bool",
                     "list": "list", "List": "list", "dict": "dict", "Dict": "dict",
                     "set": "set", "Set": "set", "tuple": "tuple", "Tuple": "tuple"}


def _kind(node: ast.AST | None) -> str:
    """A coarse static type of an expression, or "?" when unknown."""
    if node is None:
        return "?"
    if isinstance(node, ast.Constant):
        if node.value is None:
            return "?"
        return {bool: "bool", int: "int", float: "float", str: "str",
                bytes: "bytes"}.get(type(node.value), "?")
    if _int_constant(node) is not None:
        return "int"
    if isinstance(node, (ast.List, ast.ListComp)):
        return "list"
    if isinstance(node, (ast.Dict, ast.DictComp)):
        return "dict"
    if isinstance(node, (ast.Set, ast.SetComp)):
        return "set"
    if isinstance(node, ast.Tuple):
        return "tuple"
    if isinstance(node, ast.JoinedStr):
        return "str"
    if isinstance(node, (ast.Compare, ast.BoolOp)) or (
            isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
        return "bool"
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name):
            return _CALL_KINDS.get(node.func.id, "?")
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("join", "lower", "upper",
                                                                       "strip", "format"):
            return "str"
    if isinstance(node, ast.BinOp):
        left, right = _kind(node.left), _kind(node.right)
        if left == right:
            return left
    return "?"


def _annotation_kind(node: ast.AST | None) -> str:
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Name):
        return _ANNOTATION_KINDS.get(node.id, "?")
    return "?"


def _scope_nodes(fn_node: ast.AST) -> Iterator[ast.AST]:
    """Nodes of the function's own scope (not of nested functions, classes, lambdas or
    comprehensions, whose names are not in scope at the function level)."""
    stack = list(reversed(fn_node.body))
    while stack:
        node = stack.pop()
        yield node
        for child in reversed(list(ast.iter_child_nodes(node))):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                  ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
                                  ast.GeneratorExp)):
                continue
            stack.append(child)


def _local_names(fn: FunctionContext) -> dict[str, tuple[int, str]]:
    """name -> (line where it is first bound, coarse kind) for parameters and locals."""
    node = fn.node
    names: dict[str, tuple[int, str]] = {}
    kinds: dict[str, set[str]] = {}
    a = node.args
    positional = [*a.posonlyargs, *a.args]
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    params = [*zip(positional, defaults), *zip(a.kwonlyargs, a.kw_defaults)]
    for arg, default in params:
        kind = _annotation_kind(arg.annotation)
        if kind == "?":
            kind = _kind(default)
        names[arg.arg] = (node.lineno, kind)
    if a.vararg:
        names[a.vararg.arg] = (node.lineno, "tuple")
    if a.kwarg:
        names[a.kwarg.arg] = (node.lineno, "dict")
    for sub in _scope_nodes(node):
        targets: list[tuple[ast.AST, str]] = []
        if isinstance(sub, ast.Assign):
            value_kind = _kind(sub.value)
            targets = [(t, value_kind) for t in sub.targets]
        elif isinstance(sub, ast.AnnAssign):
            targets = [(sub.target, _annotation_kind(sub.annotation))]
        elif isinstance(sub, ast.AugAssign):
            targets = [(sub.target, _kind(sub.value))]
        elif isinstance(sub, (ast.For, ast.AsyncFor)):
            it = sub.iter
            is_range = (isinstance(it, ast.Call) and isinstance(it.func, ast.Name)
                        and it.func.id == "range")
            targets = [(sub.target, "int" if is_range else "?")]
        elif isinstance(sub, ast.NamedExpr):
            targets = [(sub.target, _kind(sub.value))]
        for target, kind in targets:
            if isinstance(target, ast.Name):
                names.setdefault(target.id, (target.lineno, kind))
                kinds.setdefault(target.id, set()).add(kind)
            elif isinstance(target, (ast.Tuple, ast.List)):
                for elt in target.elts:
                    if isinstance(elt, ast.Name):
                        names.setdefault(elt.id, (elt.lineno, "?"))
                        kinds.setdefault(elt.id, set()).add("?")
    for name, seen in kinds.items():
        line, kind = names[name]
        if len(seen | {kind}) > 1:  # rebound with different kinds: unknown
            names[name] = (line, "?")
    return names


@register("wrong_variable")
def wrong_variable(fn: FunctionContext) -> list[Site]:
    """A read of a local/parameter `x` -> another local/parameter `y` of the same coarse
    type that is already bound there (`self`/`cls` never take part)."""
    names = _local_names(fn)
    for special in ("self", "cls"):
        names.pop(special, None)
    sites = []
    loads = [n for n in _scope_nodes(fn.node)
             if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in names]
    for use in sorted(loads, key=lambda n: (n.lineno, n.col_offset)):
        _, kind = names[use.id]
        s, e = fn.map.span(use)
        if fn.map.slice(s, e) != use.id:  # defensive: span must be exactly the name
            continue
        for other in sorted(names):
            line, other_kind = names[other]
            if other == use.id or other_kind != kind or line > use.lineno:
                continue
            if line == use.lineno and line != fn.node.lineno:
                continue  # bound on the same line: may not be bound yet at the read
            sites.append(_site("wrong_variable",
                               {**fn.at(use), "from": use.id, "to": other},
                               Edit(s, e, other)))
    return sites


# ---- combined bugs -------------------------------------------------------------------------
SINGLE_OPERATORS = tuple(OPERATORS)


def combine(parts: list[Site]) -> Site:
    """Several non-overlapping sites as one (a task carrying two bugs)."""
    edits = tuple(e for p in parts for e in p.edits)
    return Site("combined", {"parts": [{"operator": p.operator, **p.params} for p in parts]},
                edits)


@register("combined")
def combined(fn: FunctionContext) -> list[Site]:
    """Two bugs in one function: pairs of single sites from *different* operators whose
    edits do not overlap, in enumeration order (callers sample from them)."""
    singles = [s for name in SINGLE_OPERATORS for s in OPERATORS[name](fn)]
    out = []
    for i, a in enumerate(singles):
        for b in singles[i + 1:]:
            if a.operator != b.operator and not overlaps(a.edits, b.edits):
                out.append(combine([a, b]))
    return out


# ---- mutants -------------------------------------------------------------------------------
def sites(source: str, qualname: str, operators: tuple[str, ...] | None = None) -> list[Site]:
    """Every site of the named operators (default: all single-bug ones) in one function."""
    return _sites_of(FunctionContext(source, qualname), operators)


def _sites_of(fn: FunctionContext, operators: tuple[str, ...] | None) -> list[Site]:
    names = operators if operators is not None else SINGLE_OPERATORS
    out = []
    for name in names:
        if name not in OPERATORS:
            raise KeyError(f"unknown mutation operator {name!r} (known: {sorted(OPERATORS)})")
        out.extend(OPERATORS[name](fn))
    return out


def apply_site(source: str, site: Site) -> str:
    return SourceMap(source).apply(site.edits)


def compiles(source: str, filename: str = "<mutant>") -> bool:
    try:
        compile(source, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def _function_compiles(new_source: str, fn: FunctionContext, site: Site) -> bool:
    """Whether a mutant of `fn` compiles, checking only the mutated function's text when
    possible: parsing is the cost of enumerating mutants (a whole module per site), and a
    site's edits never leave its function. A function that does not compile on its own
    (e.g. a nested def with `nonlocal`) falls back to compiling the whole module."""
    m = fn.map
    first = min([fn.node.lineno] + [d.lineno for d in fn.node.decorator_list])
    start, end = m.line_starts[first - 1], m.line_starts[fn.node.end_lineno]
    if not all(start <= e.start and e.end <= end for e in site.edits):
        return compiles(new_source)
    delta = sum(len(e.text.encode("utf-8")) - (e.end - e.start) for e in site.edits)
    piece = new_source.encode("utf-8")[start:end + delta].decode("utf-8")
    if fn.node.col_offset:  # a method / nested def: give its indentation a block to live in
        piece = "if 1:\n" + piece
    return compiles(piece) or compiles(new_source)


def mutant_of(source: str, qualname: str, site: Site,
              fn: FunctionContext | None = None) -> Mutant | None:
    """The mutant for one site, or None when it does not change / does not compile."""
    new = apply_site(source, site)
    if new == source:
        return None
    ok = _function_compiles(new, fn, site) if fn is not None else compiles(new)
    if not ok:
        return None
    return Mutant(site.operator, site.params, new, qualname, site.edits)


def function_mutants(source: str, qualname: str, *, limit: int, seed: int,
                     operators: tuple[str, ...] | None = None) -> list[Mutant]:
    """Up to `limit` distinct, compiling single-bug mutants of function `qualname` of the
    file `source`, sampled reproducibly by `seed` (same inputs -> same list, in site order).

    Memoised: curation asks for the same function's mutants once per task of it."""
    return list(_function_mutants(source, qualname, limit, seed,
                                  tuple(operators) if operators is not None else None))


@lru_cache(maxsize=2048)
def _function_mutants(source: str, qualname: str, limit: int, seed: int,
                      operators: tuple[str, ...] | None) -> tuple[Mutant, ...]:
    seen = set()
    pool = []
    fn = FunctionContext(source, qualname)
    for site in _sites_of(fn, operators):
        mutant = mutant_of(source, qualname, site, fn)
        if mutant is None or mutant.source in seen:
            continue
        seen.add(mutant.source)
        pool.append(mutant)
    if len(pool) <= limit:
        return tuple(pool)
    keep = sorted(random.Random(seed).sample(range(len(pool)), limit))
    return tuple(pool[i] for i in keep)
