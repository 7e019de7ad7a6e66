"""Curation: a task earns its place by telling right from wrong (SPEC §1).

For every candidate: FAIL_TO_PASS / PASS_TO_PASS come from running the hidden suite on the
buggy and on the fixed state; the fixed state is re-run with other seeds and shuffled order
and any test whose outcome varies is quarantined (a sequential two-phase rule sized to catch
a 20%-flaky test with probability >= 0.95: `rlvr.authoring.flaky`); then the six
distinguishability rules, a check that every hidden module collected, and one that the
public tests run in the agent's own sandbox. A rejected candidate becomes a `Rejection` with
its reason, the test ids at fault, the enclave's flags and a short error line: nothing is
dropped silently, and the log says what to fix (`rlvr tasks rejections FILE` prints it,
`rlvr tasks check DIR` shows every state's per-test outcomes).

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

from rlvr.agent.workspace import CONFIG_NAMES
from rlvr.authoring import flaky
from rlvr.authoring.authored import discover, load_task_dir
from rlvr.authoring.diagnostics import diagnose, public_tests_run
from rlvr.authoring.flaky import catch_probability, runs_needed
from rlvr.authoring.wrong import wrong_solutions
from rlvr.config import load_section
from rlvr.enclave import Enclave
from rlvr.enclave.core import run_seed
from rlvr.errors import ConfigError, PatchFormatError
from rlvr.progress import progress
from rlvr.sandbox.params import SandboxParams
from rlvr.tasks.model import Task, content_hash, files_hash
from rlvr.tasks.patches import apply_patch, make_patch
from rlvr.tasks.splits import SplitParams, assign_split


@dataclass(frozen=True)
class CurationParams:
    seed: int = 0
    # rule 4, phase 1: whole-suite seeded, shuffled runs of the fixed state for every
    # candidate (test discovery, deterministic failures, first flakes)
    reference_runs: int = 5
    # rule 4, phase 2 (`rlvr.authoring.flaky`): a candidate that passed every cheap rule gets
    # runs of its graded tests until a test failing `flaky_rate` of the time is caught with
    # probability >= `flaky_catch`, counting the reference verdict's consensus runs
    # (0.2 / 0.95 -> 14 observations = 11 runs + 3 consensus runs: P = 0.956; the old
    # 5-run rule caught it with P = 0.672). flaky_catch 0 = phase 1 only.
    flaky_rate: float = 0.2
    flaky_catch: float = 0.95
    # more than this share of the hidden tests flaky on the reference: the suite, not a few
    # tests, is unreliable -> rejected as `flaky_suite` (naming the tests) instead of
    # quarantining most of it
    max_flaky_share: float = 0.5
    # the public tests must run in the agent's sandbox (its `run_tests`) on the buggy state:
    # a pytest usage error / internal error / "no tests collected" -> `public_tests_unrunnable`
    check_public_tests: bool = True
    max_mutants: int = 4             # rule 3: other mutants of each changed function
    min_mutant_kill_rate: float = 0.5  # share of those the hidden suite must reject
    min_instruction_leak_chars: int = 8  # rule 6: added lines at least this long are checked
    split: SplitParams = field(default_factory=SplitParams)

    def __post_init__(self) -> None:
        if self.reference_runs < 1:
            raise ConfigError("curate.reference_runs: must be >= 1")
        if not 0.0 < self.flaky_rate < 1.0:
            raise ConfigError("curate.flaky_rate: must be in (0, 1)")
        if not 0.0 <= self.flaky_catch < 1.0:
            raise ConfigError("curate.flaky_catch: must be in [0, 1) (0 = phase 1 only)")
        if not 0.0 <= self.max_flaky_share <= 1.0:
            raise ConfigError("curate.max_flaky_share: must be in [0, 1]")

    def fixed_state_runs(self, verify_runs: int) -> int:
        """Runs of the fixed state an accepted candidate gets (phase 1 + phase 2) when the
        reference verdict adds `verify_runs` more observations of every graded test (the
        enclave's consensus runs, all with fresh seeds: they count): 0.2 / 0.95 needs 14
        observations, so 11 runs beside 3 consensus runs, never fewer than phase 1."""
        return max(self.reference_runs,
                   runs_needed(self.flaky_rate, self.flaky_catch) - max(0, verify_runs))


@dataclass(frozen=True)
class Rejection:
    """One refused candidate. `tests` names the hidden (or public) test ids at fault,
    `flags` the enclave's safety flags of the deciding run(s), `error` a short error line
    (the enclave's or a diagnostic run's): an author can act on the log without re-running."""

    task_id: str
    family: str
    source: str
    reason: str
    detail: str
    provenance: dict
    tests: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    error: str = ""

    def to_row(self) -> dict:
        return {"task_id": self.task_id, "family": self.family, "source": self.source,
                "reason": self.reason, "detail": self.detail,
                "provenance": json.dumps(self.provenance, sort_keys=True),
                "tests": list(self.tests), "flags": list(self.flags), "error": self.error}

    @classmethod
    def from_row(cls, row: dict) -> "Rejection":
        return cls(row["task_id"], row["family"], row["source"], row["reason"], row["detail"],
                   json.loads(row["provenance"] or "{}"), tuple(row.get("tests") or ()),
                   tuple(row.get("flags") or ()), row.get("error") or "")


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
    """Memoises `enclave.run_suite` by (state, hidden suite, seed, shuffle, tests), and the
    agent-side public-test check by what decides whether pytest can run at all."""

    def __init__(self) -> None:
        self._runs: dict[str, object] = {}
        self._public: dict[str, object] = {}
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

    def public_run(self, task: Task, enclave):
        """`rlvr.authoring.diagnostics.public_tests_run` of `task`'s buggy state, shared by
        the tasks whose public tests and pytest configuration files are the same (every
        mutant of a family): whether pytest *runs* them (exit 3/4/5 or not) depends on those,
        unless a conftest imports the code under test -- then the whole snapshot is the key."""
        if any(Path(p).name == "conftest.py" for p in task.repo_files):
            basis = dict(task.repo_files)
        else:
            basis = {p: c for p, c in task.repo_files.items()
                     if p in task.public_tests or Path(p).name in CONFIG_NAMES}
        key = files_hash(basis) + ":" + ",".join(sorted(task.public_tests))
        with self._lock:
            if key in self._public:
                return self._public[key]
        outcome = public_tests_run(task, enclave.sandbox, enclave.limits)
        with self._lock:
            return self._public.setdefault(key, outcome)


class _Reject(Exception):
    def __init__(self, reason: str, detail: str, tests: Sequence[str] = (),
                 flags: Sequence[str] = (), error: str = ""):
        super().__init__(detail)
        self.reason, self.detail = reason, detail
        self.tests, self.flags, self.error = tuple(tests), tuple(flags), short_line(error)


def short_line(text: str, limit: int = 200) -> str:
    """The last non-empty line of `text` (where exceptions and pytest put the point),
    cut to `limit` characters."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _flags(runs) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for run in runs:
        for flag in run.safety_flags:
            seen.setdefault(flag, None)
    return tuple(seen)


NOT_PASSING_ON_SEED = ("did not pass on the seed state, before any bug (skipped, or the "
                       "environment lacks what it needs)")


def not_passing_on_seed(task: Task) -> frozenset[str]:
    """Hidden tests a synthetic task's provenance records as not passing on its seed state
    (a real library's suite has them: tests skipped without an optional dependency, tests
    that spawn its CLI or read installed metadata or data files a snapshot leaves out). They
    are quarantined, never graded, instead of failing every candidate as `reference_fails`
    -- SWE-bench likewise grades only its FAIL_TO_PASS / PASS_TO_PASS lists. Hand-authored
    tasks record none: there a reference that does not pass is a broken task."""
    return frozenset((task.provenance or {}).get("not_passing_on_seed") or ())


def hidden_test_modules(task: Task) -> list[str]:
    """The hidden files pytest collects as test modules (test_*.py / *_test.py)."""
    return sorted(p for p in task.hidden_tests if p.endswith(".py") and (
        Path(p).name.startswith("test_") or Path(p).name.endswith("_test.py")))


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
                         task.provenance, rej.tests, rej.flags, rej.error)


