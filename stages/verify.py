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

With `--passport OUT --selfcheck-verdicts V`, the data / verifier passport (SPEC §9,
`rlvr.tracking.passport`) goes to OUT: the pools and their rejection logs, the split rules,
the verifier version and config hash, its false-positive / false-negative rates on the
self-check's labelled sample V, the initial success-rate distribution of the scored
rollouts, limits and sandbox image. It is logged to MLflow with the run.
"""
from __future__ import annotations

from pathlib import Path

from rlvr.agent.passport import (apply_verdicts, outcome_summary, read_trajectories,
                                 write_trajectories)
from rlvr.artifacts import schemas
from rlvr.artifacts.io import read_table, timings_path, write_json
from rlvr.config import load_section
from rlvr.enclave.batch import (check_selfcheck, load_params, read_verdicts,
                                summarize_verdicts, verdict_timing_rows, verify_patches,
                                write_verdicts)
from rlvr.errors import exit_on_error
from rlvr.tasks.pool import load_tasks, rejections_path
from rlvr.tasks.splits import SplitParams
from rlvr.tracking.passport import build_passport
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
    p.add_argument("--passport", type=Path,
                   help="write the data / verifier passport JSON (SPEC §9) here")
    p.add_argument("--selfcheck-verdicts", type=Path,
                   help="the selfcheck stage's verdicts: the passport's labelled sample")
    args = p.parse_args(argv)
    if (args.trajectories is None) != (args.trajectories_out is None):
        p.error("--trajectories and --trajectories-out go together")
    if (args.passport is None) != (args.selfcheck_verdicts is None):
        p.error("--passport and --selfcheck-verdicts go together")
    params, sandbox = load_params(args.params)
    tasks = [t for path in args.tasks for t in load_tasks(path)]
    patches = read_table(args.patches, schemas.PATCHES, contract="patches").to_pylist()
    rollouts = (read_trajectories(args.trajectories).to_pylist()
                if args.trajectories is not None else None)
    inputs = {f"tasks{i}": path for i, path in enumerate(args.tasks)}
    inputs["patches"] = args.patches
    if args.trajectories is not None:
        inputs["trajectories"] = args.trajectories
    if args.passport is not None:
        split = load_section(SplitParams, "split", args.params)
        selfcheck = read_verdicts(args.selfcheck_verdicts)
        inputs["selfcheck_verdicts"] = args.selfcheck_verdicts
        inputs.update({f"rejections{i}": rejections_path(t) for i, t in enumerate(args.tasks)})
    outputs = {"verdicts": args.out, "trajectories": args.trajectories_out,
               "passport": args.passport}
    with stage_run("selfcheck" if args.selfcheck else "verify", params,
                   sections=(("verify", "sandbox", "split") if args.passport
                             else ("verify", "sandbox")),
                   params_file=args.params, inputs=inputs, outputs=outputs,
                   metrics_path=args.metrics,
                   details_path=args.details) as run:
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
        passport = None
        if args.passport is not None:  # built before anything is written, like `scored`
            passport = build_passport(pools=args.tasks, split=split, verify=params,
                                      sandbox=sandbox, verdicts=rows, selfcheck=selfcheck,
                                      scored=scored)
        write_verdicts(args.out, rows, timings_path=timings_path(args.out))
        if scored is not None:
            write_trajectories(args.trajectories_out, scored)
        if passport is not None:
            write_json(args.passport, passport)
            run.log_artifact(args.passport)
        run.log_metrics(metrics)
        if rows:
            run.log_tags({"verifier_version": ",".join(sorted({r["verifier_version"]
                                                              for r in rows}))})


if __name__ == "__main__":
    main()
