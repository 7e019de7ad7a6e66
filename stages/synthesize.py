"""Stage `synthesize`: seed families and the real-library corpus -> bug-injected, curated
synthetic tasks (SPEC §2).

Outputs: the tasks Parquet (rows sorted by task id: same seed + inputs -> byte-identical
file), its rejection log beside it (every refused candidate with its reason), the yield
report as DVC metrics (per operator, per family) and a per-(family, operator) yield table
for `dvc plots`.
"""
from __future__ import annotations

import csv
import dataclasses
import io
from pathlib import Path

import pyarrow as pa

import rlvr.artifacts.schemas  # noqa: F401  (registers the synth_yield contract)
from rlvr.artifacts.contracts import check as check_contract
from rlvr.artifacts.io import write_text
from rlvr.artifacts.plots import heatmap_png
from rlvr.config import load_section
from rlvr.errors import ConfigError, exit_on_error
from rlvr.sandbox.params import SandboxParams
from rlvr.authoring.corpus import DEFAULT_CACHE, DEFAULT_LOCK, load_lock
from rlvr.authoring.curation import CurationParams
from rlvr.tasks.model import content_hash
from rlvr.tasks.pool import load_tasks, rejections_path, save_pool
from rlvr.tasks.splits import SplitParams
from rlvr.authoring.synth.pipeline import SynthParams, SynthResult, Synthesizer
from rlvr.authoring.synth.corpus_families import corpus_families
from rlvr.authoring.synth.seeds import discover
from rlvr.tracking.stage import stage_run
from stages.common import parser, progress

PLOT_COLUMNS = ("family", "operator", "candidates", "accepted", "yield")


@dataclasses.dataclass(frozen=True)
class StageParams:
    synth: SynthParams
    curation: CurationParams
    sandbox: SandboxParams


def load_params(params_path: Path) -> StageParams:
    synth = load_section(SynthParams, "synthesize", params_path)
    cur = load_section(CurationParams, "curate", params_path)
    split = load_section(SplitParams, "split", params_path)
    return StageParams(synth, dataclasses.replace(cur, split=split),
                       load_section(SandboxParams, "sandbox", params_path))


def known_tasks(paths: list[Path]) -> dict[str, str]:
    """Content hash -> task id of the pools already built (e.g. the curated hand-authored
    tasks): a synthetic candidate equal to one of them is rejected as a duplicate."""
    known: dict[str, str] = {}
    for path in paths:
        for task in load_tasks(path):
            known.setdefault(content_hash(task), task.task_id)
    return known


def run_synthesis(seeds: Path, params: StageParams, known: dict[str, str] | None = None,
                  corpus: Path | None = None, corpus_cache: Path | None = None) -> SynthResult:
    from rlvr.enclave import Enclave
    from rlvr.sandbox import get_sandbox

    families, skipped = discover(seeds, params.synth.families)
    real, real_skipped = corpus_families(load_lock(corpus or DEFAULT_LOCK),
                                         corpus_cache or DEFAULT_CACHE,
                                         params.synth.corpus.libraries) \
        if params.synth.corpus.libraries else ([], {})
    clash = sorted({f.name for f in real} & {f.name for f in families})
    if clash:
        raise ConfigError(f"synthesize.corpus.libraries: '{clash[0]}' is also a seed family "
                          f"under {seeds}")
    families, skipped = families + real, {**skipped, **real_skipped}
    budgets = {f.name: params.synth.for_corpus() for f in real}
    sandbox = get_sandbox(params.sandbox.backend)
    bars: dict = {}

    def tick(stage: str, n: int) -> None:
        if stage not in bars:
            bars[stage] = progress(0, f"synthesize:{stage}")
        bars[stage].update(n)

    limits = params.sandbox.limits.to_limits()
    limits = limits.cpu_budget(min(limits.cpu_seconds, params.synth.suite_timeout_s))
    with Enclave(backend=params.sandbox.backend, limits=limits, workers=params.sandbox.workers,
                 consensus_runs=params.synth.consensus_runs) as enclave:
        try:
            return Synthesizer(params.synth, params.curation, enclave, sandbox,
                               workers=params.sandbox.workers, progress=tick,
                               known=known, family_params=budgets).run(families, skipped)
        finally:
            for bar in bars.values():
                bar.close()


def yield_csv(rows: list[dict]) -> str:
    """The plot table: fixed leading columns, then one column per rejection reason seen."""
    reasons = sorted({k for r in rows for k in r if k.startswith("rejected_")})
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=[*PLOT_COLUMNS, *reasons], lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: row.get(k, 0) for k in (*PLOT_COLUMNS, *reasons)})
    return buf.getvalue()


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
                   metrics_path=args.metrics) as run:
        result = run_synthesis(args.seeds, params, known, args.corpus, args.corpus_cache)
        write_outputs(result, args.out, args.plots, args.png)
        run.log_metrics(result.stats())
        run.log_artifact(args.metrics)
        run.log_artifact(args.plots)


if __name__ == "__main__":
    main()
