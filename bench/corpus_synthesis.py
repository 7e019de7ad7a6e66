"""Bug injection into the real-library corpus on both sandbox backends: yield per library and
operator, and whether curation decides the same on bwrap and docker.

Run: `.venv/bin/python bench/corpus_synthesis.py [--backends bwrap,docker] [--libraries ...]`
(after `python scripts/fetch_corpus.py`; docker needs a daemon: `scripts/dockerd.sh start`).

Each backend runs the `synthesize` stage's corpus half exactly as params.yaml sets it
(`synthesize.corpus`: libraries and budget; `curate`, `sandbox` as the pipeline has them): the
libraries' upstream suites, unchanged, graded as their seed state can grade them. Per backend:
candidates, accepted tasks and yield per library and per operator, rejections by reason, the
suites' modules left out and tests quarantined for not passing on the seed state, seconds.
Then the comparison: the accepted task ids with their FAIL_TO_PASS / PASS_TO_PASS /
quarantine, and every rejection's reason, must be identical across backends. The last line
is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rlvr.authoring.corpus import DEFAULT_CACHE, load_lock  # noqa: E402
from rlvr.authoring.synth.corpus_families import corpus_families  # noqa: E402
from rlvr.authoring.synth.pipeline import Synthesizer  # noqa: E402
from rlvr.authoring.synth.run import load_params  # noqa: E402
from rlvr.enclave import Enclave  # noqa: E402
from rlvr.sandbox import get_sandbox  # noqa: E402


def run(backend: str, libraries: list[str], params) -> dict:
    families, skipped = corpus_families(load_lock(), DEFAULT_CACHE, libraries)
    synth = params.synth.for_corpus()
    limits = params.sandbox.limits.to_limits()
    limits = limits.replace(wall_seconds=min(limits.wall_seconds, synth.suite_timeout_s))
    t0 = time.perf_counter()
    with Enclave(backend=backend, limits=limits, workers=params.sandbox.workers,
                 consensus_runs=synth.consensus_runs) as enclave:
        result = Synthesizer(synth, params.curation, enclave, get_sandbox(backend),
                             workers=params.sandbox.workers).run(families, skipped)
    stats = result.stats()
    quarantined, dropped = {}, {}
    for task in result.accepted:  # the family as its seed run graded it (synth.graded_family)
        quarantined[task.family] = len(task.provenance.get("not_passing_on_seed", ()))
        dropped[task.family] = task.provenance.get("dropped_hidden_modules", [])
    return {
        "backend": backend, "seconds": round(time.perf_counter() - t0, 1),
        "candidates": stats["candidates"], "accepted": stats["accepted"],
        "yield": stats["yield"], "rejected_by_reason": stats["rejected_by_reason"],
        "by_library": {k: {"candidates": v["candidates"], "accepted": v["accepted"],
                           "yield": v["yield"]} for k, v in stats["by_family"].items()},
        "by_operator": {k: {"candidates": v["candidates"], "accepted": v["accepted"],
                            "yield": v["yield"]} for k, v in stats["by_operator"].items()},
        "dropped_hidden_modules": dropped,
        "not_passing_on_seed": quarantined,
        "skipped": stats["skipped_families"],
        "_decisions": ({t.task_id: [list(t.fail_to_pass), list(t.pass_to_pass),
                                    [q for q, _ in t.quarantined]] for t in result.accepted},
                       sorted([r.task_id, r.reason] for r in result.rejections)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", default="bwrap,docker")
    ap.add_argument("--libraries", default="", help="comma-separated (default: params.yaml)")
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    args = ap.parse_args()
    params = load_params(args.params)
    libraries = [x for x in args.libraries.split(",") if x] or params.synth.corpus.libraries
    runs = [run(b, libraries, params) for b in args.backends.split(",")]
    for r in runs:
        print(f"\n== {r['backend']}: {r['accepted']}/{r['candidates']} accepted "
              f"(yield {r['yield']:.3f}) in {r['seconds']} s; rejected {r['rejected_by_reason']}")
        for name, row in r["by_library"].items():
            print(f"  {name:16s} {row['accepted']:3d}/{row['candidates']:3d}  yield {row['yield']:.3f}"
                  f"  quarantined on seed: {r['not_passing_on_seed'].get(name, 0)}"
                  f"  modules left out: {r['dropped_hidden_modules'].get(name) or '-'}")
        for name, row in r["by_operator"].items():
            print(f"  op {name:22s} {row['accepted']:3d}/{row['candidates']:3d}  yield {row['yield']:.3f}")
    identical = all(r["_decisions"] == runs[0]["_decisions"] for r in runs[1:])
    print(f"\nidentical curation across {', '.join(r['backend'] for r in runs)}: {identical}")
    print(json.dumps({"identical": identical, "libraries": libraries,
                      "runs": [{k: v for k, v in r.items() if k != "_decisions"} for r in runs]}))
    if not identical:
        sys.exit(1)


if __name__ == "__main__":
    main()
