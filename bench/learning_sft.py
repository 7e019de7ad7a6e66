"""The "Learning I" claim: SFT checkpoints over several training seeds against the init policy,
paired on the same seeded evaluation tasks and sample seeds (LEARNING.md).

Reads what `make pipeline` left (the scored teacher demonstrations, the task pool, the init
policy, params.yaml), trains one SFT checkpoint per seed with the library
(`rlvr.train.sft.train_sft`, exactly what stage `sft` runs), evaluates init once and every
seed's checkpoint as runs of one checkpoint `sft` (`rlvr.evaluate.run.evaluate_checkpoint`),
so the paired difference pools the seeds, and writes the report, the loss / parse-error
curves and the pass@k curves:

    .venv/bin/python bench/learning_sft.py --seeds 0 1 2 --out docs/learning

`--demos N` trains on a seeded subset of N demonstrations (pass@1 vs data); `--base DIR`
trains another base policy (pass@1 vs model size / pretraining). After `make pipeline`, the
DAG's own seed needs no second training: `--reuse-pipeline 0` takes `models/policy-sft`, its
curves (`plots/sft_curves.csv`) and the init / sft rows of `artifacts/eval.parquet` (same
sets and sample seeds) as seed 0.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import pipeline_pool  # noqa: E402
from rlvr.agent.passport import read_trajectories  # noqa: E402
from rlvr.agent.rollout import load_params as load_rollout_params  # noqa: E402
from rlvr.artifacts.io import write_json  # noqa: E402
from rlvr.enclave.core import Enclave  # noqa: E402
from rlvr.evaluate.params import load_params as load_eval_params  # noqa: E402
from rlvr.evaluate.report import (build_report, pass_at_k_table, read_eval, write_eval,  # noqa: E402
                                  write_plots)
from rlvr.evaluate.run import evaluate_checkpoint  # noqa: E402
from rlvr.evaluate.sets import build_sets, manifest  # noqa: E402
from rlvr.tasks.pool import select_tasks  # noqa: E402
from rlvr.train.curves import LossCurves, write_loss_csv  # noqa: E402
from rlvr.train.demos import select_demonstrations  # noqa: E402
from rlvr.train.probe import parse_error_probe  # noqa: E402
from rlvr.train.sft import train_sft  # noqa: E402
from rlvr.train.sft_config import load_sft_params  # noqa: E402

TASKS = pipeline_pool(ROOT)


def read_curves(path: Path) -> list[dict]:
    """The sft stage's curves CSV back into `LossCurves` rows (column names with `/`)."""
    import csv

    names = {"train_loss": "train/loss", "val_loss": "val/loss",
             "eval_parse_error_rate": "eval/parse_error_rate"}
    rows = []
    with open(path) as fh:
        for rec in csv.DictReader(fh):
            rows.append({"step": int(rec["step"]), **{names[k]: float(v) for k, v in rec.items()
                                                      if k in names and v != ""}})
    return rows


