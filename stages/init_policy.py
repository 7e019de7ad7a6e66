"""Stage `init_policy`: the initial policy directory `models/policy-init/` (a DVC out).

What it builds (the CPU-default LM, or an imported checkpoint) is `rlvr.train.policy_init`;
this stage reads `policy` and `split` from params.yaml, runs it inside the MLflow stage run
and writes the metrics.

Run: `python -m stages.init_policy [--params params.yaml]`.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Collection

from rlvr.config import load_section
from rlvr.errors import exit_on_error
from rlvr.tasks.splits import SplitParams
from rlvr.tracking.stage import stage_run
from rlvr.train.policy_init import PolicyParams, init_policy

OUT_DIR = Path("models/policy-init")
METRICS = Path("metrics/init_policy.json")


def run(params: PolicyParams, out_dir: Path = OUT_DIR, metrics_path: Path = METRICS,
        root: Path = Path("."), evaluation_families: Collection[str] = (),
        params_file: Path | str = "params.yaml", details_path: Path | None = None) -> dict:
    inputs = {"seed_repos": root / "data/seed_repos", "tasks": root / "data/tasks",
              "import": Path(params.path) if params.kind == "path" else None}
    with stage_run("init_policy", params, sections=("policy", "split"),
                   params_file=params_file, inputs=inputs, outputs={"policy": out_dir},
                   metrics_path=metrics_path, details_path=details_path) as run_:
        metrics = init_policy(params, out_dir, root, evaluation_families, log=run_.log_step)
        run_.log_metrics(metrics)
    return metrics


@exit_on_error
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Build or import the initial policy directory.")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default=str(OUT_DIR))
    ap.add_argument("--metrics", default=str(METRICS))
    ap.add_argument("--details", type=Path,
                    help="every metric here, the headline only in --metrics (stages/common.py)")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    params = load_section(PolicyParams, "policy", args.params)
    split = load_section(SplitParams, "split", args.params)
    metrics = run(params, Path(args.out), Path(args.metrics),
                  evaluation_families={*split.heldout_families, *split.regression_families},
                  params_file=args.params, details_path=args.details)
    print(f"init_policy: {params.kind} policy -> {args.out} ({metrics['param_count']} params, "
          f"vocab {metrics['vocab_size']}, {metrics['policy_version']})")


if __name__ == "__main__":
    main()