def _curate(task: Task, enclave, params: CurationParams, cache: OutcomeCache,
            fixed_state: dict[str, str] | None) -> Task:
    leaks = leaked_lines(task.instruction, task.reference_patch, params.min_instruction_leak_chars)
    if leaks:
        raise _Reject("instruction_leaks", f"instruction contains the fix line {leaks[0]!r}",
                      error=leaks[0])
    try:
        fixed = fixed_state if fixed_state is not None else apply_patch(
            task.repo_files, task.reference_patch, f"{task.task_id}: reference patch")
    except PatchFormatError as exc:
        raise _Reject("reference_fails", str(exc), error=str(exc)) from None
    consensus = int(getattr(enclave, "consensus_runs", 1))
    n_min, n_total = params.reference_runs, params.fixed_state_runs(consensus)
    seeds = [params.seed + 7919 * i for i in range(3 * n_total + 1)]
    # the reference verdict's seed (its consensus runs derive theirs from it): distinct from
    # every fixed-state run's, so its runs are new observations of each graded test
    verify_seed = seeds[n_total]

    # Rule 4, phase 1: discover the hidden test ids on the fixed state, run it n_min times.
    ref_runs = [cache.run(enclave, task, fixed, seed=s) for s in seeds[:n_min]]
    _check_run_statuses(ref_runs, "fixed state")
    test_ids = sorted(set().union(*(r.outcomes for r in ref_runs)))
    _check_modules_collected(task, fixed, enclave, test_ids, _flags(ref_runs))
    recs = flaky.records([r.outcomes for r in ref_runs], test_ids)
    not_passing = not_passing_on_seed(task)
    deterministic = [r.test_id for r in recs if r.passes == 0 and r.test_id not in not_passing]
    if deterministic:
        raise _Reject("reference_fails",
                      f"{len(deterministic)} hidden test(s) fail in every one of {n_min} runs "
                      f"of the reference fix: {', '.join(deterministic[:5])}",
                      tests=deterministic, flags=_flags(ref_runs), error=ref_runs[0].detail)

    # Rules 1 and 5 on phase-1 evidence (cheap: one run of the buggy state).
    pristine = cache.run(enclave, task, task.repo_files, seed=seeds[0], tests=test_ids)
    if pristine.status != "ok":
        raise _Reject("no_pass_to_pass", f"the buggy state's run ended with status "
                                         f"{pristine.status}: no per-test outcomes to grade",
                      flags=pristine.safety_flags, error=pristine.detail)
    _split_tests(recs, pristine, params, not_passing)

    # Rule 4, phase 2: only a candidate the cheap rules kept pays for the remaining runs,
    # and only its graded tests run (a test that already disagreed is quarantined).
    graded = [r.test_id for r in recs if not r.flaky and r.test_id not in not_passing]
    more = [cache.run(enclave, task, fixed, seed=s, tests=graded) for s in seeds[n_min:n_total]]
    if more:
        _check_run_statuses(ref_runs + more, "fixed state")
        recs = flaky.merge(recs, [r.outcomes for r in more], graded)
    fail_to_pass, pass_to_pass, quarantined = _split_tests(recs, pristine, params,
                                                             not_passing)
    curated = task.with_(fail_to_pass=tuple(fail_to_pass), pass_to_pass=tuple(pass_to_pass),
                         quarantined=tuple(quarantined))

    # Rule 2: the reference is accepted by the real grading path (patch policy, consensus).
    # A refusal is evidence of flakiness when the same state passed every earlier run: it is
    # replayed run by run (same seeds) to name the tests, and when replays do not reproduce
    # it (os.urandom, clocks) more fixed-state runs are made -- sequentially, only now that a
    # disagreement has appeared -- until one fails. Tests failing there are quarantined and
    # the verdict is taken again; nothing found: `flaky_suite` (unidentified).
    extra_seeds = iter(seeds[n_total + 1:])
    for attempt in range(3):
        verdict = enclave.verify(curated, curated.reference_patch, seed=verify_seed)
        if verdict.success:
            break
        graded = list(curated.graded_tests)
        replays = [cache.run(enclave, curated, fixed, seed=run_seed(verify_seed, i))
                   for i in range(max(1, verdict.runs))]
        failing = _failing(graded, replays)
        if verdict.reason == "tests_failed" and not failing:
            for s in extra_seeds:
                replays.append(cache.run(enclave, curated, fixed, seed=s, tests=graded))
                failing = _failing(graded, replays[-1:])
                if failing:
                    break
        if verdict.reason != "tests_failed" or attempt == 2:
            raise _Reject("reference_fails", f"verifier refused the reference: {verdict.reason}"
                          + (f" ({', '.join(failing[:5])})" if failing else ""),
                          tests=failing, flags=verdict.safety_flags,
                          error=verdict.detail or next((r.detail for r in replays if r.detail),
                                                       ""))
        if not failing:
            raise _Reject("flaky_suite", "verifier refused the reference (tests_failed) but "
                          f"{len(replays)} further runs of it pass every graded test: some "
                          "test is flaky, none could be named", flags=verdict.safety_flags,
                          error=verdict.detail)
        recs = flaky.merge(recs, [r.outcomes for r in replays], failing)
        fail_to_pass, pass_to_pass, quarantined = _split_tests(recs, pristine, params,
                                                             not_passing)
        curated = curated.with_(fail_to_pass=tuple(fail_to_pass),
                                pass_to_pass=tuple(pass_to_pass),
                                quarantined=tuple(quarantined))

    # Rule 3: deliberately wrong solutions are rejected.
    checks = _wrong_solution_checks(curated, fixed, enclave, params, cache, seeds[0])
    if params.check_public_tests:
        _check_public_tests(curated, enclave, cache)
    curated = curated.with_(checks={
        "reference_runs": n_min + len(more),
        "verify_runs": verdict.runs,
        # P(a test failing flaky_rate of the time was caught) from every fixed-state
        # observation of it: the reference runs and the verdict's consensus runs
        "flaky_catch_probability": round(catch_probability(
            params.flaky_rate, n_min + len(more) + verdict.runs), 4),
        "fail_to_pass": len(fail_to_pass),
        "pass_to_pass": len(pass_to_pass),
        "quarantined": len(quarantined),
        "verifier_version": verdict.verifier_version,
        **checks,
    })
    return curated.with_(split=assign_split(curated.family, params.split, curated.provenance))


