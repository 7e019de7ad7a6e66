#!/usr/bin/env python3
"""Fetch the real-library corpus pinned in data/real/corpus.toml into a local cache.

    python scripts/fetch_corpus.py                # everything, into data/real/.cache
    python scripts/fetch_corpus.py --only toolz   # one library (and its wheels)
    python scripts/fetch_corpus.py --offline      # verify + unpack what is already cached

The lock format, the cache layout and the hash checks are `rlvr.authoring.corpus`'s; a bad lock
entry or a hash mismatch is a named error and exit 2. Point `RLVR_WHEELHOUSE` at
data/real/.cache/wheelhouse for the per-task environments (rlvr.sandbox.envs).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rlvr.errors import RlvrError, exit_on_error  # noqa: E402,F401  (RlvrError: re-exported)
from rlvr.authoring.corpus import (DEFAULT_CACHE, DEFAULT_LOCK, CorpusLockError,  # noqa: E402,F401
                               HashMismatch, Lock, fetch, load_lock)


@exit_on_error
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lock", type=Path, default=DEFAULT_LOCK)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--only", default=None, help="one library by name")
    parser.add_argument("--offline", action="store_true", help="use the cache only")
    args = parser.parse_args(argv)
    lock = load_lock(args.lock)
    fetched = fetch(lock, args.cache, only=args.only, offline=args.offline)
    by_name = {lib.name: lib for lib in lock.libraries}
    for name, path in fetched.items():
        lib = by_name[name]
        print(f"{name}=={lib.version} [{lib.licence}] -> {path} (tests: {', '.join(lib.tests)}"
              f"{'; deps: ' + ', '.join(lib.dependencies) if lib.dependencies else ''})")
    print(f"wheelhouse: {Path(args.cache) / 'wheelhouse'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
