"""Curation: a task earns its place by telling right from wrong (SPEC §1).

For every candidate: FAIL_TO_PASS / PASS_TO_PASS come from running the hidden suite on the
buggy and on the fixed state; the fixed state is re-run with other seeds and shuffled order
and any test whose outcome varies is quarantined; then the six distinguishability rules.
A rejected candidate becomes a `Rejection` with its reason: nothing is dropped silently.

Suite runs are cached by *state* (hash of the files after the patch) + hidden suite + seed,
so the many tasks of one seed family share their reference runs and sibling mutants.
"""
from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping, Sequence

from rlvr.config import load_section
from rlvr.enclave import Enclave
from rlvr.errors import PatchFormatError
from rlvr.sandbox.params import SandboxParams
from rlvr.tasks.model import Task, content_hash, files_hash
from rlvr.tasks.patches import apply_patch, make_patch
from rlvr.tasks.splits import SplitParams, assign_split
from rlvr.tasks.wrong import wrong_solutions


@dataclass(frozen=True)
class CurationParams:
    seed: int = 0
    reference_runs: int = 5          # rule 4: N seeded, shuffled runs of the fixed state
    max_mutants: int = 4             # rule 3: other mutants of each changed function
    min_mutant_kill_rate: float = 0.5  # share of those the hidden suite must reject
    min_instruction_leak_chars: int = 8  # rule 6: added lines at least this long are checked
    split: SplitParams = field(default_factory=SplitParams)


@dataclass(frozen=True)
class Rejection:
    task_id: str
    family: str
    source: str
    reason: str
    detail: str
    provenance: dict

    def to_row(self) -> dict:
        return {"task_id": self.task_id, "family": self.family, "source": self.source,
                "reason": self.reason, "detail": self.detail,
                "provenance": json.dumps(self.provenance, sort_keys=True)}


@dataclass
class CurationResult:
    accepted: list[Task]
    rejections: list[Rejection]

    def stats(self) -> dict:
        by_reason = Counter(r.reason for r in self.rejections)
        return {
            "candidates": len(self.accepted) + len(self.rejections),
            "accepted": len(self.accepted),
            "rejected": len(self.rejections),
            "rejected_by_reason": dict(sorted(by_reason.items())),
            "quarantined_tests": sum(len(t.quarantined) for t in self.accepted),
            "by_split": dict(sorted(Counter(t.split for t in self.accepted).items())),
        }


class OutcomeCache:
    """Memoises `enclave.run_suite` by (state, hidden suite, seed, shuffle, tests)."""

    def __init__(self) -> None:
        self._runs: dict[str, object] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def run(self, enclave, task: Task, state: dict[str, str], *, seed: int,
            shuffle: bool = True, tests: Sequence[str] | None = None):
        key = hashlib.sha256(json.dumps(
            [files_hash(state), files_hash(task.hidden_tests), seed, shuffle,
             sorted(tests) if tests is not None else None]).encode()).hexdigest()
        with self._lock:
            if key in self._runs:
                self.hits += 1
                return self._runs[key]
        run = enclave.run_suite(task, make_patch(task.repo_files, state), seed=seed,
                                shuffle=shuffle, tests=tests)
        with self._lock:
            self.misses += 1
            self._runs.setdefault(key, run)
        return run


