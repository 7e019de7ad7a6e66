"""Rollout schedules side by side: cohorts (one `generate` per tick) vs continuous batching
(one running decode per wave), real episodes of a policy on a pipeline's tasks, in one process.

Both arms roll out the same tasks with the same seeds, the checkout's `rollout` params (its
decoding grammar, budgets, warm run_tests in the bwrap sandbox), the same engine object and
G; arms alternate per repeat so machine load hits both. The continuous arm must produce the
cohort arm's rollouts (ids, actions, observations; logprobs to 1e-4) or the run fails.

Reported per arm: wall seconds, the engine's busy fraction (generate / wall), generated
tokens per wall second, decode steps and the mean live sequences per decode step; the
ratio cohorts / continuous of the wall seconds (best of repeats).

`--grpo-steps N` (N > 0) also runs the checkpoint's `grpo` stage loop for N steps from the
SFT policy against the enclave, once per schedule (continuous at the params' lag): per step
the rollout seconds, the engine's busy fraction during rollouts and the step seconds, and
whether both runs drew the same groups with the same rewards.

    python bench/schedule.py --root /path/to/a/make-pipeline/checkout \
        [--model models/policy-sft] [--tasks 16] [--group 4] [--lags 0,4,16] [--repeats 2] \
        [--grpo-steps 3]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import ROOT, emit, grpo_scratch_run, pipeline_pool  # noqa: E402
from rlvr.agent.collector import ScheduleParams  # noqa: E402
from rlvr.agent.passport import deterministic_view, rollout_differences  # noqa: E402
from rlvr.agent.rollout import load_params, roll_out  # noqa: E402
from rlvr.tasks.pool import select_tasks  # noqa: E402
from rlvr.teachers.acting import open_engine  # noqa: E402


def arm(name, tasks, params, sandbox_params, engine) -> tuple[dict, list[dict]]:
    stats: dict = {}
    engine.stats.clear()
    started = time.perf_counter()
    rows = roll_out(tasks, params, sandbox_params, None, engine=engine, stats=stats)
    wall = time.perf_counter() - started
    generated = sum(r["n_trainable_tokens"] for r in rows)
    steps = engine.stats.get("decode_steps", 0)
    return ({"arm": name, "wall_s": round(wall, 3),
             "busy_fraction": stats["generate_busy_fraction"],
             "generated_tokens": generated, "tokens_per_s": round(generated / wall, 1),
             "decode_steps": steps,
             "live_per_step": round(engine.stats.get("slot_steps", 0) / steps, 2) if steps else 0,
             "turns": sum(r["n_turns"] for r in rows)},
            sorted(deterministic_view(rows), key=lambda r: r["trajectory_id"]))


def grpo_arms(root: Path, model: str, steps: int) -> dict:
    """The stage's GRPO loop under each schedule (module docstring)."""
    from rlvr.enclave.batch import VerifyParams, enclave_verifier
    from rlvr.train.grpo_config import load_grpo_params

    params = dataclasses.replace(load_grpo_params(root / "params.yaml"), steps=steps)
    rollout, sandbox = load_params(root / "params.yaml")
    verify = VerifyParams(seed=params.verify_seed, consensus_runs=params.consensus_runs)
    out: dict = {"steps": steps}
    ledgers = {}
    with enclave_verifier(verify, sandbox, where="grpo") as (verifier, _):
        for mode in ("cohorts", "continuous"):
            r = dataclasses.replace(rollout, schedule=dataclasses.replace(rollout.schedule,
                                                                          mode=mode))
            res, logged, out["tasks"] = grpo_scratch_run(root, root / model, params, r,
                                                         sandbox, verifier)
            ledgers[mode] = [(g["group_id"], g["status"], g["rewards"]) for g in res.ledger]
            out[mode] = [{"rollout_s": round(m["time/rollout_s"], 2),
                          "busy_fraction": round(m.get("time/generate_busy_fraction", 0), 3),
                          "step_s": round(m["time/step_s"], 2)} for m in logged]
    out["same_groups_and_rewards"] = ledgers["cohorts"] == ledgers["continuous"]
    out["ratio_rollout_s_cohorts_over_continuous"] = round(
        sum(a["rollout_s"] for a in out["cohorts"])
        / sum(b["rollout_s"] for b in out["continuous"]), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=str(ROOT), help="a `make pipeline` checkout")
    ap.add_argument("--model", default="models/policy-sft", help="policy, relative to --root")
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--wave", type=int, default=8, help="groups per wave")
    ap.add_argument("--lags", default="0,4,16", help="continuous arms' join_lag_steps")
    ap.add_argument("--repeats", type=int, default=2, help="0: only the GRPO case")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--grpo-steps", type=int, default=0, help="also the GRPO loop, N steps")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    root = Path(args.root)
    base, sandbox_params = load_params(root / "params.yaml")
    base = dataclasses.replace(base, engine="torch", model_dir=str(root / args.model),
                               group_size=args.group, groups_per_wave=args.wave, seed=0)
    tasks = select_tasks(pipeline_pool(root), base.split, args.tasks, 0)
    engine = open_engine(base)
    lags = [int(x) for x in args.lags.split(",") if x]
    arms = [("cohorts", ScheduleParams())] + [
        (f"continuous_lag{k}", ScheduleParams(mode="continuous", join_lag_steps=k)) for k in lags]
    load_before = os.getloadavg()[0]
    best: dict[str, dict] = {}
    reference = None
    for _ in range(args.repeats):
        for name, schedule in arms:
            result, rows = arm(name, tasks, dataclasses.replace(base, schedule=schedule),
                               sandbox_params, engine)
            if reference is None:
                reference = rows
            elif differ := rollout_differences(reference, rows):
                raise SystemExit(f"{name}: rollouts differ from the cohort schedule's: "
                                 + ", ".join(differ[:5]))
            if name not in best or result["wall_s"] < best[name]["wall_s"]:
                best[name] = result
    engine.close()
    out = {"bench": "schedule", "root": str(root), "model": args.model, "tasks": len(tasks),
           "group": args.group, "wave": args.wave, "threads": args.threads,
           "repeats": args.repeats, "same_rollouts": True, "arms": list(best.values()),
           "ratio_wall_cohorts_over": {n: round(best["cohorts"]["wall_s"] / r["wall_s"], 3)
                                       for n, r in best.items() if n != "cohorts"}
           if best else {},
           "loadavg_before": load_before}
    if args.grpo_steps:
        out["grpo"] = grpo_arms(root, args.model, args.grpo_steps)
    out["loadavg_after"] = os.getloadavg()[0]
    emit(out)


if __name__ == "__main__":
    main()
