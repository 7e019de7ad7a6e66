"""False-pass rate of a lucky broken patch with and without flaky-test consensus (SPEC §4).

The task's hidden suite has a regression guard and one test that exercises `scale()`. The
broken patch makes `scale()` right only when the *seeded* `random` says so, 20% of the time:
exactly the lucky-pass situation consensus exists for. Because the runner seeds `random`
from the run seed (per test), every trial is reproducible.

Each trial is one `Enclave.verify` with its own seed; R=1 counts a first pass, R=3 re-runs a
first pass twice more (fresh children, derived seeds, shuffled order) and counts it only if
all pass. Expected: ≈0.2 and ≈0.2³ = 0.008. The reference fix must pass every trial.

    python bench/consensus.py [--trials 1000] [--workers 2] [--backend bwrap]
"""
from __future__ import annotations

import argparse
import math
import os
import time

from _common import emit

from rlvr.enclave import Enclave
from rlvr.sandbox import Limits
from rlvr.tasks.model import Task
from rlvr.tasks.patches import make_patch

BUGGY = '''\
def scale(x):
    return x * 3


def offset(x):
    return x + 1
'''
FIXED = BUGGY.replace("x * 3", "x * 2")
LUCKY = BUGGY.replace("    return x * 3", "    import random\n    return x * 2 if random.random() < 0.2 else x * 3")
HIDDEN = {
    "test_scale.py": "from flaky import scale\n\n\ndef test_scale():\n    assert scale(21) == 42\n",
    "test_offset.py": "from flaky import offset\n\n\ndef test_offset():\n    assert offset(41) == 42\n",
}
REPO = {"flaky/__init__.py": "from flaky.core import offset, scale\n", "flaky/core.py": BUGGY}


def make_task() -> Task:
    return Task(
        task_id="bench-consensus", family="bench", instruction="scale() should double its input",
        repo_files=REPO, public_tests=(), hidden_tests=HIDDEN,
        reference_patch=make_patch(REPO, {**REPO, "flaky/core.py": FIXED}),
        fail_to_pass=("test_scale.py::test_scale",), pass_to_pass=("test_offset.py::test_offset",),
    )


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def run(backend: str, trials: int, workers: int, runs: int, patch: str, task: Task, seed0: int) -> dict:
    limits = Limits(wall_seconds=20, cpu_seconds=20, memory_bytes=1 << 30)
    with Enclave(backend=backend, limits=limits, workers=workers, consensus_runs=runs) as enclave:
        enclave.warm_up()
        t = time.monotonic()
        verdicts = enclave.verify_many([(task, patch, seed0 + i) for i in range(trials)])
        wall = time.monotonic() - t
    passes = sum(v.success for v in verdicts)
    reasons: dict[str, int] = {}
    for v in verdicts:
        reasons[v.reason] = reasons.get(v.reason, 0) + 1
    lo, hi = wilson(passes, trials)
    return {"R": runs, "trials": trials, "passes": passes, "rate": passes / trials, "ci95": [round(lo, 4), round(hi, 4)],
            "suite_runs": sum(v.runs for v in verdicts), "wall_s": round(wall, 2), "reasons": reasons}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--backend", default="bwrap")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    task = make_task()
    lucky = make_patch(REPO, {**REPO, "flaky/core.py": LUCKY})

    results = {}
    for r in (1, 3):
        res = run(args.backend, args.trials, args.workers, r, lucky, task, args.seed)
        results[f"R{r}"] = res
        print(f"R={r}: {res['passes']}/{res['trials']} lucky passes = {res['rate']:.4f} "
              f"(95% CI {res['ci95'][0]:.4f}-{res['ci95'][1]:.4f}), {res['suite_runs']} suite runs, "
              f"{res['wall_s']:.1f}s ({res['wall_s'] / res['suite_runs'] * 1000:.0f} ms/run on {args.workers} workers)")
    ref = run(args.backend, 50, args.workers, 3, task.reference_patch, task, args.seed)
    print(f"reference fix with R=3: {ref['passes']}/{ref['trials']} pass")
    print(f"expected: R=1 ~0.2, R=3 ~0.2^3 = 0.008; load average {os.getloadavg()[0]:.1f}")
    if ref["passes"] != ref["trials"]:
        raise SystemExit("the reference fix failed a trial")
    emit({"bench": "consensus", "backend": args.backend, "workers": args.workers,
          "false_pass_R1": round(results["R1"]["rate"], 4), "false_pass_R3": round(results["R3"]["rate"], 4),
          "ci95_R1": results["R1"]["ci95"], "ci95_R3": results["R3"]["ci95"], "trials": args.trials,
          "suite_runs_R1": results["R1"]["suite_runs"], "suite_runs_R3": results["R3"]["suite_runs"],
          "reference_pass_rate": ref["passes"] / ref["trials"]})


if __name__ == "__main__":
    main()