class _Reject(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def leaked_lines(instruction: str, reference_patch: str, min_chars: int) -> list[str]:
    """Added lines of the reference fix that appear verbatim in the instruction (rule 6)."""
    text = " ".join(instruction.split())
    added = [line[1:].strip() for line in reference_patch.splitlines()
             if line.startswith("+") and not line.startswith("+++")]
    return [a for a in added if len(a) >= min_chars and " ".join(a.split()) in text]


def curate_one(task: Task, enclave, params: CurationParams,
               cache: OutcomeCache | None = None,
               fixed_state: dict[str, str] | None = None) -> Task | Rejection:
    """The curated task (F2P/P2P, quarantine, checks, split) or the reason it was refused."""
    cache = cache or OutcomeCache()
    try:
        return _curate(task, enclave, params, cache, fixed_state)
    except _Reject as rej:
        return Rejection(task.task_id, task.family, task.source, rej.reason, rej.detail,
                         task.provenance)


def _curate(task: Task, enclave, params: CurationParams, cache: OutcomeCache,
            fixed_state: dict[str, str] | None) -> Task:
    leaks = leaked_lines(task.instruction, task.reference_patch, params.min_instruction_leak_chars)
    if leaks:
        raise _Reject("instruction_leaks", f"instruction contains the fix line {leaks[0]!r}")
    try:
        fixed = fixed_state if fixed_state is not None else apply_patch(
            task.repo_files, task.reference_patch, f"{task.task_id}: reference patch")
    except PatchFormatError as exc:
        raise _Reject("reference_fails", str(exc)) from None
    seeds = [params.seed + 7919 * i for i in range(max(1, params.reference_runs))]

    # Discover the hidden test ids on the fixed state, then run it N times (rule 4).
    ref_runs = [cache.run(enclave, task, fixed, seed=s) for s in seeds]
    bad = next((r for r in ref_runs if r.status != "ok"), None)
    if bad is not None:
        raise _Reject("reference_fails", f"fixed state run ended with status {bad.status}")
    test_ids = sorted(set().union(*(r.outcomes for r in ref_runs)))
    if not test_ids:
        raise _Reject("reference_fails", "the hidden suite collected no tests")
    quarantined = []
    for tid in test_ids:
        outcomes = [r.outcomes.get(tid, "missing") for r in ref_runs]
        if len(set(outcomes)) > 1:
            passes = outcomes.count("passed")
            quarantined.append((tid, f"flaky on reference: passed {passes}/{len(outcomes)} "
                                     "seeded shuffled runs"))
    q_ids = {t for t, _ in quarantined}
    stable = [t for t in test_ids if t not in q_ids]
    failing_on_fix = [t for t in stable if ref_runs[0].outcomes.get(t) != "passed"]
    if failing_on_fix:
        raise _Reject("reference_fails",
                      f"{len(failing_on_fix)} hidden test(s) fail deterministically on the "
                      "reference fix")

    # Rule 1: the buggy state is rejected by the hidden suite.
    pristine = cache.run(enclave, task, task.repo_files, seed=seeds[0], tests=test_ids)
    if pristine.status != "ok":
        raise _Reject("no_pass_to_pass", f"the buggy state's run ended with status "
                                         f"{pristine.status}: no per-test outcomes to grade")
    fail_to_pass = [t for t in stable if pristine.outcomes.get(t) != "passed"]
    pass_to_pass = [t for t in stable if t not in fail_to_pass]
    flaky_f2p = [t for t in q_ids if pristine.outcomes.get(t) != "passed"]
    if not fail_to_pass:
        if flaky_f2p:
            raise _Reject("nondeterministic_reference",
                          "every test separating buggy from fixed is flaky on the reference")
        raise _Reject("pristine_passes", "the buggy state passes the whole hidden suite")
    # Rule 5: a regression guard exists.
    if not pass_to_pass:
        raise _Reject("no_pass_to_pass", "no hidden test passes on both the buggy and the "
                                         "fixed state")
    curated = task.with_(fail_to_pass=tuple(fail_to_pass), pass_to_pass=tuple(pass_to_pass),
                         quarantined=tuple(quarantined))

    # Rule 2: the reference is accepted by the real grading path (patch policy, consensus).
    verdict = enclave.verify(curated, curated.reference_patch, seed=params.seed)
    if not verdict.success:
        raise _Reject("reference_fails", f"verifier refused the reference: {verdict.reason}")

    # Rule 3: deliberately wrong solutions are rejected.
    checks = _wrong_solution_checks(curated, fixed, enclave, params, cache, seeds[0])
    curated = curated.with_(checks={
        "reference_runs": len(seeds),
        "fail_to_pass": len(fail_to_pass),
        "pass_to_pass": len(pass_to_pass),
        "quarantined": len(quarantined),
        "verifier_version": verdict.verifier_version,
        **checks,
    })
    return curated.with_(split=assign_split(curated.family, params.split, curated.provenance))


def _wrong_solution_checks(task: Task, fixed: dict[str, str], enclave,
                           params: CurationParams, cache: OutcomeCache, seed: int) -> dict:
    graded = task.graded_tests
    wrongs = wrong_solutions(task, fixed, max_mutants=params.max_mutants, seed=params.seed)
    mutants_total = mutants_killed = 0
    survivors = []
    for wrong in wrongs:
        if wrong.kind == "edits_tests":
            verdict = enclave.verify(task, make_patch(task.repo_files, wrong.files), seed=seed)
            if verdict.success or verdict.reason != "patch_rejected":
                raise _Reject("wrong_solution_passes",
                              f"{wrong.label}: a test-editing patch was not refused "
                              f"(reason {verdict.reason})")
            continue
        run = cache.run(enclave, task, wrong.files, seed=seed, tests=graded)
        accepted = Enclave.judge(run, graded)[0] == "none"
        if wrong.kind == "mutant":
            mutants_total += 1
            mutants_killed += not accepted
            if accepted:
                survivors.append(wrong.label)
        elif accepted:
            raise _Reject("wrong_solution_passes", f"{wrong.label}: accepted by the hidden suite")
    kill_rate = mutants_killed / mutants_total if mutants_total else 1.0
    if kill_rate < params.min_mutant_kill_rate:
        raise _Reject("wrong_solution_passes",
                      f"hidden suite rejects only {mutants_killed}/{mutants_total} other mutants "
                      f"of the fixed function(s) (min {params.min_mutant_kill_rate:.0%}); "
                      f"survivors: {', '.join(survivors[:3])}")
    return {"wrong_solutions": len(wrongs), "mutants": mutants_total,
            "mutants_killed": mutants_killed, "mutant_survivors": survivors}


def curate(tasks: Sequence[Task], enclave, params: CurationParams, *,
           cache: OutcomeCache | None = None, workers: int = 1,
           fixed_states: dict[str, dict[str, str]] | None = None,
           progress: Callable[[int], None] | None = None,
           known: Mapping[str, str] | None = None) -> CurationResult:
    """Curate many candidates (in parallel over the enclave's workers), then dedup (against
    each other and against `known`: content hash -> id of tasks already in the pool).

    Results are assembled in input order, so the output does not depend on thread timing.
    """
    cache = cache or OutcomeCache()
    fixed_states = fixed_states or {}

    def one(task: Task):
        out = curate_one(task, enclave, params, cache, fixed_states.get(task.task_id))
        if progress:
            progress(1)
        return out

    if workers > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(one, tasks))
    else:
        results = [one(t) for t in tasks]
    return dedup(results, known)


