"""Synthesis pipeline: seed families -> mutants -> validated synthetic tasks (SPEC §2).

1. enumerate and sample candidate bugs per (family, operator) (candidates.py);
2. run each family's full suite on the seed state once and on every mutant state, through the
   enclave, in parallel over its workers, memoised by state in curation's `OutcomeCache`
   (the seed state's runs serve every task of the family);
3. classify: a mutant that fails no test is an `equivalent_mutant`, one that does not compile
   / import / finish is an `invalid_mutant`; the rest have FAIL_TO_PASS (fail on the mutant,
   pass on the seed) and PASS_TO_PASS (pass on both);
4. pair proven single bugs into combined two-bug candidates and do 2-3 for them;
5. build each task: buggy repo + public tests (public_tests.py), reference = diff
   mutant -> seed, issue-style instruction from the probed failure (instructions.py),
   provenance; task id from the provenance;
6. hand every task to curation (`curate`): distinguishability rules, quarantine, dedup,
   family-level split.

Nothing is dropped silently: every candidate ends as an accepted task or a `Rejection`.
"""
from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from rlvr.errors import ConfigError
from rlvr.authoring.curation import CurationParams, OutcomeCache, Rejection, curate, leaked_lines
from rlvr.tasks.model import Task, files_hash
from rlvr.tasks.patches import make_patch
from rlvr.tasks.project_config import for_files
from rlvr.authoring.synth.cache import FamilyOutcomeCache
from rlvr.authoring.synth.candidates import Candidate, combined_candidates, sibling_keys, \
    single_candidates
from rlvr.authoring.synth.instructions import ProbeJob, probe, write_instruction
from rlvr.tasks.operators import SINGLE_OPERATORS
from rlvr.authoring.synth.public_tests import materialise, select_public
from rlvr.authoring.synth.seeds import SeedFamily

SOURCE = "synthetic"


@dataclass(frozen=True)
class PublicParams:
    fail_to_pass: int = 1     # FAIL_TO_PASS tests shown in the workspace (at least 1)
    pass_to_pass: int = 2     # PASS_TO_PASS tests shown as regression context


@dataclass(frozen=True)
class CorpusParams:
    """`synthesize.corpus`: bug injection into the real libraries of data/real/corpus.toml
    (rlvr.authoring.synth.corpus_families), each its own family. Their suites are larger than a
    seed family's, hence their own, smaller budget."""

    libraries: list[str] = field(default_factory=list)  # by lock name; empty: none
    per_operator: int = 2      # sampled single-bug candidates per (library, operator)
    combined: int = 2          # two-bug candidates per library

    def __post_init__(self) -> None:
        for key in ("per_operator", "combined"):
            if getattr(self, key) < 0:
                raise ConfigError(f"synthesize.corpus.{key}: must be >= 0")


@dataclass(frozen=True)
class SynthParams:
    """The `synthesize:` section of params.yaml."""

    seed: int = 0
    families: list[str] = field(default_factory=list)   # empty: every usable family
    operators: list[str] = field(default_factory=list)  # empty: every single-bug operator
    per_operator: int = 30     # sampled single-bug candidates per (family, operator)
    combined: int = 20         # two-bug candidates per family (from proven single bugs)
    public: PublicParams = field(default_factory=PublicParams)
    corpus: CorpusParams = field(default_factory=CorpusParams)
    probe_timeout_s: float = 10.0
    # CPU-second budget of one suite run (wall: sandbox.base.WAIT_FACTOR x it): a mutant that
    # loops forever must not cost the sandbox's general limit each time (the seed suites
    # run in about a second, the slowest state seen in 7 s of CPU).
    suite_timeout_s: float = 10.0
    # Consensus runs of the enclave's `verify` of each reference (curation rule 2). Rule 4
    # already re-runs the fixed state `curate.reference_runs` times with shuffled order, so
    # one verify run through the real grading path is enough here.
    consensus_runs: int = 1

    def __post_init__(self) -> None:
        unknown = [op for op in self.operators if op not in SINGLE_OPERATORS]
        if unknown:
            raise ConfigError(f"synthesize.operators: unknown operator '{unknown[0]}' "
                              f"(known: {', '.join(SINGLE_OPERATORS)})")
        for key in ("per_operator", "combined", "public.pass_to_pass"):
            obj, name = (self.public, key.split(".")[1]) if "." in key else (self, key)
            if getattr(obj, name) < 0:
                raise ConfigError(f"synthesize.{key}: must be >= 0")
        if self.consensus_runs < 1:
            raise ConfigError("synthesize.consensus_runs: must be >= 1")
        if self.suite_timeout_s <= 0 or self.probe_timeout_s <= 0:
            raise ConfigError("synthesize.suite_timeout_s / probe_timeout_s: must be > 0")
        if self.public.fail_to_pass < 1:
            raise ConfigError("synthesize.public.fail_to_pass: must be >= 1")

    @property
    def operator_names(self) -> tuple[str, ...]:
        return tuple(self.operators) if self.operators else SINGLE_OPERATORS

    def for_corpus(self) -> "SynthParams":
        """These params with the corpus budget in place of the seed families' one."""
        return dataclasses.replace(self, per_operator=self.corpus.per_operator,
                                   combined=self.corpus.combined)


