"""Synthesis throughput: validated (curated, accepted) tasks per minute, serial vs parallel.

Run: `.venv/bin/python bench/synthesize.py [--families textkit,caching] [--per-operator 4]
[--combined 4] [--workers 1,2] [--ablate-cache] [--quick]`.

Each mode runs the whole pipeline (candidates -> suite runs -> public tests + probed
instructions -> curation) on the same real seed families with the same params, with a fresh
enclave (fork-servers started before the clock) and a fresh outcome cache, in this one
process, one mode after the other. `--ablate-cache` adds a run with curation's plain
`OutcomeCache` (keyed by the whole state, so nothing is shared between the tasks of a
family) at the highest worker count, to show what `FamilyOutcomeCache` saves. Reported per
mode: accepted tasks, seconds, tasks/min, suite runs (cache misses) per accepted task and
the phase split; then the parallel/serial speed-up. Same seed -> the modes must accept the
same task ids (checked). The last line is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("RLVR_PROGRESS", "0")

from rlvr.enclave import Enclave  # noqa: E402
from rlvr.sandbox import Limits, get_sandbox  # noqa: E402
from rlvr.tasks.curation import CurationParams, OutcomeCache  # noqa: E402
from rlvr.tasks.synth.pipeline import SynthParams, Synthesizer  # noqa: E402
from rlvr.tasks.synth.seeds import discover  # noqa: E402


def run_mode(label: str, workers: int, families, synth: SynthParams, cur: CurationParams,
             cache=None) -> dict:
    sandbox = get_sandbox("bwrap")
    with Enclave(backend="bwrap", workers=workers, consensus_runs=synth.consensus_runs,
                 limits=Limits(wall_seconds=synth.suite_timeout_s)) as enclave:
        enclave.warm_up()
        start = time.perf_counter()
        result = Synthesizer(synth, cur, enclave, sandbox, workers=workers,
                             cache=cache).run(families)
        seconds = time.perf_counter() - start
    accepted = len(result.accepted)
    misses = result.suite_runs.get("cache_misses", 0)
    row = {
        "mode": label, "workers": workers, "candidates": len(result.candidates),
        "accepted": accepted, "seconds": round(seconds, 2),
        "tasks_per_min": round(60 * accepted / seconds, 1) if seconds else 0.0,
        "suite_runs": misses, "runs_per_task": round(misses / accepted, 2) if accepted else None,
        "phase_seconds": result.phase_seconds,
        "task_ids": sorted(t.task_id for t in result.accepted),
    }
    print(f"{label:>12}: {accepted} accepted / {row['candidates']} candidates in "
          f"{seconds:.1f}s = {row['tasks_per_min']} tasks/min; {misses} suite runs "
          f"({row['runs_per_task']}/task); phases {result.phase_seconds}", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default="textkit,caching")
    ap.add_argument("--per-operator", type=int, default=4)
    ap.add_argument("--combined", type=int, default=4)
    ap.add_argument("--reference-runs", type=int, default=5)
    ap.add_argument("--max-mutants", type=int, default=4)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--ablate-cache", action="store_true")
    ap.add_argument("--quick", action="store_true", help="one family, tiny budget (smoke)")
    args = ap.parse_args()
    if args.quick:
        args.families, args.per_operator, args.combined = "textkit", 1, 1
    families, skipped = discover(ROOT / "data" / "seed_repos", args.families.split(","))
    synth = SynthParams(per_operator=args.per_operator, combined=args.combined)
    cur = CurationParams(reference_runs=args.reference_runs, max_mutants=args.max_mutants)
    modes = [int(w) for w in args.workers.split(",")]
    rows = [run_mode(f"workers={w}", w, families, synth, cur) for w in modes]
    if args.ablate_cache:
        rows.append(run_mode("plain-cache", max(modes), families, synth, cur,
                             cache=OutcomeCache()))
    same = len({tuple(r["task_ids"]) for r in rows}) == 1
    serial = next((r for r in rows if r["workers"] == 1), rows[0])
    best = max(rows[:len(modes)], key=lambda r: r["tasks_per_min"])
    speedup = round(best["tasks_per_min"] / serial["tasks_per_min"], 2) \
        if serial["tasks_per_min"] else None
    print(f"parallel/serial speed-up: {speedup}x; same accepted tasks in every mode: {same}")
    for r in rows:
        r.pop("task_ids")
    print(json.dumps({"bench": "synthesize", "families": [f.name for f in families],
                      "skipped": skipped, "per_operator": args.per_operator,
                      "combined": args.combined, "speedup": speedup,
                      "same_tasks_across_modes": same, "target_tasks_per_min": 300,
                      "best_tasks_per_min": best["tasks_per_min"],
                      "load_avg_1m": round(os.getloadavg()[0], 2), "modes": rows},
                     sort_keys=True))


if __name__ == "__main__":
    main()
