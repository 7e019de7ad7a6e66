"""Stage `curate`: hand-authored task directories -> curated task Parquet + rejection log.

Also writes the self-check patches (each task's reference and the empty patch) that the
`selfcheck` stage sends through the verifier: the pipeline proves on every run that the
enclave accepts what should pass and refuses what should not.
"""
from __future__ import annotations

from pathlib import Path

from rlvr.artifacts import schemas
from rlvr.artifacts.io import write_table
from rlvr.errors import exit_on_error
from rlvr.authoring.curation import load_params, run_curation, selfcheck_patches
from rlvr.tasks.pool import rejections_path, save_pool
from rlvr.tracking.stage import stage_run
from stages.common import parser


@exit_on_error
def main(argv: list[str] | None = None) -> None:
    p = parser("curate", __doc__)
    p.add_argument("--source", type=Path, default=Path("data/tasks"))
    p.add_argument("--out", type=Path, default=Path("artifacts/tasks_authored.parquet"))
    p.add_argument("--selfcheck-out", type=Path, default=Path("artifacts/selfcheck_patches.parquet"))
    p.add_argument("--metrics", type=Path, default=Path("metrics/curate.json"))
    args = p.parse_args(argv)
    params, sandbox = load_params(args.params)
    outputs = {"tasks": args.out, "rejections": rejections_path(args.out),
               "selfcheck_patches": args.selfcheck_out}
    with stage_run("curate", params, sections=("curate", "split", "sandbox"),
                   params_file=args.params, inputs={"source": args.source}, outputs=outputs,
                   metrics_path=args.metrics,
                   details_path=args.details) as run:
        result = run_curation(args.source, params, sandbox)
        save_pool(args.out, result.accepted, result.rejections)
        write_table(args.selfcheck_out, selfcheck_patches(result), schemas.PATCHES,
                    contract="patches")
        run.log_metrics(result.stats())
        run.log_artifact(args.details or args.metrics)


if __name__ == "__main__":
    main()
