"""Diagnostics for task authors (`rlvr tasks check DIR`, `rlvr tasks rejections FILE`).

Why. The enclave tells curation only outcomes and coarse flags (its verdict channel carries no
messages, by design: the policy must not read hidden assertions). A task's *author* is
trusted, so this module may show what the policy never sees: for the buggy state, the
reference fix and each wrong solution, every hidden test's enclave outcome next to the short
error line of a plain pytest run of the same state in the same sandbox backend (a test that
passes under plain pytest and fails in the enclave points at an enclave restriction, not at
the task), then the curation verdict with the test ids, flags and error line of its reason.

Also here, because curation needs them without the CLI:

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
from typing import Sequence

from rlvr.errors import ArtifactError

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
    from rlvr.sandbox import envs
    from rlvr.sandbox.base import Limits, Mount
    from rlvr.tasks.materialize import write_files
    from rlvr.tasks.project_config import for_task

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
    from rlvr.agent.executor import ToolExecutor
    from rlvr.agent.tools import ToolCall
    from rlvr.agent.workspace import Workspace

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


# ---- rlvr tasks check DIR ---------------------------------------------------------------
@dataclass
class StateReport:
    """One state of a task (buggy, reference, a wrong solution) as the author sees it."""

    label: str
    status: str                    # the enclave run's status, or the verifier's reason
    outcomes: dict[str, str]       # test id -> enclave outcome
    flags: list[str]
    messages: dict[str, str]       # test id -> short error line (plain pytest)
    plain: dict[str, str]          # test id -> plain pytest outcome
    collect_errors: dict[str, str]
    detail: str = ""


@dataclass
class CheckReport:
    task_id: str
    family: str
    states: list[StateReport]
    verdict: object                # a curated Task or a Rejection
    public: PublicRun | None = None  # the agent's run_tests on the buggy state

    @property
    def accepted(self) -> bool:
        from rlvr.authoring.curation import Rejection

        return not isinstance(self.verdict, Rejection)


def check_task(task_dir: Path | str, params, sandbox_params) -> CheckReport:
    """Load `task_dir` (TaskFormatError names the file / field), run each state through the
    enclave and a plain diagnostic pytest run, and curate it."""
    from rlvr.enclave import Enclave
    from rlvr.errors import PatchFormatError, TaskFormatError
    from rlvr.authoring.authored import load_task_dir
    from rlvr.authoring.curation import curate_one
    from rlvr.tasks.patches import apply_patch, make_patch
    from rlvr.authoring.wrong import wrong_solutions

    task_dir = Path(task_dir)
    if not task_dir.is_dir():
        raise TaskFormatError(f"{task_dir}: " + ("is a file, expected a task directory"
                                                 if task_dir.exists() else
                                                 "task directory not found"))
    task = load_task_dir(task_dir)
    try:
        fixed = apply_patch(task.repo_files, task.reference_patch,
                            f"{task_dir / 'reference.patch'}")
    except PatchFormatError as exc:
        fixed = None
        fix_error = str(exc)
    states: list[tuple[str, dict[str, str] | None, str]] = [("buggy state", task.repo_files, "")]
    states.append(("reference fix", fixed, "" if fixed is not None else fix_error))
    if fixed is not None:
        for wrong in wrong_solutions(task, fixed, max_mutants=params.max_mutants,
                                     seed=params.seed):
            if wrong.kind != "empty":     # the empty patch is the buggy state, shown above
                states.append((f"wrong solution {wrong.label}", wrong.files, wrong.kind))
    reports = []
    with Enclave.for_sandbox(sandbox_params, workers=1) as enclave:
        for label, files, kind in states:
            if files is None:
                reports.append(StateReport(label, "apply_failed", {}, [], {}, {}, {}, kind))
                continue
            if kind == "edits_tests":
                verdict = enclave.verify(task, make_patch(task.repo_files, files),
                                         seed=params.seed)
                reports.append(StateReport(label, f"verifier: {verdict.reason}", {},
                                           list(verdict.safety_flags), {}, {}, {},
                                           verdict.detail))
                continue
            run = enclave.run_suite(task, make_patch(task.repo_files, files), seed=params.seed)
            diag = diagnose(task, files, enclave.sandbox, limits=enclave.limits)
            reports.append(StateReport(
                label, run.status, dict(run.outcomes), list(run.safety_flags),
                {t: m for t, (_, m) in diag.tests.items() if m},
                {t: o for t, (o, _) in diag.tests.items()}, diag.collect_errors, run.detail))
        public = public_tests_run(task, enclave.sandbox, enclave.limits)
        verdict = curate_one(task, enclave, params)
    return CheckReport(task.task_id, task.family, reports, verdict, public)


def format_check(report: CheckReport) -> str:
    from rlvr.authoring.curation import Rejection

    out = [f"task {report.task_id} (family {report.family})"]
    for state in report.states:
        counts: dict[str, int] = {}
        for o in state.outcomes.values():
            counts[o] = counts.get(o, 0) + 1
        summary = ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) or "no tests"
        out.append(f"== {state.label}: {state.status}; {summary}; flags: "
                   f"{', '.join(state.flags) or '-'}")
        if state.detail:
            out.append(f"   detail: {state.detail.splitlines()[-1][:200]}")
        for module, msg in sorted(state.collect_errors.items()):
            out.append(f"   COLLECT ERROR {module}: {msg}")
        for tid in sorted(set(state.outcomes) | set(state.plain)):
            outcome = state.outcomes.get(tid, "not run")
            plain = state.plain.get(tid, "not run")
            line = f"   {outcome:<8} {tid}"
            if plain != outcome:
                line += f"  (plain pytest: {plain})"
            if state.messages.get(tid):
                line += f"  -- {state.messages[tid]}"
            out.append(line)
    if report.public is not None:
        p = report.public
        out.append("== public tests (the agent's run_tests on the buggy state): "
                   + (f"pytest exit {p.exit_code}" if p.runnable and p.exit_code is not None
                      else "none declared" if p.runnable else f"NOT RUNNABLE: {p.problem}"))
        if p.error:
            out.append(f"   error: {p.error}")
    v = report.verdict
    if isinstance(v, Rejection):
        out.append(f"verdict: rejected {v.reason}: {v.detail}")
        out.extend(_rejection_extras(v))
    else:
        out.append(f"verdict: accepted (split {v.split}); fail_to_pass: "
                   f"{', '.join(v.fail_to_pass)}; pass_to_pass: {len(v.pass_to_pass)}; "
                   f"quarantined: {', '.join(t for t, _ in v.quarantined) or '-'}")
    return "\n".join(out)


def _rejection_extras(rej) -> list[str]:
    lines = []
    if rej.tests:
        lines.append(f"   tests: {', '.join(rej.tests)}")
    if rej.flags:
        lines.append(f"   flags: {', '.join(rej.flags)}")
    if rej.error:
        lines.append(f"   error: {rej.error}")
    return lines


# ---- rlvr tasks rejections FILE ----------------------------------------------------------
def read_rejections(path: Path | str) -> list:
    """The rejection log at `path` (schema + data contract checked); ArtifactError names the
    file when it is missing, not Parquet, or breaks the contract."""
    from rlvr.artifacts import schemas
    from rlvr.artifacts.io import read_table
    from rlvr.authoring.curation import Rejection

    table = read_table(path, schemas.REJECTIONS, contract="rejections")
    try:
        return [Rejection.from_row(row) for row in table.to_pylist()]
    except (KeyError, TypeError, ValueError) as exc:   # provenance that is not JSON
        raise ArtifactError(f"{path}: unreadable rejection row: {exc}") from None


def format_rejections(rejections: Sequence) -> str:
    from collections import Counter

    by_reason = Counter(r.reason for r in rejections)
    out = [f"{len(rejections)} rejection(s): "
           + (", ".join(f"{k}={n}" for k, n in sorted(by_reason.items())) or "none")]
    for r in rejections:
        out.append(f"{r.task_id}\t{r.family}\t{r.reason}\t{r.detail}")
        out.extend(_rejection_extras(r))
    return "\n".join(out)


__all__ = ["CheckReport", "Diagnosis", "PublicRun", "check_task", "diagnose",
           "format_check", "format_rejections", "public_tests_run", "read_rejections"]
