"""Stage `evaluate`: every checkpoint of `evaluate.checkpoints` on the same seeded tasks of
each tier with the same sample seeds, verified in the enclave (SPEC §8).

Outputs: `eval.parquet` (one row per evaluated episode) and beside it
`eval.timings.parquet` (each episode's seconds; no stage depends on it), the full report
(per checkpoint, tier and family; paired differences between checkpoints; no clock in it),
compact metrics for DVC (pass@1 with its interval, parse-error rate and the paired
difference per tier; the seconds spent per checkpoint and tier under `cost`), and the
pass@k curves (CSV for DVC plots, PNG).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.artifacts.io import timings_path, write_json
from rlvr.errors import exit_on_error
from rlvr.evaluate.params import load_params
from rlvr.evaluate.report import (build_report, cost_report, eval_timing_rows, pass_at_k_table,
                                  timings_by_key, write_eval, write_plots)
from rlvr.evaluate.run import evaluate_checkpoints
from rlvr.evaluate.sets import build_sets, manifest
from rlvr.tasks.pool import select_tasks
from rlvr.tracking.stage import stage_run
from stages.common import parser


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """The few numbers worth a DVC metrics column: per checkpoint and tier pass@1 [lo, hi]
    and parse-error rate; per paired comparison and tier the difference [lo, hi]."""
    out: dict[str, Any] = {}
    for name, entry in report["checkpoints"].items():
        out[name] = {tier: {"pass_at_1": s["pass_at_1"], "low": s["pass_at_1_low"],
                            "high": s["pass_at_1_high"],
                            "parse_error_rate": s["parse_error_rate"]}
                     for tier, s in entry["tiers"].items()}
    for pair, tiers in report["paired"].items():
        out[pair] = {tier: {k: c[k] for k in ("difference_estimate", "difference_low",
                                              "difference_high", "n_pairs") if k in c}
                     for tier, c in tiers.items()}
    return out


@exit_on_error
def main(argv: list[str] | None = None) -> None:
    p = parser("evaluate", __doc__)
    p.add_argument("--tasks", type=Path, action="append", required=True,
                   help="tasks Parquet (repeat for several pools)")
    p.add_argument("--out", type=Path, required=True, help="eval.parquet")
    p.add_argument("--report", type=Path, required=True, help="full report JSON")
    p.add_argument("--metrics", type=Path, required=True)
    p.add_argument("--plots", type=Path, required=True, help="pass@k curves CSV")
    p.add_argument("--png", type=Path, default=None, help="pass@k curves PNG")
    args = p.parse_args(argv)
    params, sandbox = load_params(args.params)
    tasks = select_tasks(args.tasks, "", 0, params.seed)
    sets = build_sets(tasks, params.tasks_per_tier, params.seed)
    inputs = {**{f"tasks{i}": t for i, t in enumerate(args.tasks)},
              **{f"checkpoint.{name}": Path(d) for name, d in params.checkpoints.items()}}
    outputs = {"eval": args.out, "report": args.report, "plots": args.plots, "png": args.png}
    with stage_run("evaluate", params, sections=("evaluate", "sandbox"), params_file=args.params,
                   inputs=inputs, outputs=outputs, metrics_path=args.metrics,
                   details_path=args.details) as run:
        rows = evaluate_checkpoints(params.checkpoints, sets, params, sandbox)
        write_eval(args.out, rows, timings_path=timings_path(args.out))
        report = build_report(rows, checkpoints=list(params.checkpoints), level=params.level,
                              n_boot=params.bootstrap, seed=params.seed)
        write_json(args.report, {**report, "sets": manifest(sets)})
        write_plots(pass_at_k_table(rows), args.png, args.plots)
        costs = cost_report(rows, timings_by_key(eval_timing_rows(rows)),
                            checkpoints=list(params.checkpoints))
        run.log_metrics({**headline(report), "cost": costs})
    print(f"evaluate: {len(rows)} episodes over {len(sets)} tiers -> {args.out}")


if __name__ == "__main__":
    main()
