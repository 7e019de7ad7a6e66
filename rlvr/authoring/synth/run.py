"""A synthesis run: what the `synthesize` stage does between reading params.yaml and writing
its outputs (the analogue of `rlvr.authoring.curation.run_curation`).

* `load_params(path)` — the `synthesize`, `curate` (with `split` folded in) and `sandbox`
  sections as one `SynthRunParams`;
* `known_tasks(paths)` — the pools already built, by content hash, so a synthetic duplicate
  of one of them is rejected;
* `run_synthesis(...)` — the seed families and the chosen real-library families through one
  enclave: a `SynthResult` (accepted tasks, rejections, yield), nothing written;
* `yield_csv(rows)` — the per-(family, operator) yield table `dvc plots` reads.
"""
from __future__ import annotations

import csv
import dataclasses
import io
from pathlib import Path

from rlvr.authoring.corpus import DEFAULT_CACHE, DEFAULT_LOCK, load_lock
from rlvr.authoring.curation import CurationParams
from rlvr.authoring.synth.corpus_families import corpus_families
from rlvr.authoring.synth.pipeline import SynthParams, SynthResult, Synthesizer
from rlvr.authoring.synth.seeds import discover
from rlvr.config import load_section
from rlvr.enclave import Enclave
from rlvr.errors import ConfigError
from rlvr.progress import progress
from rlvr.sandbox import get_sandbox
from rlvr.sandbox.params import SandboxParams
from rlvr.tasks.model import content_hash
from rlvr.tasks.pool import load_tasks
from rlvr.tasks.splits import SplitParams

PLOT_COLUMNS = ("family", "operator", "candidates", "accepted", "yield")


@dataclasses.dataclass(frozen=True)
class SynthRunParams:
    synth: SynthParams
    curation: CurationParams
    sandbox: SandboxParams


def load_params(params_path: Path) -> SynthRunParams:
    synth = load_section(SynthParams, "synthesize", params_path)
    cur = load_section(CurationParams, "curate", params_path)
    split = load_section(SplitParams, "split", params_path)
    return SynthRunParams(synth, dataclasses.replace(cur, split=split),
                          load_section(SandboxParams, "sandbox", params_path))


def known_tasks(paths: list[Path]) -> dict[str, str]:
    """Content hash -> task id of the pools already built (e.g. the curated hand-authored
    tasks): a synthetic candidate equal to one of them is rejected as a duplicate."""
    known: dict[str, str] = {}
    for path in paths:
        for task in load_tasks(path):
            known.setdefault(content_hash(task), task.task_id)
    return known


def run_synthesis(seeds: Path, params: SynthRunParams, known: dict[str, str] | None = None,
                  corpus: Path | None = None, corpus_cache: Path | None = None) -> SynthResult:
    """Synthesize from the seed families under `seeds` and the libraries of the corpus lock
    `corpus` (unpacked under `corpus_cache`) that params name; duplicates of `known` are
    rejected."""
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
    sandbox = get_sandbox(params.sandbox.backend, **params.sandbox.options())
    bars: dict = {}

    def tick(stage: str, n: int) -> None:
        if stage not in bars:
            bars[stage] = progress(0, f"synthesize:{stage}")
        bars[stage].update(n)

    limits = params.sandbox.limits.to_limits()
    limits = limits.cpu_budget(min(limits.cpu_seconds, params.synth.suite_timeout_s))
    with Enclave.for_sandbox(params.sandbox, limits=limits,
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
