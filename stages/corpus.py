"""Stage `corpus`: the real-library corpus of data/real/corpus.toml, fetched and unpacked.

Downloads (or finds cached) every pinned sdist and wheel, verifies each sha256 and unpacks the
sdists with their licence files (rlvr.authoring.corpus). Output: `<cache>/src`, the unpacked
libraries `synthesize` injects bugs into; beside it stay the downloads (`sdists/`, and
`wheelhouse/`, which the per-task environments are built from). Metrics name each library,
its version, licence and file counts.
"""
from __future__ import annotations

from pathlib import Path

from rlvr.errors import exit_on_error
from rlvr.authoring.corpus import DEFAULT_CACHE, DEFAULT_LOCK, fetch, load_lock
from rlvr.tracking.stage import stage_run
from stages.common import parser


@exit_on_error
def main(argv: list[str] | None = None) -> None:
    p = parser("corpus", __doc__)
    p.add_argument("--lock", type=Path, default=DEFAULT_LOCK)
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    p.add_argument("--metrics", type=Path, default=Path("metrics/corpus.json"))
    args = p.parse_args(argv)
    lock = load_lock(args.lock)
    with stage_run("corpus", inputs={"lock": args.lock}, outputs={"src": args.cache / "src"},
                   metrics_path=args.metrics,
                   details_path=args.details) as run:
        fetched = fetch(lock, args.cache)
        libraries = {}
        for lib in lock.libraries:
            files = [f for f in fetched[lib.name].rglob("*") if f.is_file()]
            libraries[lib.name] = {"version": lib.version, "licence": lib.licence,
                                   "files": len(files),
                                   "python_files": sum(f.suffix == ".py" for f in files)}
        run.log_metrics({"libraries": len(lock.libraries), "wheels": len(lock.wheels),
                         "by_library": libraries})


if __name__ == "__main__":
    main()
