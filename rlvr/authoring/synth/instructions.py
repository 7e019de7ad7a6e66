"""Issue-style instructions written from the *observed* failure, never from the fix.

A bug report says what was run, what happened and what was expected. We get exactly that by
running the task's public failing test(s) on the buggy repo in the sandbox (`probe`) and
reading pytest's crash report: the failing test line, the assertion comparison
(observed vs expected) or the exception raised. The instruction never quotes library code,
so it cannot contain the reference fix; `write_instruction` still checks (SPEC §1 rule 6)
and falls back to a plainer report if a test line happens to equal a fixed line.
"""
from __future__ import annotations

import ast
import json
import re
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from rlvr import ast_parse
from rlvr.sandbox import Limits, Mount, envs

DRIVER = Path(__file__).with_name("probe_driver.py")
PROBE_ROOT = "/probe"  # mount point of the scratch dir inside the sandbox
_MAX_MESSAGE_LINES = 8
# `<Obj object at 0x7f...>` differs between runs; instructions must be byte-reproducible.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_MAX_MESSAGE_CHARS = 800


@dataclass(frozen=True)
class Failure:
    """How one test failed on the buggy state (as pytest reported it)."""

    test_id: str
    message: str       # crash message: "assert 3 == 4\n +  where 3 = g(1)" / "TypeError: ..."
    statement: str     # the failing line of the test itself
    when: str = "call"


@dataclass(frozen=True)
class ProbeJob:
    key: str
    repo_files: dict[str, str]
    tests: tuple[str, ...]    # public node ids, e.g. tests/test_x.py::test_y
    # What the agent's run_tests would add (rlvr.tasks.project_config.pytest_overrides) and
    # the pins of the task's environment layer: a probe sees the run the agent will see.
    pytest_args: tuple[str, ...] = ()
    dependencies: tuple[str, ...] = ()


def probe(sandbox, jobs: list[ProbeJob], *, workers: int = 1, timeout_s: float = 10.0
          ) -> dict[str, dict[str, Failure]]:
    """Run each job's tests on its repo in the sandbox -> {job key: {test id: Failure}}.

    Jobs are batched: one sandboxed interpreter per worker imports pytest once and forks per
    job, so the per-task cost is a fork + a small pytest session, not an interpreter start.
    """
    if not jobs:
        return {}
    by_env: dict[tuple[str, ...], list[ProbeJob]] = {}
    for job in jobs:  # one sandboxed interpreter sees one environment layer
        by_env.setdefault(job.dependencies, []).append(job)
    chunks = []
    for deps, group in sorted(by_env.items()):
        env_dir = envs.task_env(deps) if deps else None
        parts = [group[i::max(1, workers)] for i in range(max(1, workers))]
        chunks += [(env_dir, c) for c in parts if c]
    results: dict[str, dict[str, Failure]] = {}
    with ThreadPoolExecutor(max_workers=min(len(chunks), max(1, workers))) as pool:
        for part in pool.map(lambda c: _probe_chunk(sandbox, c[1], timeout_s, c[0]), chunks):
            results.update(part)
    return {job.key: results.get(job.key, {}) for job in jobs}


def _probe_chunk(sandbox, jobs: list[ProbeJob], timeout_s: float,
                 task_env: Path | None = None) -> dict[str, dict[str, Failure]]:
    tmp = Path(tempfile.mkdtemp(prefix="rlvr-probe-"))
    try:
        specs = []
        for i, job in enumerate(jobs):
            root = tmp / f"j{i}"
            for rel, content in job.repo_files.items():
                target = root / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content)
            specs.append({"dir": f"{PROBE_ROOT}/j{i}", "tests": list(job.tests),
                          "args": list(job.pytest_args), "timeout": max(1, int(timeout_s))})
        (tmp / "jobs.json").write_text(json.dumps(specs))
        shutil.copy(DRIVER, tmp / "probe_driver.py")
        limits = Limits(wall_seconds=timeout_s * len(jobs) + 30,
                        cpu_seconds=int(timeout_s * len(jobs) + 30),
                        max_file_bytes=4 << 20)
        result = sandbox.run([sandbox.python, f"{PROBE_ROOT}/probe_driver.py",
                              f"{PROBE_ROOT}/jobs.json"],
                             mounts=[Mount(tmp, PROBE_ROOT, writable=True)], cwd=PROBE_ROOT,
                             env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
                                  "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
                                  "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
                             limits=limits, task_env=task_env)
        out: dict[str, dict[str, Failure]] = {}
        for i, job in enumerate(jobs):
            path = tmp / f"j{i}" / ".probe.json"
            if not path.is_file():
                out[job.key] = {}
                continue
            data = json.loads(path.read_text())
            out[job.key] = {tid: Failure(tid, f["message"], f["statement"], f["when"])
                            for tid, f in data["failures"].items()}
        if not out and not result.ok:
            raise RuntimeError(f"probe sandbox failed: exit {result.exit_code}: "
                               f"{result.stderr[-500:]}")
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- writing ------------------------------------------------------------------------------
def _called_name(statement: str) -> str | None:
    """The first function / method a test line calls (the API the issue is about)."""
    text = statement.strip()
    if text.startswith("with "):
        text = text[5:].rstrip(":")
    if text.startswith("assert "):
        text = text[7:]
    try:
        tree = ast_parse.parse(text.strip(), mode="eval")
    except SyntaxError:
        return None
    skip = {"raises", "approx", "len", "list", "sorted", "set", "dict", "tuple", "str",
            "repr", "isinstance", "round", "abs", "all", "any"}
    calls = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)),
                   key=lambda n: (n.lineno, n.col_offset))
    for call in calls:
        func = call.func
        name = func.id if isinstance(func, ast.Name) else (
            func.attr if isinstance(func, ast.Attribute) else None)
        if name and name not in skip:
            return name
    return None


