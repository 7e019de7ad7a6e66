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

Wall-clock figures on a shared 2-core machine are noisy, so each mode also reports counts and
CPU per accepted task: enclave work items (suite runs, rule-2 verify runs, probe jobs), the
CPU of this host process (`host_cpu_ms_per_task`: candidates, states, patches, hashing,
bookkeeping, JSON to the enclave) and the CPU the whole machine spent meanwhile
(`machine_cpu_ms_per_task`, from /proc/stat: sandboxes + host + anything else running).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("RLVR_PROGRESS", "0")

from rlvr.enclave import Enclave  # noqa: E402
from rlvr.sandbox import Limits, get_sandbox  # noqa: E402
from rlvr.authoring.curation import CurationParams, OutcomeCache  # noqa: E402
from rlvr.authoring.synth.pipeline import SynthParams, Synthesizer  # noqa: E402
from rlvr.authoring.synth.seeds import discover  # noqa: E402


class CountingEnclave:
    """Passes everything through to the enclave; counts the runs `verify` makes (rule 2's
    reference verdicts; a test-editing patch is refused statically and runs nothing)."""

    def __init__(self, enclave: Enclave) -> None:
        self._enclave = enclave
        self._lock = threading.Lock()
        self.verify_runs = 0

    def __getattr__(self, name):
        return getattr(self._enclave, name)

    def verify(self, *args, **kwargs):
        verdict = self._enclave.verify(*args, **kwargs)
        with self._lock:
            self.verify_runs += verdict.runs
        return verdict


def _host_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _machine_cpu() -> float:
    """Busy CPU seconds of the whole machine since boot (all cores, all processes)."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def run_mode(label: str, workers: int, families, synth: SynthParams, cur: CurationParams,
             cache=None) -> dict:
    sandbox = get_sandbox("bwrap")
    with Enclave(backend="bwrap", workers=workers, consensus_runs=synth.consensus_runs,
                 limits=Limits(wall_seconds=synth.suite_timeout_s)) as real:
        real.warm_up()
        enclave = CountingEnclave(real)
        start, host0, machine0 = time.perf_counter(), _host_cpu(), _machine_cpu()
        result = Synthesizer(synth, cur, enclave, sandbox, workers=workers,
                             cache=cache).run(families)
        seconds = time.perf_counter() - start
        host_cpu, machine_cpu = _host_cpu() - host0, _machine_cpu() - machine0
    accepted = len(result.accepted)
    misses = result.suite_runs.get("cache_misses", 0)
    per_task = (lambda x: round(x / accepted, 2)) if accepted else (lambda x: None)
    row = {
        "mode": label, "workers": workers, "candidates": len(result.candidates),
        "accepted": accepted, "seconds": round(seconds, 2),
        "tasks_per_min": round(60 * accepted / seconds, 1) if seconds else 0.0,
        "suite_runs": misses, "runs_per_task": round(misses / accepted, 2) if accepted else None,
        "verify_runs_per_task": per_task(enclave.verify_runs),
        "probe_jobs_per_task": per_task(result.probe_jobs),
        "host_cpu_ms_per_task": per_task(1000 * host_cpu),
        "machine_cpu_ms_per_task": per_task(1000 * machine_cpu),
        "phase_seconds": result.phase_seconds,
        "task_ids": sorted(t.task_id for t in result.accepted),
    }
    print(f"{label:>12}: {accepted} accepted / {row['candidates']} candidates in "
          f"{seconds:.1f}s = {row['tasks_per_min']} tasks/min; {misses} suite runs "
          f"({row['runs_per_task']}/task) + {row['verify_runs_per_task']} verify runs/task + "
          f"{row['probe_jobs_per_task']} probe jobs/task; CPU/task: host "
          f"{row['host_cpu_ms_per_task']} ms, machine {row['machine_cpu_ms_per_task']} ms; "
          f"phases {result.phase_seconds}", flush=True)
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
