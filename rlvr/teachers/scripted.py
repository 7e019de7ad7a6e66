"""A scripted teacher that debugs systematically, for demonstrations (SFT data).

It is a text engine bound to one episode (`ScriptedTeacher.for_task(task) -> chat(...)`) and
speaks exactly the policy's tool-call syntax (`rlvr.agent.tools.format_tool_call`). Per
episode it

1. runs the public tests;
2. localises from what the agent observes: the suspicious `file:line` list that
   `run_tests` prints (fault localisation over the public tests), failing-test tracebacks
   (source frames), the functions the failing assertions call and names in the
   instruction. Only with `hints=True` does it also rank by the synthesis provenance (file /
   function / operator / line — never the mutation's `from`/`to`): a student cannot see
   those, so demonstrations for SFT are made without them by default (issue "Learning I" §1);
3. views the suspect function (`view=True`; by default it edits the flagged line straight
   away: the line's text is in the run_tests output, and a small policy imitates fewer,
   shorter turns better);
4. tries candidate fixes: every single-site mutation of the suspect function
   (`rlvr.tasks.operators`: most bug operators are their own inverse) plus small
   line edits (unwrapping `not (...)`), ranked by the observed suspicious lines; each is an
   `edit` — line-addressed (`path`, `line`, a short `old` → `new`) when it changes one
   line — then `run_tests`; an edit that lowers the failure count is kept (two-bug tasks
   need two), otherwise reverted;
5. submits when the public tests pass, or when its turn budget runs out.

Its reasoning text states only what an observation showed (a line flagged by `run_tests`, a
function a traceback names) and what the next edit does; `reasoning="terse"` (default)
says only the latter, in a few words ("Flip a comparison."), so a demonstration asks the
student to copy nothing outside the tool call itself.

`noise` is the share of episodes in which it does what a sloppy engineer does: applies a
candidate that is *not* its best guess, glances at the tests and submits whatever it has.
Whether an episode is noisy is drawn from the episode's first sampling seed, so it is
reproducible.

What it may see: the task as `rlvr.agent.episode.teacher_view` gives it — the buggy repo and
public tests (which the agent sees too), the instruction and provenance hints. Hidden tests,
their ids and the reference patch are removed before it is bound, so no demonstration can
carry them.
"""
from __future__ import annotations

import ast
import functools
import random
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from rlvr import ast_parse
from rlvr.agent.fixes import fix_for
from rlvr.agent.observations import suspicious_lines
from rlvr.agent.prompt import TERSE_RUN_TESTS
from rlvr.agent.tools import format_tool_call, parse_action
from rlvr.toolcalls import DEFAULT_FORMAT, get_format
from rlvr.tasks.model import Task
from rlvr.tasks.operators import (OPERATORS, FunctionContext, compiles, find_function,
                                  function_names)
from rlvr.tasks.spans import SourceMap

VERSION = "2"

_FRAME = re.compile(r"^([\w./-]+\.py):(\d+): in (\w+)", re.M)
_FAILED = re.compile(r"^(?:FAILED|ERROR) ([\w./-]+\.py)::(\w+)", re.M)
_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_COUNTS = re.compile(r"(\d+) (failed|error|errors|passed)")
_EXIT = re.compile(r"\[pytest exit code (\d+)\]")
_NOT_WRAP = re.compile(r"\bnot \(")
# Which kind of candidate fix to try first among equally suspicious lines: the rarest, most
# telling edits first (a `not (...)` wrapper is a smell; `wrong_variable` has the most sites).
_TRY_ORDER = {"drop_negation": 0, "comparison_flip": 1, "boolean_swap": 2, "arithmetic_swap": 3,
              "drop_offset": 4, "boundary_shift": 5, "slice_off_by_one": 6, "wrong_return": 7,
              "return_name": 8, "negate_condition": 9, "swap_arguments": 10,
              "wrong_variable": 11}
