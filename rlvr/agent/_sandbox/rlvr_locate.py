"""pytest plugin for the agent's `run_tests`: spectrum-based fault localisation.

It runs *inside the policy's sandbox* (mounted read-only, loaded with `-p rlvr_locate`), so
it imports nothing from the host package. While the public tests run it records which
source lines (repository files outside the test directories) each test executed; when a test
failed, it appends the lines that failing tests ran most and passing tests ran least, ranked
by the Ochiai score `f / sqrt(F * (f + p))` (f, p: failing / passing tests that ran the line;
F: all failing tests). Why: a failing assertion names the test's line, not the bug's; this
section names `file:line` of the likely bug in what the agent sees, so localising is copying
a few digits from an observation instead of reasoning about call graphs — a real debugging
aid at deployment, not a hint. Output is deterministic (ties broken by path and line).
"""
from __future__ import annotations

import math
import os
import sys
import threading

TOP = 8
_ROOT = os.getcwd()
_EXCLUDE_DIRS: tuple[str, ...] = ()
_lines_by_test: dict[str, set[tuple[str, int]]] = {}
_current: set[tuple[str, int]] | None = None
_outcomes: dict[str, bool] = {}
_keep: dict[str, str | None] = {}


def _rel(filename: str) -> str | None:
    """The repo-relative path of a source file worth tracing, else None (memoised)."""
    hit = _keep.get(filename, "")
    if hit != "":
        return hit
    rel = None
    if filename.endswith(".py") and filename.startswith(_ROOT + os.sep):
        cand = filename[len(_ROOT) + 1:]
        top = cand.split(os.sep, 1)[0]
        if top not in _EXCLUDE_DIRS and not os.path.basename(cand).startswith(("test_", "conftest")):
            rel = cand.replace(os.sep, "/")
    _keep[filename] = rel
    return rel


def _local(frame, event, arg):
    if event == "line" and _current is not None:
        _current.add((_keep[frame.f_code.co_filename], frame.f_lineno))
    return _local


def _global(frame, event, arg):
    if _current is None or _rel(frame.f_code.co_filename) is None:
        return None
    return _local


def pytest_configure(config):
    global _EXCLUDE_DIRS
    _EXCLUDE_DIRS = tuple(sorted({os.path.relpath(str(a), _ROOT).split(os.sep, 1)[0]
                                  for a in (config.args or ["tests"])} | {"tests"}))


def pytest_runtest_call(item):
    global _current
    _current = _lines_by_test.setdefault(item.nodeid, set())
    sys.settrace(_global)
    threading.settrace(_global)


def pytest_runtest_teardown(item):
    global _current
    sys.settrace(None)
    threading.settrace(None)
    _current = None


def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        if report.nodeid not in _outcomes or report.failed:
            _outcomes[report.nodeid] = not report.failed


def suspicious_lines(lines_by_test, outcomes, top=TOP):
    """[(path, line, score, f, p)] best first; pure, so the host tests it directly."""
    failing = [t for t, ok in outcomes.items() if not ok]
    if not failing:
        return []
    f_count: dict[tuple[str, int], int] = {}
    p_count: dict[tuple[str, int], int] = {}
    for test, ok in outcomes.items():
        for site in lines_by_test.get(test, ()):
            (p_count if ok else f_count)[site] = (p_count if ok else f_count).get(site, 0) + 1
    scored = []
    for site, f in f_count.items():
        p = p_count.get(site, 0)
        scored.append((f / math.sqrt(len(failing) * (f + p)), f, p, site))
    scored.sort(key=lambda s: (-s[0], s[2], s[3]))
    return [(site[0], site[1], round(score, 3), f, p) for score, f, p, site in scored[:top]]


def pytest_terminal_summary(terminalreporter):
    ranked = suspicious_lines(_lines_by_test, _outcomes)
    if not ranked:
        return
    tr = terminalreporter
    tr.write_line("suspicious lines (run by failing tests, not by passing ones):")
    sources: dict[str, list[str]] = {}
    for path, line, score, f, p in ranked:
        if path not in sources:
            try:
                with open(os.path.join(_ROOT, path), encoding="utf-8") as fh:
                    sources[path] = fh.read().split("\n")
            except OSError:
                sources[path] = []
        text = sources[path][line - 1].strip() if 0 < line <= len(sources[path]) else ""
        tr.write_line(f"{path}:{line}: {text}  [{f} failing, {p} passing]")
