"""How many reference runs catch a flaky test, and which tests a set of runs shows to be flaky.

Why. A hidden test that fails a fraction `p` of the time on the reference fix and is left in
PASS_TO_PASS fails correct fixes that often. Curation can only see flakiness as disagreement:
the same test passing in one seeded, shuffled run of the fixed state and not in another. With
`n` independent runs, a test whose per-run failure probability is `p` is caught with

    P(caught | p, n) = 1 - (1 - p)^n - p^n        (it neither always passed nor always failed)

Five runs (the old rule) give 1 - 0.8^5 - 0.2^5 = 0.672 at p = 0.2; the smallest `n` with
P >= 0.95 at p = 0.2 is 14 (0.956). No scheme that only watches outcomes can do with fewer
observations of a test that never flakes in front of it: until it does, it looks exactly like a
stable test, so every stable test must be seen `n` times. What a scheme can save is *where*
those runs are spent, and curation's sequential rule (`rlvr.authoring.curation`) spends them

* in two phases: `reference_runs` whole-suite runs first (test discovery, deterministic
  failures, the cheap rules), and the remaining runs only for a candidate that passed every
  cheap rule, so rejected candidates pay nothing extra;
* on the graded tests only (a test that already disagreed is quarantined: no more runs);
* not twice: the reference verdict's consensus runs (fresh seeds, every graded test) are
  observations too -- a refused verdict is followed up until the failing test is named and
  quarantined -- so phase 2 stops `consensus_runs` short of 14 (11 runs + 3 = 14
  observations, P = 0.956 exactly as above).

A test that fails in *every* run is not flaky by this evidence: it fails deterministically on
the reference (`reference_fails`). Outcomes that are `missing` (the run ended before the test)
count as a disagreement with `passed`, like any other non-pass.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence


def catch_probability(p: float, n: int) -> float:
    """P(a test failing independently with probability `p` per run shows both a pass and a
    non-pass within `n` runs)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    if n <= 0:
        return 0.0
    return 1.0 - (1.0 - p) ** n - p ** n


def runs_needed(p: float, catch: float, limit: int = 1000) -> int:
    """The smallest number of runs with `catch_probability(p, n) >= catch`.

    `catch <= 0` means "no flaky check beyond the first run": 1. ValueError when `catch`
    cannot be reached within `limit` runs (p = 0 or 1: such a test never disagrees)."""
    if catch <= 0:
        return 1
    for n in range(1, limit + 1):
        if catch_probability(p, n) >= catch:
            return n
    raise ValueError(f"a test flaky with p={p} is not caught with probability {catch} "
                     f"within {limit} runs")


@dataclass(frozen=True)
class TestRecord:
    """One test's outcomes over the runs that included it."""

    test_id: str
    outcomes: tuple[str, ...]

    @property
    def passes(self) -> int:
        return self.outcomes.count("passed")

    @property
    def flaky(self) -> bool:
        """Passed at least once and did not pass at least once."""
        return 0 < self.passes < len(self.outcomes)

    def describe(self) -> str:
        return (f"flaky_suite: flaky on reference, passed {self.passes}/{len(self.outcomes)} "
                "seeded shuffled runs")


def records(runs: Sequence[Mapping[str, str]], test_ids: Sequence[str]) -> list[TestRecord]:
    """Per-test outcome records from several runs' `outcomes` maps (absent = "missing")."""
    return [TestRecord(t, tuple(r.get(t, "missing") for r in runs)) for t in test_ids]


def merge(first: Sequence[TestRecord], more: Sequence[Mapping[str, str]],
          selected: Sequence[str]) -> list[TestRecord]:
    """`first` extended by the outcomes of the later runs `more`, which ran the tests in
    `selected` (absent from a run = "missing"); the other tests keep their earlier record."""
    chosen = set(selected)
    return [TestRecord(rec.test_id, rec.outcomes + tuple(r.get(rec.test_id, "missing")
                                                          for r in more))
            if rec.test_id in chosen else rec for rec in first]