_TOKEN = re.compile(r"\w+|[^\w\s]+|\s+")
# Mutation operators whose sites can undo an injected bug, most common first. Removing a
# statement never undoes one (no operator adds statements), so it is not a candidate.
CANDIDATE_OPERATORS = ("comparison_flip", "boundary_shift", "slice_off_by_one",
                       "arithmetic_swap", "boolean_swap", "negate_condition", "swap_arguments",
                       "wrong_variable", "wrong_return")


@dataclass
class Hints:
    """Localisation hints a teacher may use (file, function, operator, line — no fix)."""

    sites: list[tuple[str, str, str, int | None]] = field(default_factory=list)

    @classmethod
    def from_provenance(cls, prov: dict[str, Any]) -> "Hints":
        out = cls()
        params = prov.get("params") if isinstance(prov.get("params"), dict) else {}
        parts = params.get("parts") if isinstance(params.get("parts"), list) else None
        if parts:
            for p in parts:
                if isinstance(p, dict):
                    out.sites.append((str(p.get("file") or prov.get("file") or ""),
                                      str(p.get("function") or prov.get("function") or ""),
                                      str(p.get("operator") or ""), _int(p.get("line"))))
        elif prov.get("file") or prov.get("function"):
            out.sites.append((str(prov.get("file") or ""), str(prov.get("function") or ""),
                              str(prov.get("operator") or ""), _int(params.get("line"))))
        return out


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class Candidate:
    path: str
    new_source: str
    line: int
    why: str


class ScriptedTeacher:
    """Factory: one bound teacher per episode (`for_task`)."""

    name = "scripted"

    def __init__(self, noise: float = 0.0, max_turns: int = 12, hints: bool = False,
                 view: bool = False, reasoning: str = "terse", address: str = "line",
                 format: str = DEFAULT_FORMAT):
        if not 0.0 <= noise <= 1.0:
            raise ValueError("scripted teacher noise must be in [0, 1]")
        self.noise = noise
        self.max_turns = max_turns
        if reasoning not in ("terse", "explain"):
            raise ValueError("scripted teacher reasoning must be 'terse' or 'explain'")
        if address not in ("line", "suspect", "fix"):
            raise ValueError("scripted teacher address must be 'line', 'suspect' or 'fix'")
        self.hints = hints
        self.view = view
        self.reasoning = reasoning
        self.address = address
        # the policy's tool-call format: demonstrations are written (and read back) in it
        self.format = get_format(format).name
        # noise, hint use and style are part of every passport's policy_version
        self.policy_version = (f"scripted-v{VERSION}-noise{noise:g}-hints{int(hints)}"
                               f"-view{int(view)}-{reasoning}"
                               + (f"-{address}" if address != "line" else ""))

    def for_task(self, task: Task) -> "BoundTeacher":
        if task.hidden_tests or task.reference_patch:
            raise ValueError("the scripted teacher must be bound to teacher_view(task): it "
                             "may not see hidden tests or the reference")
        return BoundTeacher(task, self.noise, self.max_turns, self.policy_version,
                            hints=self.hints, view=self.view, terse=self.reasoning == "terse",
                            address=self.address, format=self.format)

    def close(self) -> None:
        """Nothing to release (the `Teacher` protocol: a rollout closes what it built)."""


