"""Enough evidence for the release gate: the pipeline's candidate and champion evaluated on
tiers large enough for rule 5 (issue "Release gate" must-show 2, LEARNING.md).

The pipeline's own evaluation is kept small to fit the 60-minute budget (`evaluate.
tasks_per_tier`), so its gate can only say "inconclusive" or block: with a 0.05 tolerance and
no discordant task rule 5 needs >= 73 tasks per gated tier. This bench evaluates the two
checkpoints the `gate` section of `--root`'s params.yaml names (`gate.champion_dir`,
`gate.candidate_dir`) with the library's evaluation (`rlvr.evaluate.run.
evaluate_checkpoints`: same seeded tasks, same sample seeds, verdicts from the enclave) on
`--tasks-per-tier` tasks and writes `eval.parquet` (+ timings) to `--out`. The rollouts are
sharded under `--out/parts`, so a killed run resumes where it stopped. The gate then runs on
it unchanged:

    .venv/bin/python bench/gate_evidence.py --root /path/to/pipeline/checkout \\
        --tasks-per-tier 4 80 80 80 --out build/gate-evidence
    .venv/bin/rlvr gate --params <root>/params.yaml \\
        --candidate-eval build/gate-evidence/eval.parquet --candidate grpo --champion sft \\
        --candidate-dir <root>/models/policy-grpo --champion-dir <root>/models/policy-sft \\
        --training-metrics <root>/models/policy-grpo/training.json --out docs/gate/evidence
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import evaluation_sets  # noqa: E402
from rlvr.artifacts.io import timings_path  # noqa: E402
from rlvr.evaluate.params import TierSizes, load_params as load_eval_params  # noqa: E402
from rlvr.evaluate.report import build_report, write_eval  # noqa: E402
from rlvr.evaluate.run import evaluate_checkpoints  # noqa: E402
from rlvr.gate.params import load_params as load_gate_params  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, required=True, help="a checkout after `make pipeline`")
    ap.add_argument("--tasks-per-tier", type=int, nargs=4, required=True,
                    metavar=("TRAIN", "HF", "HO", "REG"), help="evaluate.tasks_per_tier")
    ap.add_argument("--samples", type=int, help="evaluate.samples_per_task (default: params.yaml)")
    ap.add_argument("--out", type=Path, required=True, help="directory for eval.parquet")
    args = ap.parse_args()
    os.environ.setdefault("RLVR_TRACKING", "off")
    params_file = args.root / "params.yaml"
    evalp, sandbox = load_eval_params(params_file)
    gate = load_gate_params(params_file)
    evalp = dataclasses.replace(evalp, tasks_per_tier=TierSizes(*args.tasks_per_tier),
                                **({"samples_per_task": args.samples} if args.samples else {}))
    sets = evaluation_sets(args.root, evalp)
    checkpoints = {gate.champion: args.root / gate.champion_dir,
                   gate.candidate: args.root / gate.candidate_dir}
    print(f"evaluating {', '.join(checkpoints)} on "
          + ", ".join(f"{s.tier} {len(s.tasks)}" for s in sets)
          + f" tasks x {evalp.samples_per_task} samples", flush=True)
    rows = evaluate_checkpoints(checkpoints, sets, evalp, sandbox, parts_root=args.out / "parts")
    out = args.out / "eval.parquet"
    write_eval(out, rows, timings_path=timings_path(out))
    paired = build_report(rows, checkpoints=list(checkpoints), level=evalp.level,
                          n_boot=evalp.bootstrap, seed=evalp.seed)["paired"]
    for pair, tiers in paired.items():
        for tier, c in tiers.items():
            print(f"{pair} {tier}: {c.get('difference_estimate')} "
                  f"[{c.get('difference_low')}, {c.get('difference_high')}] "
                  f"over {c.get('difference_n_tasks')} tasks")
    print(f"-> {out}")


if __name__ == "__main__":
    main()