@dataclass
class Evaluated:
    """A candidate after its suite run: FAIL_TO_PASS / PASS_TO_PASS or why it is refused."""

    candidate: Candidate
    task_id: str
    state: dict[str, str]
    fail_to_pass: list[str] = field(default_factory=list)
    pass_to_pass: list[str] = field(default_factory=list)
    rejection: tuple[str, str] | None = None     # (reason, detail)
    groups: list[list[str]] = field(default_factory=list)  # per bug: the tests it alone breaks


@dataclass
class SynthResult:
    accepted: list[Task]
    rejections: list[Rejection]
    skipped_families: dict[str, str]
    candidates: dict[str, tuple[str, str]]   # task_id -> (family, operator), every candidate
    seconds: float = 0.0
    suite_runs: dict[str, int] = field(default_factory=dict)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    probe_unobserved: int = 0
    probe_jobs: int = 0    # sandboxed probe runs (one per task built)

    def yield_rows(self) -> list[dict]:
        """One row per (family, operator): candidates, accepted, rejections by reason."""
        return yield_rows(self.candidates, self.accepted, self.rejections)

    def stats(self) -> dict:
        stats = yield_stats(self.candidates, self.accepted, self.rejections,
                            skipped=self.skipped_families, seconds=self.seconds,
                            suite_runs=self.suite_runs)
        stats["probe_unobserved"] = self.probe_unobserved
        if self.phase_seconds:
            stats["phase_seconds"] = dict(self.phase_seconds)
        return stats


def base_task(family: SeedFamily) -> Task:
    """The seed state as a task: what every suite run of the family is made against."""
    return Task(task_id=f"seed-{family.name}", family=family.name, instruction="seed state",
                repo_files=dict(family.repo_files), public_tests=(),
                hidden_tests=dict(family.tests), reference_patch="", source=SOURCE,
                dependencies=family.dependencies)


def graded_family(family: SeedFamily, outcomes: Mapping[str, str]) -> SeedFamily:
    """`family` as its seed run can grade it: hidden test modules that collected nothing
    there (they cannot be imported in this environment) leave the suite, their text
    unchanged; tests that did not pass there (failed, errored, skipped) are recorded
    (`not_passing_on_seed`: curation quarantines them, rlvr.authoring.curation.not_passing_on_seed).
    A family whose suite all passes (every seed family here) comes back as it is."""
    collected = {t.split("::", 1)[0] for t in outcomes}
    dead = [m for m in family.tests if _is_test_module(m) and m not in collected]
    failing = tuple(sorted(t for t, o in outcomes.items() if o != "passed"))
    if not dead and not failing:
        return family
    tests = {p: c for p, c in family.tests.items() if p not in dead}
    return dataclasses.replace(family, tests=tests, not_passing_on_seed=failing,
                               dropped_modules=tuple(sorted(dead)))


def _is_test_module(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def _parallel(fn, items, workers: int):
    if workers <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, items))