class BoundTeacher:
    name = "scripted"

    def __init__(self, task: Task, noise: float, max_turns: int, policy_version: str, *,
                 hints: bool = False, view: bool = False, terse: bool = True,
                 address: str = "line", format: str = DEFAULT_FORMAT):
        self.format = format
        self.view = view
        self.address = address
        self.listed: list[tuple[str, int]] = []  # the last run_tests' suspicious lines
        self.terse = terse
        self.task = task
        self.noise = noise
        self.max_turns = max_turns
        self.policy_version = policy_version
        public = set(task.public_tests)
        self.files = {p: c for p, c in task.repo_files.items() if p.endswith(".py")}
        self.sources = {p for p in self.files if p not in public
                        and not p.split("/")[0] in {t.split("/")[0] for t in public}}
        self.hints = Hints.from_provenance(task.provenance) if hints else Hints()
        self.observed: list[tuple[str, int]] = []  # suspicious (path, line), best first
        self.observed_counts: list[tuple[int, int]] = []  # their (failing, passing) counts
        self.rng: random.Random | None = None
        self.noisy = False
        self.phase = "start"
        self.queue: list[Candidate] = []
        self.pending: tuple[str, str] = ("", "")  # (path, text) the edit in flight makes
        self.base: dict[str, str] = dict(self.files)  # the kept state candidates build on
        self.best_failures: int | None = None
        self.suspects: list[tuple[str, str]] = []

    def _write(self, name: str, args: dict[str, Any], reasoning: str = "") -> str:
        """One action in the policy's tool-call format."""
        return format_tool_call(name, args, reasoning, self.format)

    # ---- the TextEngine interface ------------------------------------------------------------
    def chat(self, messages: Sequence[dict], *, seed: int, max_tokens: int) -> str:
        if self.rng is None:
            self.rng = random.Random(seed)
            self.noisy = self.rng.random() < self.noise
        last = messages[-1]["content"] if messages[-1]["role"] == "tool" else ""
        if last and len(messages) > 1 and _called(messages[-2], "run_tests", self.format):
            self.listed = [(s.path, s.line) for s in suspicious_lines(last)]
        turns_used = sum(1 for m in messages if m["role"] == "assistant")
        return self._next(last, turns_used)

    # ---- the plan ----------------------------------------------------------------------------
    def _next(self, observation: str, turns_used: int) -> str:
        left = self.max_turns - turns_used  # including this one
        if self.phase == "start":
            self.phase = "tested_initial"
            return self._write("run_tests", {}, TERSE_RUN_TESTS if self.terse
                                    else "Run the public tests to see what fails.")
        if self.phase == "tested_initial":
            self.best_failures = _failures(observation)
            self._localise(observation)
            self.queue = self._candidates()
            if self.noisy and len(self.queue) > 1:
                pick = self.rng.randrange(1, len(self.queue))
                self.queue = [self.queue[pick]]
            if not self.suspects or left <= 1:
                return self._submit("I cannot localise the bug; submit as is.")
            if not self.view:
                self.phase = "viewed"
                return self._advance(left, "")
            path, func = self.suspects[0]
            self.phase = "viewed"
            start, end = function_lines(self.files[path], func)
            flagged = [n for p, n in self.observed if p == path and start <= n <= end]
            why = (f"run_tests flags {path}:{flagged[0]}, in `{func}`; read it." if flagged
                   else f"The failing tests lead to `{func}` in {path}; read it.")
            return self._write("view", {"path": path, "start": start, "end": end}, why)
        if self.phase == "applied":
            path, target = self.pending
            if not observation.startswith("edited"):
                return self._advance(left, "That edit did not apply; try another candidate.")
            self.files[path] = target
            self.phase = "tested"
            return self._write("run_tests", {}, "Check." if self.terse
                                    else "Check the change against the public tests.")
        if self.phase == "tested":
            failures = _failures(observation)
            if failures == 0:
                return self._submit("The public tests pass; submit the fix.")
            if self.noisy:
                return self._submit("Good enough; submit this fix.")
            if (failures is not None and self.best_failures is not None
                    and failures < self.best_failures):
                self.best_failures = failures
                self.base = dict(self.files)  # keep it: a two-bug task needs two fixes
                self.queue = self._candidates()
                return self._advance(left, f"Fewer failures ({failures}) now; keep the change "
                                           "and look for the rest.")
            return self._advance(left, "That did not fix it.")
        if self.phase == "reverting":
            path, target = self.pending
            if observation.startswith("edited"):
                self.files[path] = target
            return self._advance(left, "Back to the previous state.")
        # phase "viewed" (and anything else): go through the candidates
        return self._advance(left, "")

    def _submit(self, why: str) -> str:
        self.phase = "submitted"
        return self._write("submit", {}, why.strip())

    def _next_candidate(self) -> Candidate | None:
        while self.queue:
            cand = self.queue.pop(0)
            if cand.path in self.base and cand.new_source != self.base[cand.path]:
                return cand
        return None

    def _advance(self, left: int, why: str) -> str:
        """Move the workspace to the next candidate: one edit from the current state when it
        is small, else undo the failed change first. Each attempt needs an edit, a test run
        and still room to submit."""
        if left < 3:
            return self._submit(f"{why} Out of turns; submit the current state.")
        cand = self._next_candidate()
        if cand is None:
            return self._submit(f"{why} No candidate fix left; submit the current state.")
        dirty = [p for p in sorted(self.files) if self.files[p] != self.base.get(p)]
        # from a failed try straight to the next one in one small edit — except under
        # `address: fix`, where each edit is one named fix: undo first
        direct = not dirty or (self.address != "fix" and dirty == [cand.path] and line_edit(
            self.files[cand.path], cand.new_source)[0].count("\n") <= 6)
        if direct:
            self.pending = (cand.path, cand.new_source)
            self.phase = "applied"
            reason = (f"{why} {cand.why[:1].upper()}{cand.why[1:]}." if self.terse
                      else f"{why} Try a fix in {cand.path} line {cand.line} ({cand.why}).")
            return self._write("edit", self._edit_args(cand.path, cand.new_source),
                                    reason.strip())
        if left < 4:
            return self._submit(f"{why} Out of turns; submit the current state.")
        self.queue.insert(0, cand)
        path = dirty[0]
        self.pending = (path, self.base[path])
        self.phase = "reverting"
        return self._write("edit", self._edit_args(path, self.base[path]),
                                f"{why} Undo the change first.".strip())

    def _edit_args(self, path: str, target: str) -> dict[str, Any]:
        """`edit_args`, addressed by suspect rank when the teacher addresses so and the line
        is one the last run_tests listed (else by path and line, as always)."""
        args = edit_args(path, self.files[path], target)
        if self.address == "line" or "line" not in args or (path, args["line"]) not in self.listed:
            return args
        rank = self.listed.index((path, args["line"])) + 1
        if self.address == "fix":
            i = args["line"] - 1
            found = fix_for(self.files[path].split("\n")[i], target.split("\n")[i])
            if found is not None:
                fix, nth = found
                return {"suspect": rank, "fix": fix, **({"nth": nth} if nth > 1 else {})}
        return {"suspect": rank, "old": args["old"], "new": args["new"]}

    # ---- localisation ----------------------------------------------------------------------
    def _localise(self, output: str) -> None:
        """Suspect functions, most likely first: hinted functions, then functions the failure
        evidence names (source frames, calls in failing tests and assertions, the
        instruction) — those in hinted files first — then the rest of the hinted files."""
        defs = self._definitions()
        found = [s for s in suspicious_lines(output) if s.path in self.sources]
        self.observed = [(s.path, s.line) for s in found]
        self.observed_counts = [(s.failing, s.passing) for s in found]
        flagged = [(p, q) for p, n in self.observed
                   for q in [_function_at(self.files[p], n)] if q]
        evidence: list[tuple[str, str]] = []
        for m in _FRAME.finditer(output):
            path, func = m.group(1), m.group(3)
            evidence += [d for d in defs.get(func, []) if d[0] == path]
        names: list[str] = []
        for m in _FAILED.finditer(output):
            names += _test_calls(self.files.get(m.group(1), ""), m.group(2))
        for line in output.splitlines():
            if line.startswith(("E ", ">")) or "assert " in line:
                names += _CALL.findall(line)
        names += re.findall(r"`(\w+)`", self.task.instruction)
        names += _CALL.findall(self.task.instruction)
        for name in names:
            evidence += defs.get(name, [])
        hinted = [(p, f) for p, f, _o, _l in self.hints.sites
                  if any(d == (p, f) for ds in defs.values() for d in ds)]
        files = {p for p, _f, _o, _l in self.hints.sites if p in self.sources}
        in_files = [e for e in evidence if e[0] in files]
        rest = [e for e in evidence if e[0] not in files]
        fallback = [d for name in sorted(defs) for d in defs[name] if d[0] in files
                    and "." not in name]
        fallback.sort(key=lambda d: function_lines(self.files[d[0]], d[1])[0])
        self.suspects = list(dict.fromkeys(hinted + flagged + in_files + rest + fallback))

    def _definitions(self) -> dict[str, list[tuple[str, str]]]:
        """function name (and qualname) -> [(path, qualname)] over the source files."""
        out: dict[str, list[tuple[str, str]]] = {}
        for path in sorted(self.sources):
            try:
                names = function_names(self.files[path])
            except SyntaxError:
                continue
            for q in names:
                for key in {q, q.split(".")[-1]}:
                    out.setdefault(key, []).append((path, q))
        return out

    def _candidates(self) -> list[Candidate]:
        hinted_ops = {op for _p, _f, op, _l in self.hints.sites if op}
        hinted_lines = {(p, line) for p, _f, _o, line in self.hints.sites if line}
        groups = list(dict.fromkeys(self.observed_counts))
        observed_rank = {site: groups.index(counts)
                         for site, counts in zip(self.observed, self.observed_counts)}

        def line_rank(path: str, line: int) -> int:
            """Hinted lines first (hints on), then the lines run_tests flagged, by score group:
            lines run by the same failing / passing tests are equally suspicious."""
            if (path, line) in hinted_lines:
                return -1
            return observed_rank.get((path, line), len(groups))

        anchors = hinted_lines | set(self.observed)
        # equally ranked candidates are tried in an order drawn from the episode's seed, so the
        # G samples of a group search differently (diverse demonstrations, teacher pass@k > pass@1)
        draw = self.rng or random.Random(0)
        jitter = draw.random
        ranked: list[tuple[tuple, Candidate]] = []
        seen: set[tuple[str, str]] = set()
        for rank_fn, (path, func) in enumerate(self.suspects[:3]):
            source = self.files[path]
            try:
                fn = FunctionContext(source, func)
            except (KeyError, SyntaxError):
                continue
            for op in CANDIDATE_OPERATORS:
                if op not in OPERATORS:
                    continue
                for site in OPERATORS[op](fn):
                    if op == "wrong_return" and site.params.get("to") == "None":
                        continue  # `return None` is never the undo of an injected bug
                    new = SourceMap(source).apply(site.edits)
                    if new == source or (path, new) in seen or not compiles(new):
                        continue
                    seen.add((path, new))
                    line = site.params.get("line", fn.node.lineno)
                    ranked.append(((op not in hinted_ops, line_rank(path, line), rank_fn,
                                    _TRY_ORDER[op], _distance(line, anchors, path), jitter(), line,
                                    len(new)),
                                   Candidate(path, new, line, describe_fix(op))))
            offset_ops = hinted_ops & {"boundary_shift", "slice_off_by_one"}
            for node in ast.walk(fn.node):
                # `x + 1` -> `x`: the natural undo of an injected off-by-one
                if (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub))
                        and isinstance(node.right, ast.Constant)
                        and type(node.right.value) is int):
                    m = SourceMap(source)
                    s, e = m.span(node)
                    new = (m.data[:s] + m.text(node.left).encode() + m.data[e:]).decode()
                    if (path, new) in seen or not compiles(new):
                        continue
                    seen.add((path, new))
                    ranked.append(((not offset_ops, line_rank(path, node.lineno), rank_fn,
                                    _TRY_ORDER["drop_offset"],
                                    _distance(node.lineno, anchors, path), jitter(), node.lineno,
                                    len(new)),
                                   Candidate(path, new, node.lineno, "drop an offset")))
            names = _local_names(fn.node)
            for node in ast.walk(fn.node):
                # `return None` where a value was returned: try the function's local names
                if (isinstance(node, ast.Return) and isinstance(node.value, ast.Constant)
                        and node.value.value is None):
                    m = SourceMap(source)
                    s, e = m.span(node.value)
                    for k, name in enumerate(names):
                        new = (m.data[:s] + name.encode() + m.data[e:]).decode()
                        if (path, new) in seen or not compiles(new):
                            continue
                        seen.add((path, new))
                        ranked.append(((not hinted_ops & {"wrong_return"},
                                        line_rank(path, node.lineno), rank_fn,
                                        _TRY_ORDER["return_name"] + k / 100,
                                        _distance(node.lineno, anchors, path), jitter(),
                                        node.lineno, len(new)),
                                       Candidate(path, new, node.lineno,
                                                 f"return `{name}` instead of None")))
            lines = source.split("\n")
            for no in range(fn.node.lineno, (fn.node.end_lineno or fn.node.lineno) + 1):
                text = lines[no - 1]
                m = _NOT_WRAP.search(text)
                if m and text.rstrip().endswith(")"):
                    fixed = text[:m.start()] + text[m.end():].rstrip()[:-1]
                    new = "\n".join(lines[:no - 1] + [fixed] + lines[no:])
                    if (path, new) not in seen and compiles(new):
                        seen.add((path, new))
                        ranked.append(((not hinted_ops & {"negate_condition", "wrong_return"},
                                        line_rank(path, no), rank_fn,
                                        _TRY_ORDER["drop_negation"],
                                        _distance(no, anchors, path), jitter(), no, len(new)),
                                       Candidate(path, new, no, "drop a negation")))
        ranked.sort(key=lambda x: x[0])
        return [c for _, c in ranked if self.address != "fix" or self._one_named_fix(c)]

    def _one_named_fix(self, cand: Candidate) -> bool:
        """`address: fix`: is `cand` an edit the student can make without copying — one
        named fix (rlvr.agent.fixes) of one line the last run_tests listed? Only those are
        tried, so every demonstration is copy-free."""
        one = _changed_line(self.files[cand.path], cand.new_source)
        return (one is not None and (cand.path, one[0] + 1) in self.listed
                and fix_for(one[1], one[2]) is not None)