def _failing(graded: Sequence[str], runs) -> list[str]:
    """Graded tests some of `runs` (which ran them) did not pass."""
    return [t for t in graded if any(r.outcomes.get(t, "missing") != "passed" for r in runs)]


def _check_run_statuses(runs, state: str) -> None:
    """Every run ended `ok`, or the named rejection: all failed -> `reference_fails` (the
    fix does not run), only some -> `flaky_suite` (the same state sometimes times out /
    hits a limit: nondeterminism, not a wrong fix)."""
    bad = [(i, r) for i, r in enumerate(runs) if r.status != "ok"]
    if not bad:
        return
    i, first = bad[0]
    if len(bad) == len(runs):
        raise _Reject("reference_fails", f"{state} run ended with status {first.status}",
                      flags=_flags(runs), error=first.detail)
    raise _Reject("flaky_suite", f"{len(bad)}/{len(runs)} seeded runs of the {state} ended "
                                 f"with status {first.status} (run {i}), the others ok",
                  flags=_flags(runs), error=first.detail)


def _check_modules_collected(task: Task, fixed: dict[str, str], enclave,
                             test_ids: Sequence[str], flags: Sequence[str]) -> None:
    """Every hidden test module contributes tests on the fixed state. The enclave turns a
    module that cannot be imported into *no items* (its report would need traceback frames
    the sealed runner refuses), so without this check such a module's tests would silently
    not exist: `hidden_import_error`, naming the module, with the import error a trusted
    diagnostic pytest run of the fixed state reports (`rlvr.authoring.diagnostics`)."""
    empty = [m for m in hidden_test_modules(task)
             if not any(t.startswith(m + "::") for t in test_ids)]
    if not empty:
        return
    errors = {}
    try:
        errors = diagnose(task, fixed, enclave.sandbox, limits=enclave.limits).collect_errors
    except Exception as exc:  # noqa: BLE001 - the diagnosis only adds an error line
        errors = {m: f"(no diagnosis: {type(exc).__name__}: {exc})" for m in empty}
    error = next((errors[m] for m in empty if m in errors), "it defines no tests")
    raise _Reject("hidden_import_error",
                  f"hidden module {empty[0]} collected no tests on the reference fix "
                  f"({len(empty)} module(s): {', '.join(empty)})",
                  tests=empty, flags=flags, error=error)