def _split_comparison(line: str) -> tuple[str, str] | None:
    """`assert OBSERVED == EXPECTED` -> (observed, expected) when the split is unambiguous."""
    if not line.startswith("assert "):
        return None
    body = line[len("assert "):]
    cuts = [m.start() for m in re.finditer(r" == ", body)]
    if len(cuts) == 1:
        return body[:cuts[0]], body[cuts[0] + 4:]
    for cut in cuts:
        left, right = body[:cut], body[cut + 4:]
        try:
            ast.literal_eval(left)
            ast.literal_eval(right)
        except (ValueError, SyntaxError):
            continue
        return left, right
    return None


def _value(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + " ..."


def _clip(message: str) -> str:
    lines = [ln.rstrip() for ln in message.strip().splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.strip().startswith("Use -v")]
    text = "\n".join(lines[:_MAX_MESSAGE_LINES])
    return text[:_MAX_MESSAGE_CHARS]


def describe(failure: Failure) -> tuple[str, str]:
    """(title, body) of the report of one failing test."""
    api = _called_name(failure.statement) if failure.statement else None
    subject = f"`{api}`" if api else f"`{failure.test_id.split('::')[-1]}`"
    message = _ADDRESS.sub(" at 0x...", failure.message.strip())
    if message.startswith("AssertionError: assert "):
        message = message[len("AssertionError: "):]
    first = message.splitlines()[0] if message else ""
    body = [f"Running `{failure.test_id}` fails."]
    if failure.statement:
        body += ["", "The failing check:", "", f"    {failure.statement}"]
    comparison = _split_comparison(first)
    if comparison and failure.statement.startswith("assert ") and " == " in failure.statement:
        observed, expected = comparison
        title = f"{subject} returns a wrong result"
        body += ["", f"Observed: {_value(observed)}", f"Expected: {_value(expected)}"]
        where = [ln.strip() for ln in message.splitlines()[1:] if ln.strip().startswith("+")]
        if where:
            body += ["", "pytest reports:", "", *(f"    {w}" for w in where[:4])]
    elif first.startswith("Failed: DID NOT RAISE"):
        exc = first.split("DID NOT RAISE", 1)[1].strip()
        title = f"{subject} does not raise {exc}"
        body += ["", f"Observed: no exception", f"Expected: {exc} is raised"]
    elif re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b", first) and \
            not first.startswith("AssertionError"):
        exc = first.split(":", 1)[0]
        title = f"{subject} raises {exc}"
        body += ["", f"Observed: {_clip(message)}",
                 "Expected: the check passes without an exception"]
    else:
        wrong_value = first.startswith("assert ") and failure.statement.startswith("assert ")
        title = f"{subject} returns a wrong result" if wrong_value else f"{subject} misbehaves"
        body += ["", "pytest reports:", "", *(f"    {ln}" for ln in _clip(message).splitlines())]
    return title, "\n".join(body)


def write_instruction(package: str, failures: list[Failure], public_failing: list[str],
                      reference_patch: str, *, leak_check, max_reports: int = 3) -> str:
    """The issue text for a task. `failures` are the probed failures of its public failing
    tests (may be empty if the probe could not observe one); `leak_check(text, patch)` returns
    the fix lines found in a text (curation's rule-6 check, applied here up front)."""
    closing = ("The tests are correct; please fix the library code so that they pass "
               "without breaking the rest of the test suite.")
    by_id = {f.test_id: f for f in failures}
    observed = [by_id[t] for t in public_failing if t in by_id][:max_reports]
    if observed:
        title, body = describe(observed[0])
        parts = [f"{title} in `{package}`", "", body]
        for extra in observed[1:]:
            other_title, other_body = describe(extra)
            parts += ["", f"Also: {other_title}.", "", other_body]
        unreported = [t for t in public_failing if t not in {f.test_id for f in observed}]
        if unreported:
            parts += ["", "Also failing: " + ", ".join(f"`{t}`" for t in unreported)]
        text = "\n".join([*parts, "", closing]) + "\n"
        if not leak_check(text, reference_patch):
            return text
    listed = ", ".join(f"`{t}`" for t in public_failing)
    return "\n".join([f"Failing tests in `{package}`", "",
                      f"These tests fail on the current code: {listed}.", "", closing]) + "\n"
