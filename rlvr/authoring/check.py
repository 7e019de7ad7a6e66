"""Diagnostics for task authors (`rlvr tasks check DIR`, `rlvr tasks rejections FILE`).

Why. The enclave tells curation only outcomes and coarse flags (its verdict channel carries no
messages, by design: the policy must not read hidden assertions). A task's *author* is
trusted, so this module may show what the policy never sees: for the buggy state, the
reference fix and each wrong solution, every hidden test's enclave outcome next to the short
error line of a plain pytest run of the same state in the same sandbox backend (a test that
passes under plain pytest and fails in the enclave points at an enclave restriction, not at
the task), then the curation verdict with the test ids, flags and error line of its reason.

The plain pytest runs themselves are `rlvr.authoring.diagnostics` (curation needs them too).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from rlvr.artifacts import schemas
from rlvr.artifacts.io import read_table
from rlvr.authoring.authored import load_task_dir
from rlvr.authoring.curation import Rejection, curate_one
from rlvr.authoring.diagnostics import PublicRun, diagnose, public_tests_run
from rlvr.authoring.wrong import wrong_solutions
from rlvr.enclave import Enclave
from rlvr.errors import ArtifactError, PatchFormatError, TaskFormatError
from rlvr.tasks.patches import apply_patch, make_patch


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
        return not isinstance(self.verdict, Rejection)


def check_task(task_dir: Path | str, params, sandbox_params) -> CheckReport:
    """Load `task_dir` (TaskFormatError names the file / field), run each state through the
    enclave and a plain diagnostic pytest run, and curate it."""
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
    table = read_table(path, schemas.REJECTIONS, contract="rejections")
    try:
        return [Rejection.from_row(row) for row in table.to_pylist()]
    except (KeyError, TypeError, ValueError) as exc:   # provenance that is not JSON
        raise ArtifactError(f"{path}: unreadable rejection row: {exc}") from None


def format_rejections(rejections: Sequence) -> str:
    by_reason = Counter(r.reason for r in rejections)
    out = [f"{len(rejections)} rejection(s): "
           + (", ".join(f"{k}={n}" for k, n in sorted(by_reason.items())) or "none")]
    for r in rejections:
        out.append(f"{r.task_id}\t{r.family}\t{r.reason}\t{r.detail}")
        out.extend(_rejection_extras(r))
    return "\n".join(out)


__all__ = ["CheckReport", "StateReport", "check_task", "format_check", "format_rejections",
           "read_rejections"]
