"""Stage `verify`: candidate patches per task -> verdicts, through the enclave (SPEC §4).

Only the diff text of each candidate crosses into a fresh enclave; only the verdict comes
back (`rlvr.enclave.batch`). With `--selfcheck`, patches whose origin is `reference` must
pass and `empty` must fail, or the stage fails: a verifier that cannot tell them apart must
stop the pipeline.
"""
from __future__ import annotations

from pathlib import Path

from rlvr.artifacts import schemas
from rlvr.artifacts.io import read_table, write_table
from rlvr.enclave.batch import check_selfcheck, load_params, summarize_verdicts, verify_patches
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
    args = p.parse_args(argv)
    params, sandbox = load_params(args.params)
    tasks = [t for path in args.tasks for t in load_tasks(path)]
    patches = read_table(args.patches, schemas.PATCHES, contract="patches").to_pylist()
    inputs = {f"tasks{i}": path for i, path in enumerate(args.tasks)}
    with stage_run("verify", params, inputs={**inputs, "patches": args.patches},
                   metrics_path=args.metrics) as run:
        rows = verify_patches(tasks, patches, params, sandbox, where=str(args.patches))
        if args.selfcheck:
            check_selfcheck(rows)
        write_table(args.out, rows, schemas.VERDICTS, contract="verdicts")
        run.log_metrics(summarize_verdicts(rows))


if __name__ == "__main__":
    main()
