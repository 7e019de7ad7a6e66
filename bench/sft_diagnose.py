"""Where a policy's episodes break, in numbers (LEARNING.md "why"): for each first edit, did
it parse, target the file and one of the lines run_tests flagged, quote `old` present in that
line, apply, and fix the bug? Rolls the checkpoint out (no verification) on train tasks that
have a teacher demonstration and on held-out-function tasks:

    .venv/bin/python bench/sft_diagnose.py models/policy-sft --tasks-per-tier 16
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import pipeline_pool  # noqa: E402
from rlvr.agent.observations import suspicious_lines  # noqa: E402
from rlvr.agent.passport import read_trajectories  # noqa: E402
from rlvr.agent.rollout import load_params, roll_out  # noqa: E402
from rlvr.tasks.pool import select_tasks  # noqa: E402
from rlvr.teachers.acting import open_engine  # noqa: E402

TASKS = pipeline_pool(ROOT)


def first_edit_profile(row: dict) -> dict[str, bool]:
    flagged: list[tuple[str, int, str]] = []
    for turn in row["turns"]:
        if turn["tool_name"] == "run_tests" and not flagged:
            flagged = [(s.path, s.line, s.text) for s in suspicious_lines(turn["observation"])]
        if turn["tool_name"] == "edit":
            args = json.loads(turn["tool_args"])
            lines = {(p, n): t for p, n, t in flagged}
            on_line = (args.get("path"), args.get("line")) in lines
            return {"edit_parsed": True, "line_addressed": "line" in args,
                    "path_flagged": args.get("path") in {p for p, _, _ in flagged},
                    "line_flagged": on_line,
                    "old_in_line": on_line and args.get("old", "") in lines[(args["path"],
                                                                             args["line"])],
                    "applied": turn["tool_status"] == "ok"}
    return {"edit_parsed": False}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("--tasks-per-tier", type=int, default=16)
    ap.add_argument("--samples", type=int, default=2)
    args = ap.parse_args()
    params, sandbox = load_params(ROOT / "params.yaml")
    demos = {r["task_id"] for r in read_trajectories(
        ROOT / "artifacts/trajectories_verified.parquet").to_pylist() if r["reward_outcome"] == 1.0}
    tiers = {"train (with a demo)": [t for t in select_tasks(TASKS, "train", 0, 0)
                                     if t.task_id in demos][:args.tasks_per_tier],
             "heldout_function": select_tasks(TASKS, "heldout_function", args.tasks_per_tier, 0)}
    p = dataclasses.replace(params, engine="torch", model_dir=str(args.model_dir),
                            group_size=args.samples, policy_version="", seed=123)
    out = {}
    for tier, tasks in tiers.items():
        rows = roll_out(tasks, p, sandbox, None, open_engine=open_engine)
        turns = [t for r in rows for t in r["turns"]]
        prof = [first_edit_profile(r) for r in rows]
        keys = ("edit_parsed", "line_addressed", "path_flagged", "line_flagged", "old_in_line",
                "applied")
        out[tier] = {"episodes": len(rows),
                     "parse_error_rate": round(sum(not t["action_valid"] for t in turns)
                                               / max(1, len(turns)), 3),
                     "stop_reasons": dict(Counter(r["stop_reason"] for r in rows)),
                     "first_edit": {k: sum(bool(x.get(k)) for x in prof) for k in keys},
                     "tools": dict(Counter(t["tool_name"] or "invalid" for t in turns))}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