def _local_names(fn: ast.AST) -> list[str]:
    """Names a function binds (assignment targets, loop variables, then parameters), the
    most recently bound first: the likely values of a lost `return`."""
    bound: list[str] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.append(node.id)
    args = fn.args  # type: ignore[attr-defined]
    params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)
              if a.arg not in ("self", "cls")]
    return list(dict.fromkeys([*reversed(bound), *params]))


def _distance(line: int, hinted: set[tuple[str, int]], path: str) -> int:
    lines = [h for p, h in hinted if p == path]
    return min((abs(line - h) for h in lines), default=0)


def describe_fix(op: str) -> str:
    """What undoing a mutation of operator `op` does, in words a reasoning line can use."""
    return {"comparison_flip": "flip a comparison", "boundary_shift": "shift a bound by one",
            "arithmetic_swap": "swap an arithmetic operator",
            "boolean_swap": "swap and/or", "negate_condition": "negate a condition",
            "swap_arguments": "swap two arguments", "remove_statement": "drop a statement",
            "wrong_return": "change the returned value", "slice_off_by_one": "shift a slice bound",
            "wrong_variable": "use another variable"}.get(op, op.replace("_", " "))


def _failures(output: str) -> int | None:
    """Failed + errored tests in a run_tests observation (0 when pytest exited 0)."""
    m = _EXIT.search(output)
    if m and m.group(1) == "0":
        return 0
    counts = {kind: int(n) for n, kind in _COUNTS.findall(output)}
    if not counts:
        return None
    return counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0)


