"""Stage `verify`: candidate patches per task -> verdicts, through the enclave (SPEC §4).

Only the diff text of each candidate crosses into a fresh enclave; only the verdict comes
back. With `--selfcheck`, patches whose origin is `reference` must pass and `empty` must
fail, or the stage fails: a verifier that cannot tell them apart must stop the pipeline.
"""
from __future__ import annotations

import json
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from rlvr.artifacts import schemas
from rlvr.artifacts.io import read_table, write_table
from rlvr.config import load_section
from rlvr.errors import RlvrError, exit_on_error
from rlvr.sandbox.params import SandboxParams
from rlvr.tasks.pool import get_task, load_tasks
from rlvr.tracking.stage import stage_run
from stages.common import parser, progress


@dataclass(frozen=True)
class VerifyParams:
    seed: int = 1234
    consensus_runs: int = 3


class SelfCheckFailed(RlvrError):
    """The verifier disagreed with a patch whose verdict is known in advance."""


def verdict_rows(tasks_paths: list[Path], patches_path: Path, params: VerifyParams,
                 sandbox: SandboxParams) -> list[dict]:
    from rlvr.enclave import Enclave, derive_seed

    tasks = [t for path in tasks_paths for t in load_tasks(path)]
    by_id = {t.task_id: t for t in tasks}
    patches = read_table(patches_path, schemas.PATCHES, contract="patches").to_pylist()
    for row in patches:
        if row["task_id"] not in by_id:
            get_task(tasks, row["task_id"],
                     f"{', '.join(map(str, tasks_paths))} (candidate {row['candidate_id']} "
                     f"of {patches_path})")
    # A candidate's seed depends on its id, not its position: verdicts don't change when
    # the patches file is reordered or extended.
    items = [(by_id[r["task_id"]], r["patch"],
              derive_seed(params.seed, zlib.crc32(r["candidate_id"].encode())))
             for r in patches]
    with Enclave(backend=sandbox.backend, limits=sandbox.limits.to_limits(),
                 workers=sandbox.workers, consensus_runs=params.consensus_runs) as enclave, \
            progress(len(items), "verify") as bar:
        verdicts = enclave.verify_many(items, progress=bar.update)
    rows = []
    for row, verdict in zip(patches, verdicts):
        rows.append({
            "task_id": row["task_id"], "candidate_id": row["candidate_id"],
            "origin": row["origin"], "success": verdict.success, "reason": verdict.reason,
            "runs": verdict.runs, "verifier_version": verdict.verifier_version,
            "wall_seconds": verdict.wall_seconds,
            "resources": json.dumps(verdict.resources, sort_keys=True),
            "safety_flags": list(verdict.safety_flags), "seed": params.seed,
        })
    return rows


def summarize(rows: list[dict]) -> dict:
    n = len(rows)
    by_origin: dict[str, dict] = {}
    for origin in sorted({r["origin"].split(":")[0] for r in rows}):
        sub = [r for r in rows if r["origin"].split(":")[0] == origin]
        by_origin[origin] = {"n": len(sub),
                             "success_rate": sum(r["success"] for r in sub) / len(sub)}
    return {
        "verdicts": n,
        "success_rate": sum(r["success"] for r in rows) / n if n else 0.0,
        "runs_total": sum(r["runs"] for r in rows),
        "reasons": dict(sorted(Counter(r["reason"] for r in rows).items())),
        "by_origin": by_origin,
        "wall_seconds_total": round(sum(r["wall_seconds"] for r in rows), 3),
    }


def check_selfcheck(rows: list[dict]) -> None:
    for r in rows:
        want = {"reference": True, "empty": False}.get(r["origin"])
        if want is not None and r["success"] != want:
            raise SelfCheckFailed(
                f"task '{r['task_id']}': {r['origin']} patch got success={r['success']} "
                f"(reason {r['reason']}), expected success={want}")


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
    params = load_section(VerifyParams, "verify", args.params)
    sandbox = load_section(SandboxParams, "sandbox", args.params)
    inputs = {f"tasks{i}": path for i, path in enumerate(args.tasks)}
    with stage_run("verify", params, inputs={**inputs, "patches": args.patches},
                   metrics_path=args.metrics) as run:
        rows = verdict_rows(args.tasks, args.patches, params, sandbox)
        if args.selfcheck:
            check_selfcheck(rows)
        write_table(args.out, rows, schemas.VERDICTS, contract="verdicts")
        run.log_metrics(summarize(rows))


if __name__ == "__main__":
    main()