def _classify(ev: Evaluated, run, passing_on_seed: set[str]) -> None:
    if run.status == "timeout":
        ev.rejection = ("invalid_mutant", "the suite timed out on the mutant")
        return
    if run.status != "ok":
        ev.rejection = ("invalid_mutant", f"the suite did not run on the mutant "
                                          f"(status {run.status}): it does not import")
        return
    outcomes = run.outcomes
    if not outcomes or all(o == "error" for o in outcomes.values()):
        ev.rejection = ("invalid_mutant", "no test runs on the mutant: it does not import")
        return
    ev.fail_to_pass = sorted(t for t in passing_on_seed if outcomes.get(t) != "passed")
    ev.pass_to_pass = sorted(t for t in passing_on_seed if outcomes.get(t) == "passed")
    if not ev.fail_to_pass:
        ev.rejection = ("equivalent_mutant", "no hidden test fails on the mutant")


class Synthesizer:
    """Runs the pipeline for a set of families against one enclave and one outcome cache."""

    def __init__(self, params: SynthParams, curation: CurationParams, enclave, sandbox, *,
                 workers: int = 1, cache: OutcomeCache | None = None,
                 progress: Callable[[str, int], None] | None = None,
                 known: Mapping[str, str] | None = None,
                 family_params: Mapping[str, SynthParams] | None = None):
        self.params = params
        # per-family budgets (the corpus libraries': SynthParams.for_corpus)
        self.family_params = dict(family_params or {})
        # content hash -> id of tasks already in the pool (hand-authored ones): a candidate
        # with the same normalised content is a duplicate, like two equal candidates.
        self.known = dict(known or {})
        self.curation = curation
        self.enclave = enclave
        self.sandbox = sandbox
        self.workers = max(1, workers)
        self.cache = cache if cache is not None else FamilyOutcomeCache()
        self._lock = threading.Lock()  # families are prepared in parallel threads
        report = progress or (lambda stage, n: None)

        def locked_progress(stage: str, n: int) -> None:
            with self._lock:
                report(stage, n)

        self.progress = locked_progress
        # tasks whose probe saw none of their public failing tests fail (the instruction
        # then only lists them): should stay 0; counted in the report, never hidden
        self.probe_unobserved = 0
        self.probe_jobs = 0

    # ---- suite runs ----------------------------------------------------------------------
    def _run(self, base: Task, state: dict[str, str]):
        return self.cache.run(self.enclave, base, state, seed=self.curation.seed)

    def seed_outcomes(self, family: SeedFamily) -> set[str] | str:
        """Tests passing on the seed state, or the reason the family cannot be used."""
        run = self.seed_run(family)
        return run if isinstance(run, str) else {t for t, o in run.outcomes.items()
                                                 if o == "passed"}

    def seed_run(self, family: SeedFamily):
        """The seed state's full suite run, or the reason the family cannot be used."""
        run = self._run(base_task(family), family.repo_files)
        if run.status != "ok":
            return f"the seed state's suite run ended with status {run.status}"
        if not any(o == "passed" for o in run.outcomes.values()):
            return "no test passes on the seed state"
        return run

    def evaluate(self, family: SeedFamily, candidates: Sequence[Candidate],
                 passing: set[str], seen_states: dict[str, str]) -> list[Evaluated]:
        evs: list[Evaluated] = []
        to_run: list[Evaluated] = []
        for cand in candidates:
            state = cand.state(family)
            ev = Evaluated(cand, cand.task_id(family), state)
            evs.append(ev)
            invalid = cand.invalid_reason(family, state)
            if invalid:
                ev.rejection = ("invalid_mutant", invalid)
                continue
            key = files_hash(state)
            if key in seen_states:
                ev.rejection = ("duplicate", f"same mutant as {seen_states[key]}")
                continue
            seen_states[key] = ev.task_id
            to_run.append(ev)
        base = base_task(family)

        def one(ev: Evaluated):
            run = self._run(base, ev.state)
            self.progress("mutants", 1)
            return run

        for ev, run in zip(to_run, _parallel(one, to_run, self.workers)):
            _classify(ev, run, passing)
        return evs

    # ---- task building ---------------------------------------------------------------------
    def build(self, family: SeedFamily, evs: Sequence[Evaluated]) -> tuple[
            list[Task], dict[str, dict[str, str]]]:
        """Tasks (before curation) for the proven candidates + their fixed states."""
        p = self.family_params.get(family.name, self.params)
        drafts = []
        for ev in evs:
            rng = random.Random(f"{p.seed}:{ev.task_id}:public")
            selected = select_public(ev.fail_to_pass, ev.pass_to_pass,
                                     n_fail=max(p.public.fail_to_pass, len(ev.groups)),
                                     n_pass=p.public.pass_to_pass, rng=rng, groups=ev.groups)
            public_files, mapping = materialise(family.tests, selected)
            repo = {**ev.state, **public_files}
            fixed = {**family.repo_files, **public_files}
            failing_public = [mapping[t] for t in selected if t in set(ev.fail_to_pass)]
            drafts.append((ev, repo, fixed, public_files, failing_public))
        overrides = tuple(for_files(family.repo_files, family.dependencies).pytest_overrides())
        jobs = [ProbeJob(ev.task_id, repo, tuple(failing), overrides, family.dependencies)
                for ev, repo, _, _, failing in drafts]
        failures = probe(self.sandbox, jobs, workers=self.workers,
                         timeout_s=p.probe_timeout_s)
        self.progress("probes", len(jobs))
        with self._lock:
            self.probe_jobs += len(jobs)
        tasks, fixed_states = [], {}
        leak = lambda text, patch: leaked_lines(  # noqa: E731
            text, patch, self.curation.min_instruction_leak_chars)
        for ev, repo, fixed, public_files, failing in drafts:
            if not set(failures[ev.task_id]) & set(failing):
                with self._lock:
                    self.probe_unobserved += 1
            reference = make_patch(repo, fixed)
            instruction = write_instruction(family.package, list(failures[ev.task_id].values()),
                                            failing, reference, leak_check=leak)
            provenance = ev.candidate.provenance(family, p.seed)
            tasks.append(Task(
                task_id=ev.task_id, family=family.name, instruction=instruction,
                repo_files=repo, public_tests=tuple(sorted(public_files)),
                hidden_tests=dict(family.tests), reference_patch=reference, source=SOURCE,
                provenance=provenance, dependencies=family.dependencies,
            ))
            fixed_states[ev.task_id] = fixed
        return tasks, fixed_states

    # ---- the whole thing -------------------------------------------------------------------
    def prepare(self, family: SeedFamily) -> "_Prepared":
        """One family up to curation: seed run, candidates, suite runs, task drafts."""
        p = self.family_params.get(family.name, self.params)
        t0 = time.perf_counter()
        if isinstance(self.cache, FamilyOutcomeCache):
            self.cache.register(base_task(family))
        seed_run = self.seed_run(family)
        if isinstance(seed_run, str):
            return _Prepared(family.name, skipped=seed_run)
        graded = graded_family(family, seed_run.outcomes)
        if graded is not family and isinstance(self.cache, FamilyOutcomeCache):
            self.cache.register(base_task(graded))
        family = graded
        passing = {t for t, o in seed_run.outcomes.items() if o == "passed"}
        seen: dict[str, str] = {}
        prefer = sibling_keys(family, limit=self.curation.max_mutants, seed=self.curation.seed)
        singles = single_candidates(family, per_operator=p.per_operator, seed=p.seed,
                                    operators=p.operator_names, prefer=prefer)
        evs = self.evaluate(family, singles, passing, seen)
        proven = [ev.candidate for ev in evs if ev.rejection is None]
        breaks = {ev.candidate.parts[0].key: ev.fail_to_pass for ev in evs
                  if ev.rejection is None}
        combos = combined_candidates(family, proven, budget=p.combined, seed=p.seed)
        combo_evs = self.evaluate(family, combos, passing, seen)
        for ev in combo_evs:
            ev.groups = [breaks[part.key] for part in ev.candidate.parts]
        evs += combo_evs
        out = _Prepared(family.name)
        for ev in evs:
            out.candidates[ev.task_id] = (family.name, ev.candidate.operator)
            if ev.rejection is not None:
                reason, detail = ev.rejection
                out.rejections.append(Rejection(
                    ev.task_id, family.name, SOURCE, reason, detail,
                    ev.candidate.provenance(family, p.seed)))
        t1 = time.perf_counter()
        out.drafts, out.fixed_states = self.build(family,
                                                  [ev for ev in evs if ev.rejection is None])
        out.phases = {"mutants": t1 - t0, "build": time.perf_counter() - t1}
        return out

    def run(self, families: Sequence[SeedFamily],
            skipped: dict[str, str] | None = None) -> SynthResult:
        """Every family is prepared (with `workers` > 1, up to `workers` families at once, so
        one family's serial steps — its seed run, candidate enumeration, task building —
        overlap another's suite runs), then all drafts are curated together. Results are
        assembled in family order, so they do not depend on thread timing."""
        start = time.perf_counter()
        skipped = dict(skipped or {})
        candidates: dict[str, tuple[str, str]] = {}
        rejections: list[Rejection] = []
        drafts: list[Task] = []
        fixed_states: dict[str, dict[str, str]] = {}
        phases: Counter = Counter()
        for out in _parallel(self.prepare, list(families), min(self.workers, len(families))):
            if out.skipped is not None:
                skipped[out.family] = out.skipped
                continue
            candidates.update(out.candidates)
            rejections += out.rejections
            drafts += out.drafts
            fixed_states.update(out.fixed_states)
            phases.update(out.phases)  # summed over families (they overlap when parallel)
        t2 = time.perf_counter()
        result = curate(drafts, self.enclave, self.curation, cache=self.cache,
                        workers=self.workers, fixed_states=fixed_states,
                        progress=lambda n: self.progress("curate", n), known=self.known)
        phases["curate"] += time.perf_counter() - t2
        accepted = sorted(result.accepted, key=lambda t: t.task_id)
        rejections = sorted(rejections + result.rejections, key=lambda r: r.task_id)
        return SynthResult(accepted, rejections, skipped, candidates,
                           seconds=time.perf_counter() - start,
                           suite_runs={"cache_hits": self.cache.hits,
                                       "cache_misses": self.cache.misses},
                           phase_seconds={k: round(v, 3) for k, v in sorted(phases.items())},
                           probe_unobserved=self.probe_unobserved,
                           probe_jobs=self.probe_jobs)


