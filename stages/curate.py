"""Stage `curate`: hand-authored task directories -> curated task Parquet + rejection log.

Also writes the self-check patches (each task's reference and the empty patch) that the
`selfcheck` stage sends through the verifier: the pipeline proves on every run that the
enclave accepts what should pass and refuses what should not.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from rlvr.artifacts import schemas
from rlvr.artifacts.io import write_table
from rlvr.config import load_section
from rlvr.errors import exit_on_error
from rlvr.sandbox.params import SandboxParams
from rlvr.tasks.authored import discover, load_task_dir
from rlvr.tasks.curation import CurationParams, CurationResult, curate
from rlvr.tasks.pool import save_pool
from rlvr.tasks.splits import SplitParams
from rlvr.tracking.stage import stage_run
from stages.common import parser, progress


def load_params(params_path: Path) -> tuple[CurationParams, SandboxParams]:
    cur = load_section(CurationParams, "curate", params_path)
    split = load_section(SplitParams, "split", params_path)
    return dataclasses.replace(cur, split=split), load_section(SandboxParams, "sandbox",
                                                               params_path)


def run_curation(source: Path, params: CurationParams, sandbox: SandboxParams) -> CurationResult:
    from rlvr.enclave import Enclave

    candidates = [load_task_dir(d) for d in discover(source)]
    with Enclave(backend=sandbox.backend, limits=sandbox.limits.to_limits(),
                 workers=sandbox.workers) as enclave, \
            progress(len(candidates), "curate") as bar:
        return curate(candidates, enclave, params, workers=sandbox.workers, progress=bar.update)


def write_outputs(result: CurationResult, out: Path) -> None:
    save_pool(out, result.accepted, result.rejections)


def selfcheck_patches(result: CurationResult) -> list[dict]:
    rows = []
    for task in sorted(result.accepted, key=lambda t: t.task_id):
        rows.append({"task_id": task.task_id, "candidate_id": f"{task.task_id}:reference",
                     "origin": "reference", "patch": task.reference_patch})
        rows.append({"task_id": task.task_id, "candidate_id": f"{task.task_id}:empty",
                     "origin": "empty", "patch": ""})
    return rows


@exit_on_error
def main(argv: list[str] | None = None) -> None:
    p = parser("curate", __doc__)
    p.add_argument("--source", type=Path, default=Path("data/tasks"))
    p.add_argument("--out", type=Path, default=Path("artifacts/tasks_authored.parquet"))
    p.add_argument("--selfcheck-out", type=Path, default=Path("artifacts/selfcheck_patches.parquet"))
    p.add_argument("--metrics", type=Path, default=Path("metrics/curate.json"))
    args = p.parse_args(argv)
    params, sandbox = load_params(args.params)
    with stage_run("curate", params, inputs={}, metrics_path=args.metrics) as run:
        result = run_curation(args.source, params, sandbox)
        write_outputs(result, args.out)
        write_table(args.selfcheck_out, selfcheck_patches(result), schemas.PATCHES,
                    contract="patches")
        run.log_metrics(result.stats())
        run.log_artifact(args.metrics)


if __name__ == "__main__":
    main()