def _test_calls(test_source: str, test_name: str) -> list[str]:
    """Names called inside test function `test_name` of a public test file."""
    try:
        tree = ast_parse.parse(test_source)
    except SyntaxError:
        return []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == test_name:
            return [n.func.id if isinstance(n.func, ast.Name) else n.func.attr
                    for n in ast.walk(node) if isinstance(n, ast.Call)
                    and isinstance(n.func, (ast.Name, ast.Attribute))]
    return []


def function_lines(source: str, qualname: str) -> tuple[int, int]:
    """1-based (first, last) line of function `qualname` in `source` (the whole file when
    it is not found or does not parse)."""
    try:
        node = find_function(_parsed(source), qualname)
        return node.lineno, node.end_lineno or node.lineno
    except (KeyError, SyntaxError):
        return 1, max(1, source.count("\n"))


@functools.lru_cache(maxsize=64)
def _parsed(source: str) -> ast.Module:
    """The module tree of `source`, read-only: one parse for the many line spans a teacher
    asks of the same file (`_function_at` asks for every function)."""
    return ast_parse.parse(source)


def _function_at(source: str, line: int) -> str | None:
    """The qualname of the innermost function of `source` spanning `line`, if any."""
    try:
        names = function_names(source)
    except SyntaxError:
        return None
    spans = [(q, *function_lines(source, q)) for q in names]
    inside = [(e - s, q) for q, s, e in spans if s <= line <= e]
    return min(inside)[1] if inside else None