def dedup(results: Sequence[Task | Rejection], known: Mapping[str, str] | None = None) -> CurationResult:
    """Accepted tasks minus those whose normalised content (`content_hash`) an earlier one,
    or a task in `known` (hash -> task id), already has: rejected as duplicates, first wins."""
    accepted: list[Task] = []
    rejections: list[Rejection] = []
    seen: dict[str, str] = dict(known or {})
    for result in results:
        if isinstance(result, Rejection):
            rejections.append(result)
            continue
        key = content_hash(result)
        if key in seen:
            rejections.append(Rejection(result.task_id, result.family, result.source,
                                        "duplicate", f"same normalised content as {seen[key]}",
                                        result.provenance))
            continue
        seen[key] = result.task_id
        accepted.append(result)
    return CurationResult(accepted, rejections)


# ---- a curation run: what the `curate` stage and `rlvr curate` both do ----------------------
def load_params(path: Path) -> tuple[CurationParams, SandboxParams]:
    """The `curate` section of `path` with its `split` section folded in, and `sandbox`."""
    cur = load_section(CurationParams, "curate", path)
    split = load_section(SplitParams, "split", path)
    return replace(cur, split=split), load_section(SandboxParams, "sandbox", path)


def run_curation(source: Path, params: CurationParams, sandbox: SandboxParams) -> CurationResult:
    """Curate every hand-authored task directory under `source` through a fresh enclave on
    `sandbox` (SandboxParams); write nothing (see `rlvr.tasks.pool.save_pool`)."""
    from rlvr.progress import progress
    from rlvr.tasks.authored import discover, load_task_dir

    candidates = [load_task_dir(d) for d in discover(source)]
    with Enclave(backend=sandbox.backend, limits=sandbox.limits.to_limits(),
                 workers=sandbox.workers) as enclave, \
            progress(len(candidates), "curate") as bar:
        return curate(candidates, enclave, params, workers=sandbox.workers, progress=bar.update)


def selfcheck_patches(result: CurationResult) -> list[dict]:
    """Each accepted task's reference and the empty patch (`schemas.PATCHES` rows): the
    `selfcheck` stage proves on every run that the enclave accepts what should pass and
    refuses what should not."""
    rows = []
    for task in sorted(result.accepted, key=lambda t: t.task_id):
        rows.append({"task_id": task.task_id, "candidate_id": f"{task.task_id}:reference",
                     "origin": "reference", "patch": task.reference_patch})
        rows.append({"task_id": task.task_id, "candidate_id": f"{task.task_id}:empty",
                     "origin": "empty", "patch": ""})
    return rows
