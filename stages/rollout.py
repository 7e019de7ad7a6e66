"""Stage `rollout`: tasks -> multi-turn agent episodes -> rollout passports (SPEC §3).

Inputs: one or more tasks Parquet files (curate / synthesize) and a policy directory (its
tokenizer defines the token ids of every transcript, whatever the engine). Outputs:

* `trajectories.parquet` — one rollout passport per episode (`schemas.TRAJECTORIES`): the
  same inputs give the same bytes;
* `trajectories.timings.parquet` — beside it, each episode's wall-clock measurements
  (`schemas.TRAJECTORY_TIMINGS`); no stage depends on it;
* `rollout_patches.parquet` — the diffs of submitted rollouts whose extraction passed, in
  the `schemas.PATCHES` format (candidate_id = trajectory_id, origin rollout:<id>) for
  `verify`;
* metrics: stop-reason rates, parse-error rate, lengths, tokens, tool statuses.

Resumable through checkpoint shards under `--parts-dir` (see `rlvr.agent.rollout`): a rerun
after an interruption gives what an uninterrupted run gives (up to wall-clock columns).
"""
from __future__ import annotations

import shutil
from pathlib import Path

from rlvr.agent.passport import timing_rows, write_trajectories
from rlvr.agent.rollout import load_params, patch_rows, roll_out, summarize
from rlvr.artifacts import schemas
from rlvr.artifacts.io import timings_path, write_table
from rlvr.errors import exit_on_error
from rlvr.tasks.pool import select_tasks
from rlvr.teachers.acting import open_engine
from rlvr.tracking.stage import stage_run
from stages.common import parser


@exit_on_error
def main(argv: list[str] | None = None) -> None:
    p = parser("rollout", __doc__)
    p.add_argument("--tasks", type=Path, action="append", required=True,
                   help="tasks Parquet (repeat for several files)")
    p.add_argument("--out", type=Path, default=Path("artifacts/trajectories.parquet"))
    p.add_argument("--patches-out", type=Path, default=Path("artifacts/rollout_patches.parquet"))
    p.add_argument("--metrics", type=Path, default=Path("metrics/rollout.json"))
    p.add_argument("--parts-dir", type=Path, default=None,
                   help="checkpoint shards (default: <out dir>/.rollout_parts)")
    p.add_argument("--keep-parts", action="store_true",
                   help="keep the checkpoint shards after a successful run")
    args = p.parse_args(argv)
    params, sandbox_params = load_params(args.params)
    parts_root = args.parts_dir or args.out.parent / ".rollout_parts"
    tasks = select_tasks(args.tasks, params.split, params.max_tasks, params.seed)
    inputs = {**{f"tasks{i}": t for i, t in enumerate(args.tasks)},
              "model_dir": Path(params.model_dir)}
    outputs = {"trajectories": args.out, "patches": args.patches_out}
    with stage_run("rollout", params, sections=("rollout", "sandbox"), params_file=args.params,
                   inputs=inputs, outputs=outputs, metrics_path=args.metrics,
                   details_path=args.details) as run:
        spent: dict = {}
        rows = roll_out(tasks, params, sandbox_params, parts_root, open_engine=open_engine,
                        stats=spent)
        write_trajectories(args.out, rows, timings_path=timings_path(args.out))
        write_table(args.patches_out, patch_rows(rows), schemas.PATCHES, contract="patches")
        timings = {t["trajectory_id"]: t for t in timing_rows(rows)}
        run.log_metrics({**summarize(rows, timings), "this_run": spent})
        run.log_artifact(args.details or args.metrics)
    if not args.keep_parts:
        shutil.rmtree(parts_root, ignore_errors=True)


if __name__ == "__main__":
    main()