def _called(message: Mapping[str, Any], tool: str, format: str = DEFAULT_FORMAT) -> bool:
    """Was `message` an assistant turn calling `tool`?"""
    if message.get("role") != "assistant":
        return False
    call = parse_action(message.get("content") or "", format).call
    return call is not None and call.name == tool


def edit_args(path: str, current: str, target: str) -> dict[str, Any]:
    """The `edit` arguments turning `current` into `target`: line-addressed (`line`, and the
    shortest run of whole tokens `old` -> `new` that occurs once in that line) when exactly
    one line changes, else an exact-span replacement (`line_edit`)."""
    one = _changed_line(current, target)
    if one is not None:
        i, before, after = one
        old, new = _token_diff(before, after)
        if old:
            return {"path": path, "line": i + 1, "old": old, "new": new}
    old, new, _ = line_edit(current, target)
    return {"path": path, "old": old, "new": new}


def _changed_line(current: str, target: str) -> tuple[int, str, str] | None:
    """(index, line before, line after) when `target` is `current` with exactly one line
    changed (and none added or removed), else None: the edits a line number can address."""
    a, b = current.split("\n"), target.split("\n")
    changed = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    if len(a) == len(b) and len(changed) == 1:
        i = changed[0]
        return i, a[i], b[i]
    return None