def _split_tests(recs: Sequence[flaky.TestRecord], pristine, params: CurationParams,
                 not_passing: frozenset[str] = frozenset()):
    """FAIL_TO_PASS / PASS_TO_PASS / quarantine from the fixed-state records and the buggy
    run, or the rejection they imply (rules 1, 4, 5; `flaky_suite`). Tests in
    `not_passing` are quarantined as such and grade nothing."""
    known = [(r.test_id, NOT_PASSING_ON_SEED) for r in recs if r.test_id in not_passing]
    recs = [r for r in recs if r.test_id not in not_passing]
    quarantined = [(r.test_id, r.describe()) for r in recs if r.flaky]
    q_ids = [t for t, _ in quarantined]
    if q_ids and len(q_ids) > params.max_flaky_share * len(recs):
        raise _Reject("flaky_suite", f"{len(q_ids)}/{len(recs)} hidden tests are flaky on the "
                      f"reference (max share {params.max_flaky_share:.0%}): "
                      f"{', '.join(q_ids[:5])}", tests=q_ids, error=quarantined[0][1])
    stable = [r.test_id for r in recs if not r.flaky]
    fail_to_pass = [t for t in stable if pristine.outcomes.get(t) != "passed"]
    pass_to_pass = [t for t in stable if t not in fail_to_pass]
    flaky_f2p = [t for t in q_ids if pristine.outcomes.get(t) != "passed"]
    if not fail_to_pass:
        if flaky_f2p:
            raise _Reject("nondeterministic_reference",
                          "every test separating buggy from fixed is flaky on the reference: "
                          f"{', '.join(flaky_f2p[:5])}", tests=flaky_f2p)
        raise _Reject("pristine_passes", "the buggy state passes the whole hidden suite",
                      tests=stable, flags=pristine.safety_flags)
    # Rule 5: a regression guard exists.
    if not pass_to_pass:
        raise _Reject("no_pass_to_pass", "no hidden test passes on both the buggy and the "
                                         "fixed state", tests=fail_to_pass,
                      flags=pristine.safety_flags)
    return fail_to_pass, pass_to_pass, quarantined + known


