"""Flaky-test catch rate of curation's sequential rule vs the old 5-run rule, and its cost.

Why. A hidden test that fails 20% of the time on the reference and stays graded fails correct
fixes; the old rule (5 seeded, shuffled reference runs) caught it with P = 1 - 0.8^5 - 0.2^5
= 0.672. The new rule (`rlvr.authoring.flaky`, `curate.flaky_rate` / `flaky_catch`) runs a
candidate that survives the cheap rules 14 times in all (P = 0.956), and a refused reference
verdict is replayed so that tests failing there are quarantined too.

What. `--tasks` candidates (the mini clamp task with a distinct hidden suite each) carry four
tests failing ~20% of the time, one per source of nondeterminism:

  seeded_random  `random.random() < 0.8` (the enclave seeds `random` per run and test id)
  urandom        `os.urandom(1)[0] < 205`           (P(fail) = 51/256 = 0.199)
  clock          `time.perf_counter_ns() // 1000 % 5 != 0` (the microsecond digit)
  test_order     a test that needs state four sibling tests set: fails when the shuffled order
                 runs it before all four (P = 1/5)

Each candidate goes through the real curation path (`curate_one`, a real enclave) once per
arm, both arms in this one process, interleaved: `old` = reference_runs 5, flaky_catch 0;
`new` = the defaults. A flaky test is *caught* when it ends quarantined or named in a
`flaky_suite` rejection; *leaked* when it ends in FAIL_TO_PASS / PASS_TO_PASS of an accepted
task. Catch rates come with Wilson 95% intervals; cost is wall time and enclave test
executions per candidate (the public-test check is off in both arms: its cost is not the
flaky rule's).

    .venv/bin/python bench/flaky_catch.py --tasks 60
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scipy.stats import binomtest  # noqa: E402

from rlvr.enclave import Enclave  # noqa: E402
from rlvr.authoring.curation import CurationParams, OutcomeCache, Rejection, curate_one  # noqa: E402
from rlvr.authoring.flaky import catch_probability  # noqa: E402
from rlvr.tasks.model import Task  # noqa: E402
from rlvr.tasks.patches import make_patch  # noqa: E402

BUGGY = ("def clamp(x, low, high):\n    if x < low:\n        return low\n"
         "    if x > high:\n        return low\n    return x\n\n\n"
         "def double(x):\n    return 2 * x\n")
FIXED = BUGGY.replace("    if x > high:\n        return low", "    if x > high:\n        return high")
PUBLIC = "from mini.core import clamp\n\n\ndef test_clamp_below():\n    assert clamp(-5, 0, 10) == 0\n"
KINDS = ("seeded_random", "urandom", "clock", "test_order")
# What counts as caught per arm: the old code quarantined only what its 5 runs saw disagree
# (a later refusal of the reference rejected the whole task as reference_fails).
CAUGHT = {"old": ("caught",), "new": ("caught", "caught_later", "caught_suite")}


def hidden_suite(k: int) -> str:
    """Stable tests, four order-setters and one flaky test per kind; names carry `k` so every
    candidate's seeded outcomes differ, and random setter names plus 0-6 filler tests give
    every candidate its own shuffled orders (the enclave shuffles the sorted ids by the run
    seed alone: same-shaped suites would share one permutation per seed)."""
    rng = random.Random(k)
    setters = "".join(f"\n\ndef test_{rng.choice('abcdefghijklmnopqrstuvwxyz')}"
                      f"{rng.randrange(10**6)}_{k}_{i}():\n    _STATE.add({i})\n"
                      for i in range(4))
    setters += "".join(f"\n\ndef test_fill_{k}_{j}():\n    assert double({j}) == {2 * j}\n"
                       for j in range(rng.randrange(7)))
    return f'''import os
import random
import time

from mini.core import clamp, double

_STATE = set()


def test_clamp_above_{k}():
    assert clamp(50, 0, 10) == 10


def test_clamp_inside_{k}():
    assert clamp(5, 0, 10) == 5


def test_clamp_below_{k}():
    assert clamp(-5, 0, 10) == 0


def test_double_{k}():
    assert double(4) == 8
{setters}

def test_seeded_random_{k}():
    assert random.random() < 0.8


def test_urandom_{k}():
    assert os.urandom(1)[0] < 205


def test_clock_{k}():
    assert time.perf_counter_ns() // 1000 % 5 != 0


def test_test_order_{k}():
    assert _STATE
'''


def make_task(k: int) -> Task:
    repo = {"mini/__init__.py": "", "mini/core.py": BUGGY, "tests/test_public.py": PUBLIC}
    return Task(task_id=f"flaky-{k:03d}", family="mini",
                instruction="clamp returns the lower bound for values above the range.",
                repo_files=repo, public_tests=("tests/test_public.py",),
                hidden_tests={"test_hidden.py": hidden_suite(k)},
                reference_patch=make_patch({"mini/core.py": BUGGY}, {"mini/core.py": FIXED}))


class CountingEnclave:
    """The enclave, counting suite runs and test executions (verify: its runs x tests)."""

    def __init__(self, enclave: Enclave):
        self.inner, self.sandbox, self.limits = enclave, enclave.sandbox, enclave.limits
        self.consensus_runs = enclave.consensus_runs
        self.runs = self.tests = 0

    def run_suite(self, task, patch, **kw):
        run = self.inner.run_suite(task, patch, **kw)
        self.runs += 1
        self.tests += len(run.outcomes)
        return run

    def verify(self, task, patch, **kw):
        verdict = self.inner.verify(task, patch, **kw)
        self.runs += verdict.runs
        self.tests += verdict.runs * (len(task.graded_tests) + len(task.quarantined))
        return verdict


def flaky_ids(k: int) -> dict[str, str]:
    return {f"test_hidden.py::test_{kind}_{k}": kind for kind in KINDS}


_EVIDENCE = re.compile(r"passed (\d+)/(\d+) ")


def fate(result, test_id: str, phase1_runs: int) -> str:
    """caught (quarantined within the first `phase1_runs` runs: all the old rule had),
    caught_later (by phase 2 or a refused reference verdict's follow-up runs), caught_suite
    (named in a flaky_suite rejection), leaked (graded in an accepted task), task_rejected."""
    if isinstance(result, Rejection):
        if result.reason == "flaky_suite" and test_id in result.tests:
            return "caught_suite"
        return "task_rejected"
    reason = dict(result.quarantined).get(test_id)
    if reason is not None:
        seen = _EVIDENCE.search(reason)
        return "caught" if seen and int(seen.group(2)) <= phase1_runs else "caught_later"
    return "leaked" if test_id in result.graded_tests else "absent"


def wilson(k: int, n: int) -> tuple[float, float]:
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return round(ci.low, 4), round(ci.high, 4)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=60)
    ap.add_argument("--backend", default="bwrap", choices=["bwrap", "docker"])
    ap.add_argument("--max-mutants", type=int, default=2)
    ap.add_argument("--calibrate", type=int, default=40,
                    help="fixed-state runs of each of the first 5 candidates that measure "
                    "each kind's real failure rate")
    args = ap.parse_args()

    base = CurationParams(max_mutants=args.max_mutants, check_public_tests=False)
    arms = {"old": replace(base, reference_runs=5, flaky_catch=0.0), "new": base}
    stats = {a: {"wall_s": 0.0, "runs": 0, "tests": 0, "fates": {}, "by_kind": {},
                 "accepted": 0, "rejected": {}} for a in arms}
    with Enclave(backend=args.backend, workers=1) as enclave:
        enclave.warm_up()
        for k in range(args.tasks):
            task = make_task(k)
            for arm, params in arms.items():
                counting = CountingEnclave(enclave)
                t0 = time.perf_counter()
                result = curate_one(task, counting, params, OutcomeCache())
                st = stats[arm]
                st["wall_s"] += time.perf_counter() - t0
                st["runs"] += counting.runs
                st["tests"] += counting.tests
                if isinstance(result, Rejection):
                    st["rejected"][result.reason] = st["rejected"].get(result.reason, 0) + 1
                else:
                    st["accepted"] += 1
                for tid, kind in flaky_ids(k).items():
                    f = fate(result, tid, params.reference_runs)
                    st["fates"][f] = st["fates"].get(f, 0) + 1
                    per = st["by_kind"].setdefault(kind, {"caught": 0, "n": 0})
                    per["n"] += 1
                    per["caught"] += f in CAUGHT[arm]
        fails = {kind: [0, 0] for kind in KINDS}
        for k in range(min(5, args.tasks)):
            task = make_task(k)
            patch = task.reference_patch
            for r in range(args.calibrate):
                run = enclave.run_suite(task, patch, seed=10**6 + r)
                for tid, kind in flaky_ids(k).items():
                    fails[kind][0] += run.outcomes.get(tid) != "passed"
                    fails[kind][1] += 1
    n = args.tasks
    report = {"tasks": n, "flaky_tests_per_arm": n * len(KINDS), "backend": args.backend,
              "theory_p0.2": {"old_5_runs": round(catch_probability(0.2, 5), 4),
                              "new_14_runs": round(catch_probability(0.2, 14), 4)},
              "measured_fail_rate": {kind: {"rate": round(f / t, 3), "ci95": wilson(f, t)}
                                     for kind, (f, t) in fails.items() if t}}
    for arm, st in stats.items():
        caught = sum(st["fates"].get(f, 0) for f in CAUGHT[arm])
        total = n * len(KINDS)
        leaked = st["fates"].get("leaked", 0)
        report[arm] = {
            "catch_rate": round(caught / total, 4), "catch_ci95": wilson(caught, total),
            "leak_rate": round(leaked / total, 4), "leak_ci95": wilson(leaked, total),
            "fates": st["fates"], "accepted_tasks": st["accepted"], "rejected": st["rejected"],
            "by_kind": {k: f"{v['caught']}/{v['n']}" for k, v in sorted(st["by_kind"].items())},
            "wall_s_per_task": round(st["wall_s"] / n, 4),
            "enclave_runs_per_task": round(st["runs"] / n, 2),
            "test_executions_per_task": round(st["tests"] / n, 1),
        }
    report["ratios_new_over_old"] = {
        key: round(report["new"][key] / report["old"][key], 2)
        for key in ("wall_s_per_task", "enclave_runs_per_task", "test_executions_per_task")}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
