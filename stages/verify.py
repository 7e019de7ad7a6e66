"""Stage `verify`: candidate patches per task -> verdicts, through the enclave (SPEC §4).

Only the diff text of each candidate crosses into a fresh enclave; only the verdict comes
back (`rlvr.enclave.batch`). With `--selfcheck`, patches whose origin is `reference` must
pass and `empty` must fail, or the stage fails: a verifier that cannot tell them apart must
stop the pipeline.

The verdicts file holds no measurement (same inputs, same bytes); each verdict's wall and
CPU seconds and peak RSS go to `<out>.timings.parquet` beside it (`schemas.VERDICT_TIMINGS`),
which no stage depends on.

With `--trajectories IN --trajectories-out OUT`, the verdicts are written back into the
rollout passports they judge (candidate_id == trajectory_id, `rlvr.agent.passport.
apply_verdicts`): OUT is IN with reward_outcome, reward, verdict_reason and
verifier_version filled. A verifier infra error leaves a rollout without reward, marked
verdict_reason "infra_error"; metrics count those apart from failures.
"""
from __future__ import annotations

from pathlib import Path

from rlvr.agent.passport import (apply_verdicts, outcome_summary, read_trajectories,
                                 write_trajectories)
from rlvr.artifacts import schemas
from rlvr.artifacts.io import read_table, timings_path
from rlvr.enclave.batch import (check_selfcheck, load_params, summarize_verdicts,
                                verdict_timing_rows, verify_patches, write_verdicts)
from rlvr.errors import exit_on_error
from rlvr.tasks.pool import load_tasks
from rlvr.tracking.stage import stage_run
from stages.common import parser


@exit_on_error
def main(argv: list[str] | None = None) -> None:
    p = parser("verify", __doc__)
    p.add_argument("--tasks", type=Path, action="append", required=True,
                   help="a tasks Parquet (repeat for several pools)")
    p.add_argument("--patches", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--metrics", type=Path, required=True)
    p.add_argument("--selfcheck", action="store_true")
    p.add_argument("--trajectories", type=Path,
                   help="rollout passports to score with the verdicts (with --trajectories-out)")
    p.add_argument("--trajectories-out", type=Path,
                   help="where the scored passports are written")
    args = p.parse_args(argv)
    if (args.trajectories is None) != (args.trajectories_out is None):
        p.error("--trajectories and --trajectories-out go together")
    params, sandbox = load_params(args.params)
    tasks = [t for path in args.tasks for t in load_tasks(path)]
    patches = read_table(args.patches, schemas.PATCHES, contract="patches").to_pylist()
    rollouts = (read_trajectories(args.trajectories).to_pylist()
                if args.trajectories is not None else None)
    inputs = {f"tasks{i}": path for i, path in enumerate(args.tasks)}
    inputs["patches"] = args.patches
    if args.trajectories is not None:
        inputs["trajectories"] = args.trajectories
    with stage_run("verify", params, inputs=inputs, metrics_path=args.metrics) as run:
        rows = verify_patches(tasks, patches, params, sandbox, where=str(args.patches))
        if args.selfcheck:
            check_selfcheck(rows)
        metrics = summarize_verdicts(
            rows, timings={t["candidate_id"]: t for t in verdict_timing_rows(rows)})
        scored = None
        if rollouts is not None:  # joined before anything is written: a mismatch writes nothing
            scored = apply_verdicts(rollouts, rows,
                                    where=f"{args.patches} vs {args.trajectories}")
            metrics["trajectories"] = outcome_summary(scored)
        write_verdicts(args.out, rows, timings_path=timings_path(args.out))
        if scored is not None:
            write_trajectories(args.trajectories_out, scored)
        run.log_metrics(metrics)


if __name__ == "__main__":
    main()
