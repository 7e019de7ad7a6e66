"""What the bwrap sandbox's fixed address layout (``setarch -R``) costs a cold sandbox start.

Both variants start the same trivial interpreter (`python -I -S -c pass`) in the same
`BwrapSandbox`, interleaved in one process so machine load hits both; only the command prefix
differs (rlvr/sandbox/bwrap.py, "Fixed address layout"). Warm paths (the enclave's and
`run_tests`' fork-servers) pay it once per server, not per call.

    .venv/bin/python bench/fixed_layout.py --runs 60
"""
from __future__ import annotations

import argparse
import statistics
import time

from rlvr.sandbox import Limits
from rlvr.sandbox.bwrap import BwrapSandbox


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=60, help="starts per variant")
    args = ap.parse_args()
    sb = BwrapSandbox()
    if not sb.fixed_layout:
        raise SystemExit("fixed_layout: this host forbids personality(ADDR_NO_RANDOMIZE); nothing to compare")
    limits = Limits(wall_seconds=10, cpu_seconds=10, memory_bytes=1 << 30, max_processes=32)
    variants = {"setarch": list(sb._fixed_layout_args), "plain": []}
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.runs):
        for name, prefix in variants.items():
            sb._fixed_layout_args = prefix
            t0 = time.perf_counter()
            result = sb.run([sb.python, "-I", "-S", "-c", "pass"], cwd="/tmp", limits=limits)
            seconds[name].append(time.perf_counter() - t0)
            if result.exit_code != 0:
                raise SystemExit(f"{name}: sandbox exited {result.exit_code}: {result.stderr[:300]}")
    median = {name: statistics.median(v) * 1000 for name, v in seconds.items()}
    print(f"cold start median over {args.runs}: setarch {median['setarch']:.1f} ms, "
          f"plain {median['plain']:.1f} ms, ratio {median['setarch'] / median['plain']:.3f}")


if __name__ == "__main__":
    main()