def plot_curves(curves: dict[int, list[dict]], png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    for seed, rows in sorted(curves.items()):
        tr = [(r["step"], r["train/loss"]) for r in rows if "train/loss" in r]
        va = [(r["step"], r["val/loss"]) for r in rows if "val/loss" in r]
        pe = [(r["step"], r["eval/parse_error_rate"]) for r in rows
              if "eval/parse_error_rate" in r]
        line, = a.plot(*zip(*tr), lw=1, label=f"train seed {seed}")
        if va:
            a.plot(*zip(*va), "o--", color=line.get_color(), ms=3, label=f"val seed {seed}")
        if pe:
            b.plot(*zip(*pe), "o-", color=line.get_color(), ms=3, label=f"seed {seed}")
    a.set(xlabel="optimizer step", ylabel="policy-token NLL", title="SFT loss")
    b.set(xlabel="optimizer step", ylabel="invalid turns / turns", ylim=(0, 1.02),
          title="parse-error rate of sampled rollouts")
    b.axhline(0.2, color="grey", lw=0.8, ls=":")
    a.legend(fontsize=7)
    b.legend(fontsize=7)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    ap.add_argument("--trajectories", type=Path,
                    default=ROOT / "artifacts/trajectories_verified.parquet")
    ap.add_argument("--base", type=Path, default=ROOT / "models/policy-init")
    ap.add_argument("--demos", type=int, default=0, help="train on N demonstrations (0 = all)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs/learning")
    ap.add_argument("--work", type=Path, default=ROOT / "build/learning")
    ap.add_argument("--reuse-pipeline", type=int, default=None, metavar="SEED",
                    help="the DAG's sft.seed: reuse its checkpoint, curves and eval rows")
    args = ap.parse_args()
    os.environ.setdefault("RLVR_TRACKING", "off")
    sft = load_sft_params(args.params)
    rollout, sandbox = load_rollout_params(args.params)
    evalp, _ = load_eval_params(args.params)
    rows = read_trajectories(args.trajectories).to_pylist()
    tasks = select_tasks(TASKS, "", 0, evalp.seed)
    sets = build_sets(tasks, evalp.tasks_per_tier, evalp.seed)
    probe = select_tasks(TASKS, "train", sft.probe_tasks, sft.seed) if sft.probe_tasks else []
    curves: dict[int, list[dict]] = {}
    checkpoints: dict[int, Path] = {}
    summary: dict = {"seeds": args.seeds, "base": str(args.base), "sets": manifest(sets)}
    reused: list[dict] = []
    if args.reuse_pipeline is not None:
        seed = args.reuse_pipeline
        if seed != sft.seed:
            raise SystemExit(f"--reuse-pipeline {seed}: params.yaml has sft.seed {sft.seed}")
        checkpoints[seed] = ROOT / "models/policy-sft"
    for seed in args.seeds:
        if seed in checkpoints:
            continue
        params = dataclasses.replace(sft, seed=seed)
        sel = select_demonstrations(rows, params)
        train = sel.train
        if args.demos and len(train) > args.demos:
            train = random.Random(seed).sample(train, args.demos)
        log = LossCurves()
        out = args.work / f"sft-seed{seed}"
        result = train_sft(args.base, train, sel.val, params, out, log=log,
                           on_eval=parse_error_probe(probe, rollout, sandbox) if probe else None)
        write_loss_csv(args.out / f"sft_curves_seed{seed}.csv", log.rows,
                       columns=("step", "train/loss", "val/loss", "eval/parse_error_rate"))
        curves[seed], checkpoints[seed] = log.rows, out
        summary[f"sft_seed{seed}"] = {"demonstrations": len(train), "steps": result.steps,
                                      "stop_reason": result.stop_reason,
                                      "train_loss": result.train_loss, "val_loss": result.val_loss,
                                      "seconds": round(result.seconds, 1)}
        print(f"seed {seed}: {len(train)} demos, {result.steps} steps ({result.stop_reason}), "
              f"loss {result.train_loss:.3f}", flush=True)
    if args.reuse_pipeline is not None:  # read late: the DAG's sft / evaluate may still run
        while not (ROOT / "metrics/evaluate.json").is_file():
            time.sleep(10)
        seed = args.reuse_pipeline
        curves[seed] = read_curves(ROOT / "plots/sft_curves.csv")
        card = json.loads((ROOT / "models/policy-sft/training.json").read_text())
        summary[f"sft_seed{seed}"] = {"reused": "make pipeline", **card.get("metrics", {})}
    plot_curves(curves, args.out / "sft_curves.png")
    if args.reuse_pipeline is not None:
        reused = [dict(r, run=f"seed{args.reuse_pipeline}" if r["checkpoint"] == "sft"
                       else r["run"]) for r in read_eval(ROOT / "artifacts/eval.parquet")]
    with Enclave(backend=sandbox.backend, limits=sandbox.limits.to_limits(),
                 workers=sandbox.workers, consensus_runs=evalp.consensus_runs) as enclave:
        eval_rows = reused or evaluate_checkpoint(args.base, sets, evalp, sandbox,
                                                  checkpoint="init", enclave=enclave)
        for seed, path in checkpoints.items():
            if seed == args.reuse_pipeline:
                continue
            eval_rows += evaluate_checkpoint(path, sets, evalp, sandbox, checkpoint="sft",
                                             run=f"seed{seed}", enclave=enclave)
    write_eval(args.work / "eval.parquet", eval_rows)
    report = build_report(eval_rows, checkpoints=["init", "sft"], level=evalp.level,
                          n_boot=evalp.bootstrap, seed=evalp.seed)
    write_plots(pass_at_k_table(eval_rows), args.out / "pass_at_k.png", args.out / "pass_at_k.csv")
    write_json(args.out / "report.json", {**summary, **report})
    for tier, cmp in report["paired"].get("sft_vs_init", {}).items():
        print(f"{tier}: sft - init = {cmp.get('difference_estimate')} "
              f"[{cmp.get('difference_low')}, {cmp.get('difference_high')}]")


if __name__ == "__main__":
    main()