def _token_diff(before: str, after: str) -> tuple[str, str]:
    """(old, new): the differing middle of two lines in whole tokens (words, operator runs,
    blanks), widened one token at a time until `old` is non-blank and occurs exactly once in
    `before`; ("", "") if no such span exists."""
    ta, tb = _TOKEN.findall(before), _TOKEN.findall(after)
    lo, hi_a, hi_b = _differing_middle(ta, tb)
    while True:
        old = "".join(ta[lo:hi_a])
        if old.strip() and before.count(old) == 1:
            return old, "".join(tb[lo:hi_b])
        if lo > 0:
            lo -= 1
        elif hi_a < len(ta):
            hi_a, hi_b = hi_a + 1, hi_b + 1
        else:
            return "", ""


def _differing_middle(a: Sequence[str], b: Sequence[str]) -> tuple[int, int, int]:
    """(lo, hi_a, hi_b): `a[lo:hi_a]` became `b[lo:hi_b]`, once the common prefix and the
    common suffix (not overlapping the prefix) are trimmed off."""
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    j = 0
    while j < min(len(a), len(b)) - i and a[len(a) - 1 - j] == b[len(b) - 1 - j]:
        j += 1
    return i, len(a) - j, len(b) - j


def line_edit(current: str, target: str) -> tuple[str, str, int]:
    """(old, new, first line) turning `current` into `target` with one exact-span
    replacement: the changed lines, widened until `old` occurs exactly once."""
    a, b = current.split("\n"), target.split("\n")
    lo, hi_a, hi_b = _differing_middle(a, b)

    def span(lines: list[str], lo: int, hi: int) -> str:
        # whole lines with their newlines, so that inserting / deleting lines works
        return "".join(x + "\n" for x in lines[lo:hi]) if hi < len(lines) else \
            "\n".join(lines[lo:hi])

    while True:
        old = span(a, lo, hi_a)
        if old.strip() and current.count(old) == 1:
            break
        if lo > 0:
            lo -= 1
        elif hi_a < len(a):
            hi_a += 1
            hi_b += 1
        else:
            break
    return old, span(b, lo, hi_b), lo + 1
