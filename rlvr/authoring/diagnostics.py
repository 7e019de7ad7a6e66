"""Plain sandboxed pytest runs of a task's states: what curation needs to explain a verdict
and the author's check shows (`rlvr.authoring.check`).

* `diagnose`: one plain sandboxed pytest run of (state + hidden tests), per-test outcome and
  short message, and the modules whose collection failed (curation's `hidden_import_error`
  names the module and this error line);
* `public_tests_run`: the agent's own `run_tests` (`rlvr.agent.executor.ToolExecutor` on a
  fresh `Workspace`) on the buggy state, and whether the tests actually ran (pytest exit 3 /
  4 / 5 -- internal error, usage error such as an `addopts` plugin the sandbox lacks, no tests
  collected -- means the agent could never run them).
"""
from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from rlvr.agent.executor import ToolExecutor
from rlvr.agent.tools import ToolCall
from rlvr.agent.workspace import Workspace
from rlvr.sandbox import envs
from rlvr.sandbox.base import Limits, Mount
from rlvr.tasks.materialize import write_files
from rlvr.tasks.project_config import for_task

# A pytest plugin loaded into the diagnostic run: one JSON line per failed/skipped phase, per
# finished call and per failed collection. Plain pytest, trusted author code: messages are
# the point here.
_REPORT_PLUGIN = '''\
import json, os

_OUT = os.environ["RLVR_CHECK_OUT"]


def _line(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None and crash.message:
        text = crash.message
    else:
        text = str(report.longrepr or "")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    marked = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
    return (marked or lines[:1] or [""])[0 if crash is not None else -1][:300]


def _write(rec):
    with open(_OUT, "a") as fh:
        fh.write(json.dumps(rec) + "\\n")


def pytest_runtest_logreport(report):
    if report.when == "call" or not report.passed:
        _write({"id": report.nodeid, "when": report.when, "outcome": report.outcome,
                "message": "" if report.passed else _line(report)})


def pytest_collectreport(report):
    if report.failed:
        _write({"id": report.nodeid, "when": "collect", "outcome": "error",
                "message": _line(report)})
'''
_PLUGIN_NAME = "rlvr_check_report"
_PYTEST_EXIT = re.compile(r"\[pytest exit code (-?\d+)\]\s*$")
# pytest exit statuses meaning the tests did not run at all (0 passed, 1 some failed, 2
# interrupted by collection errors -- which the bug itself may cause -- still ran them).
_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 2}
UNRUNNABLE_EXITS = {3: "pytest internal error", 4: "pytest usage error",
                    5: "no tests collected"}


@dataclass
class Diagnosis:
    """A plain pytest run of one state: per-test (outcome, short message), collection errors
    (module -> message), and the run's exit status / output tail when it did not report."""

    tests: dict[str, tuple[str, str]] = field(default_factory=dict)
    collect_errors: dict[str, str] = field(default_factory=dict)
    exit_code: int | None = None
    output: str = ""


def diagnose(task, state: dict[str, str], sandbox, *, limits=None) -> Diagnosis:
    """Run the hidden suite on `state` with plain pytest in `sandbox` (the repo at /work on
    sys.path after the project's own import paths, e.g. src/, the hidden tests at /hidden as
    their own rootdir, in the task's dependency layer: as in the enclave)."""
    paths = [f"/work/{p}" for p in for_task(task).import_paths]
    task_env = envs.task_env(task.dependencies)

    root = Path(tempfile.mkdtemp(prefix="rlvr-check-"))
    try:
        work, hidden, plugin, out = (root / n for n in ("work", "hidden", "plugin", "out"))
        for d in (work, hidden, plugin, out):
            d.mkdir()
        write_files(work, state)
        write_files(hidden, task.hidden_tests)
        (plugin / f"{_PLUGIN_NAME}.py").write_text(_REPORT_PLUGIN)
        mounts = [Mount(work, "/work", writable=True), Mount(hidden, "/hidden"),
                  Mount(plugin, "/opt/rlvr-check"), Mount(out, "/out", writable=True)]
        env = {"PYTHONPATH": ":".join([*paths, "/work", "/opt/rlvr-check"]),
               "RLVR_CHECK_OUT": "/out/report.jsonl",
               "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONHASHSEED": "0"}
        argv = [sandbox.python, "-m", "pytest", "/hidden", "--rootdir", "/hidden", "-c",
                "/dev/null", "-q", "--no-header", "--color=no", "-p", "no:cacheprovider",
                "--import-mode=importlib", "--continue-on-collection-errors",
                "-p", _PLUGIN_NAME]
        result = sandbox.run(argv, mounts=mounts, cwd="/work", env=env,
                             limits=limits or Limits(),
                             task_env=task_env)
        diag = Diagnosis(exit_code=result.exit_code,
                         output=((result.stdout or "") + (result.stderr or ""))[-2000:])
        report = out / "report.jsonl"
        for line in (report.read_text().splitlines() if report.is_file() else []):
            rec = json.loads(line)
            if rec["when"] == "collect":
                diag.collect_errors[rec["id"]] = rec["message"]
                continue
            outcome = ("error" if rec["when"] != "call" and rec["outcome"] == "failed"
                       else rec["outcome"])
            prior = diag.tests.get(rec["id"])
            if prior is None or _RANK.get(outcome, 2) > _RANK.get(prior[0], 2):
                diag.tests[rec["id"]] = (outcome, rec["message"])
        return diag
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True)
class PublicRun:
    """The agent's `run_tests` on the buggy state: could the tests run at all?"""

    runnable: bool
    exit_code: int | None
    problem: str = ""
    error: str = ""


def public_tests_run(task, sandbox, limits) -> PublicRun:
    """The public tests through the agent's own path (`ToolExecutor`'s `run_tests` on a
    fresh `Workspace` of the buggy state, cold, in `sandbox`). A task without public tests
    promises none: runnable."""
    if not task.public_tests:
        return PublicRun(True, None)
    ws = Workspace.create(task)
    try:
        with ToolExecutor(ws, sandbox, timeout_s=limits.cpu_seconds, observation_cap=0,
                          limits=limits) as executor:
            result = executor.execute(ToolCall("run_tests", {}))
    finally:
        ws.close()
    if result.status == "infra_error":
        return PublicRun(False, None, f"the sandbox failed: {result.detail}",
                         result.detail)
    if result.status == "timeout":
        return PublicRun(False, None, f"timed out after {limits.cpu_seconds:g}s",
                         _last_line(result.observation))
    match = _PYTEST_EXIT.search(result.observation)
    code = int(match.group(1)) if match else None
    if code in UNRUNNABLE_EXITS:
        return PublicRun(False, code, f"{UNRUNNABLE_EXITS[code]} (pytest exit {code})",
                         _error_line(result.observation))
    return PublicRun(True, code)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("[")]
    return lines[-1][:200] if lines else ""


def _error_line(text: str) -> str:
    """pytest's own complaint (`ERROR: ...`, `E ...`), else its last line."""
    for ln in text.splitlines():
        if ln.startswith(("ERROR:", "E ", "INTERNALERROR>")) or "error:" in ln[:40]:
            return ln.strip()[:200]
    return _last_line(text)


__all__ = ["Diagnosis", "PublicRun", "UNRUNNABLE_EXITS", "diagnose", "public_tests_run"]