def _check_public_tests(task: Task, enclave, cache: OutcomeCache) -> None:
    """The agent can run its public tests: `run_tests` through the agent's own executor, in
    the agent's sandbox, on the buggy state (`rlvr.authoring.diagnostics.public_tests_run`)."""
    outcome = cache.public_run(task, enclave)
    if not outcome.runnable:
        raise _Reject("public_tests_unrunnable",
                      f"the agent's run_tests on the buggy state: {outcome.problem}",
                      tests=task.public_tests, error=outcome.error)


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
                              f"(reason {verdict.reason})", flags=verdict.safety_flags,
                              error=verdict.detail)
            continue
        run = cache.run(enclave, task, wrong.files, seed=seed, tests=graded)
        accepted = Enclave.judge(run, graded)[0] == "none"
        if wrong.kind == "mutant":
            mutants_total += 1
            mutants_killed += not accepted
            if accepted:
                survivors.append(wrong.label)
        elif accepted:
            raise _Reject("wrong_solution_passes", f"{wrong.label}: accepted by the hidden suite",
                          tests=graded, flags=run.safety_flags)
    kill_rate = mutants_killed / mutants_total if mutants_total else 1.0
    if kill_rate < params.min_mutant_kill_rate:
        raise _Reject("wrong_solution_passes",
                      f"hidden suite rejects only {mutants_killed}/{mutants_total} other mutants "
                      f"of the fixed function(s) (min {params.min_mutant_kill_rate:.0%}); "
                      f"survivors: {', '.join(survivors[:3])}", error=", ".join(survivors))
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
    candidates = [load_task_dir(d) for d in discover(source)]
    with Enclave.for_sandbox(sandbox) as enclave, \
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