@dataclass
class _Prepared:
    """One family's share of a run, before curation."""

    family: str
    skipped: str | None = None
    candidates: dict[str, tuple[str, str]] = field(default_factory=dict)
    rejections: list[Rejection] = field(default_factory=list)
    drafts: list[Task] = field(default_factory=list)
    fixed_states: dict[str, dict[str, str]] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)


# ---- yield report --------------------------------------------------------------------------
def yield_rows(candidates: dict[str, tuple[str, str]], accepted: Sequence[Task],
               rejections: Sequence[Rejection]) -> list[dict]:
    table: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for family, op in candidates.values():
        table[(family, op)]["candidates"] += 1
    for t in accepted:
        table[candidates[t.task_id]]["accepted"] += 1
    for r in rejections:
        if r.task_id in candidates:
            table[candidates[r.task_id]][f"rejected_{r.reason}"] += 1
    rows = []
    for (family, op), c in sorted(table.items()):
        n = c["candidates"]
        rows.append({"family": family, "operator": op, "candidates": n,
                     "accepted": c["accepted"],
                     "yield": round(c["accepted"] / n, 4) if n else 0.0,
                     **{k: v for k, v in sorted(c.items()) if k.startswith("rejected_")}})
    return rows


def _group(rows: list[dict], key: str) -> dict[str, dict]:
    out: dict[str, Counter] = defaultdict(Counter)
    for row in rows:
        for k, v in row.items():
            if k in ("candidates", "accepted") or k.startswith("rejected_"):
                out[row[key]][k] += v
    return {name: {**dict(sorted(c.items())),
                   "yield": round(c["accepted"] / c["candidates"], 4) if c["candidates"] else 0.0}
            for name, c in sorted(out.items())}


def yield_stats(candidates, accepted, rejections, *, skipped=None, seconds=0.0,
                suite_runs=None) -> dict:
    rows = yield_rows(candidates, accepted, rejections)
    by_reason = Counter(r.reason for r in rejections)
    n = len(candidates)
    stats = {
        "candidates": n,
        "accepted": len(accepted),
        "rejected": len(rejections),
        "yield": round(len(accepted) / n, 4) if n else 0.0,
        "rejected_by_reason": dict(sorted(by_reason.items())),
        "by_operator": _group(rows, "operator"),
        "by_family": _group(rows, "family"),
        "by_split": dict(sorted(Counter(t.split for t in accepted).items())),
        "skipped_families": dict(sorted((skipped or {}).items())),
        "seconds": round(seconds, 3),
        "tasks_per_minute": round(60 * len(accepted) / seconds, 2) if seconds else 0.0,
    }
    if suite_runs:
        stats["suite_runs"] = suite_runs
    return stats
