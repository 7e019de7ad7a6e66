"""Stage `synthesize`: seed families and the real-library corpus -> bug-injected, curated
synthetic tasks (SPEC §2).

Outputs: the tasks Parquet (rows sorted by task id: same seed + inputs -> byte-identical
file), its rejection log beside it (every refused candidate with its reason), the yield
report as DVC metrics (per operator, per family) and a per-(family, operator) yield table
for `dvc plots`.
"""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import rlvr.artifacts.schemas  # noqa: F401  (registers the synth_yield contract)
from rlvr.artifacts.contracts import check as check_contract
from rlvr.artifacts.io import write_text
from rlvr.artifacts.plots import heatmap_png
from rlvr.authoring.corpus import DEFAULT_CACHE, DEFAULT_LOCK
from rlvr.authoring.synth.pipeline import SynthResult
from rlvr.authoring.synth.run import known_tasks, load_params, run_synthesis, yield_csv
from rlvr.errors import exit_on_error
from rlvr.tasks.pool import rejections_path, save_pool
from rlvr.tracking.stage import stage_run
from stages.common import parser


def write_outputs(result: SynthResult, out: Path, plots: Path, png: Path | None = None) -> None:
    rows = result.yield_rows()
    check_contract("synth_yield", pa.Table.from_pylist(rows), where=str(plots))
    save_pool(out, result.accepted, result.rejections)
    write_text(plots, yield_csv(rows))
    if png is not None:
        heatmap_png(rows, png, row="family", col="operator", value="yield",
                    title="synthesis yield (accepted / candidates)")


@exit_on_error
def main(argv: list[str] | None = None) -> None:
    p = parser("synthesize", __doc__)
    p.add_argument("--seeds", type=Path, default=Path("data/seed_repos"))
    p.add_argument("--out", type=Path, default=Path("artifacts/tasks_synthetic.parquet"))
    p.add_argument("--metrics", type=Path, default=Path("metrics/synthesize.json"))
    p.add_argument("--plots", type=Path, default=Path("plots/synthesize_yield.csv"))
    p.add_argument("--png", type=Path, default=None, help="the yield table as a PNG heatmap")
    p.add_argument("--corpus", type=Path, default=None,
                   help="the real-library lock (default data/real/corpus.toml); which of its "
                        "libraries are used is params synthesize.corpus.libraries")
    p.add_argument("--corpus-cache", type=Path, default=None,
                   help="where scripts/fetch_corpus.py unpacked it (default data/real/.cache)")
    p.add_argument("--known", type=Path, action="append", default=[],
                   help="a tasks Parquet already in the pool (repeatable): duplicates of its "
                        "tasks are rejected")
    args = p.parse_args(argv)
    params = load_params(args.params)
    known = known_tasks(args.known)
    inputs = {"seeds": args.seeds, **{f"known{i}": path for i, path in enumerate(args.known)}}
    if params.synth.corpus.libraries:
        inputs.update(corpus=args.corpus or DEFAULT_LOCK,
                      corpus_src=(args.corpus_cache or DEFAULT_CACHE) / "src")
    outputs = {"tasks": args.out, "rejections": rejections_path(args.out), "plots": args.plots,
               "png": args.png}
    with stage_run("synthesize", params, sections=("synthesize", "curate", "split", "sandbox"),
                   params_file=args.params, inputs=inputs, outputs=outputs,
                   metrics_path=args.metrics,
                   details_path=args.details) as run:
        result = run_synthesis(args.seeds, params, known, args.corpus, args.corpus_cache)
        write_outputs(result, args.out, args.plots, args.png)
        run.log_metrics(result.stats())
        run.log_artifact(args.details or args.metrics)
        run.log_artifact(args.plots)


if __name__ == "__main__":
    main()
