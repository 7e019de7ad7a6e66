"""The "Learning II" claim: GRPO checkpoints over several seeds against the SFT checkpoint they
start from, paired on the same seeded evaluation tasks and sample seeds (LEARNING.md).

Reads what `make pipeline` left in `--root` (the task pool, the SFT policy, params.yaml),
trains one GRPO checkpoint per seed with the library (`rlvr.train.grpo.train_grpo`, what
stage `grpo` runs, with `--steps` / `--lr` / `--max-tasks` overriding `grpo.*`), evaluates
SFT once and every seed's checkpoint as runs of one checkpoint `grpo`
(`rlvr.evaluate.run.evaluate_checkpoint`), so the paired difference pools the seeds, and
writes the report, the training curves (reward, entropy, informative fraction per step and
seed) and the pass@k curves:

    .venv/bin/python bench/learning_grpo.py --root /path/to/pipeline/checkout --seeds 0 1 2 \\
        --steps 12 --out docs/learning/grpo

`--preset collapse` is the run engineered to collapse (issue "Learning II" must-show 4): a
tiny task set, a high learning rate, no KL, entropy control off. The tiny set is the training
tasks some checkpoint solved in the pipeline's own evaluation (`artifacts/eval.parquet`,
tier train, or `--solved-from`), topped up with seeded training tasks: a set the policy cannot solve at all gives
every group identical rewards, so nothing would be trained, let alone collapse. Its report
carries the pathology flags the trainer raised (`training.json` `flags`), which the release
gate reads (`rlvr gate` on this run's `eval.parquet` and `training.json`).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import evaluation_sets, pipeline_pool  # noqa: E402
from rlvr.agent.rollout import load_params as load_rollout_params  # noqa: E402
from rlvr.artifacts.io import write_json  # noqa: E402
from rlvr.enclave.batch import VerifyParams, enclave_verifier  # noqa: E402
from rlvr.evaluate.params import TierSizes, load_params as load_eval_params  # noqa: E402
from rlvr.evaluate.report import build_report, pass_at_k_table, write_eval, write_plots  # noqa: E402
from rlvr.evaluate.run import evaluate_checkpoint  # noqa: E402
from rlvr.evaluate.sets import manifest  # noqa: E402
from rlvr.orchestrate.params import apply_param_overrides  # noqa: E402
from rlvr.rl.advantages import available  # noqa: E402
from rlvr.rl.reward import RewardParams  # noqa: E402
from rlvr.tasks.pool import select_tasks  # noqa: E402
from rlvr.train.grpo import train_grpo  # noqa: E402
from rlvr.train.grpo_config import load_grpo_params  # noqa: E402

CURVES = ("train/reward", "train/pass_at_1", "train/entropy", "train/informative_fraction",
          "train/parse_error_rate")


def preset(params, name: str, args):
    """`grpo` params of the run: the DAG's, with this bench's overrides."""
    over = {k: v for k, v in (("steps", args.steps), ("learning_rate", args.lr),
                              ("max_tasks", args.max_tasks), ("tasks_per_draw", args.tasks_per_draw),
                              ("max_draws", args.max_draws)) if v is not None}
    if args.estimator:  # its default reward scaling comes with it (grpo: group std)
        params = dataclasses.replace(params, loss=dataclasses.replace(
            params.loss, advantage=dataclasses.replace(
                params.loss.advantage, estimator=args.estimator, scale_rewards=None)))
    if name == "collapse":  # tiny task set, high lr, no KL, no entropy control
        over = {"max_tasks": 4, "learning_rate": 3e-3, "steps": 12, **over}
        if over["max_tasks"] < 1:  # 0 would mean "every task", the opposite of the preset
            raise SystemExit("--max-tasks: the collapse preset trains on a tiny task set "
                             f"(>= 1 task), got {over['max_tasks']}")
        params = dataclasses.replace(
            params, loss=dataclasses.replace(params.loss, beta=0.0),
            entropy=dataclasses.replace(params.entropy, coef=0.0, eta=0.0))
    return dataclasses.replace(params, **over)


def grpo_params(params_file: Path, overrides: Sequence[str]):
    """The `grpo` section of `params_file` with `--set KEY=VALUE` overrides, applied by the
    project's `dvc exp run -S` code (`rlvr.orchestrate.params`, Hydra syntax) to a copy, so
    the pipeline checkout's params stay as they are and an unknown key or invalid value is a
    named error."""
    if not overrides:
        return load_grpo_params(params_file)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "params.yaml"
        shutil.copyfile(params_file, copy)
        apply_param_overrides(Path(tmp), [f"grpo.{item}" for item in overrides])
        return load_grpo_params(copy)


def solved_train_tasks(evaluation: Path) -> list[str]:
    """Training-tier task ids that any checkpoint solved in `evaluation` (an eval.parquet)."""
    import pandas as pd

    rows = pd.read_parquet(evaluation, columns=["tier", "task_id", "success"])
    return sorted(set(rows[(rows.tier == "train") & rows.success].task_id))


def training_tasks(pool, params, solved_from: Path, name: str, named: Sequence[str] = ()):
    """The tasks a seed trains on: `grpo.split` sampled as stage `grpo` does, or exactly the
    `named` ones (a band-selected pool: tasks the policy solves sometimes), or for the
    collapse preset the solved training tasks (or the `named` ones) first, topped up to
    `max_tasks`."""
    if name != "collapse" and not named:
        return select_tasks(pool, params.split, params.max_tasks, params.seed)
    split = select_tasks(pool, params.split, 0, params.seed)
    if unknown := set(named) - {t.task_id for t in split}:
        raise SystemExit(f"--train-tasks: not in split {params.split!r}: {', '.join(sorted(unknown))}")
    if name != "collapse":
        return [t for t in split if t.task_id in set(named)]
    solved = set(named) or set(solved_train_tasks(solved_from))
    first = [t for t in split if t.task_id in solved][:params.max_tasks]
    rest = [t for t in split if t.task_id not in solved]
    return first + random.Random(params.seed).sample(rest, params.max_tasks - len(first))


def recorded_rows(evaluation: Path, checkpoint: str, sets, samples_per_task: int) -> list[dict]:
    """`checkpoint`'s rows of a recorded evaluation for exactly the tasks of `sets`; a named
    error unless every planned (tier, task, sample) is there once."""
    from rlvr.artifacts import schemas
    from rlvr.artifacts.io import read_table

    table = read_table(evaluation, schemas.EVAL, contract="eval")
    rows = [r for r in table.to_pylist()
            if r["checkpoint"] == checkpoint and r["tier"] in {s.tier for s in sets}]
    want = {(s.tier, t, i) for s in sets for t in s.task_ids for i in range(samples_per_task)}
    got = [(r["tier"], r["task_id"], r["sample_index"]) for r in rows]
    if sorted(got) != sorted(want):
        raise SystemExit(f"{evaluation} holds {len(got)} "
                         f"'{checkpoint}' episodes, not the {len(want)} this evaluation plans "
                         "(another params file or code?): evaluate SFT instead")
    return rows


def evaluation(path: Path, checkpoint_dir: Path, sets, evalp, sandbox, enclave, **names) -> list[dict]:
    """One checkpoint's evaluation rows, kept in `path` (under --work) so that a killed bench
    re-evaluates nothing it already finished; reused only if it holds exactly the planned
    episodes (`recorded_rows`)."""
    if path.exists():
        return recorded_rows(path, names["checkpoint"], sets, evalp.samples_per_task)
    rows = evaluate_checkpoint(checkpoint_dir, sets, evalp, sandbox, enclave=enclave, **names)
    write_eval(path, rows)
    return rows


def plot_curves(curves: dict[int, list[dict]], png: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CURVES), figsize=(3.2 * len(CURVES), 3.2))
    for seed, rows in sorted(curves.items()):
        for ax, key in zip(axes, CURVES):
            pts = [(r["step"], r[key]) for r in rows if key in r]
            if pts:
                ax.plot(*zip(*pts), "o-", ms=3, lw=1, label=f"seed {seed}")
    for ax, key in zip(axes, CURVES):
        ax.set(xlabel="loop step", title=key.removeprefix("train/"))
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], fromfile_prefix_chars="@")
    ap.add_argument("--root", type=Path, required=True, help="a checkout after `make pipeline`")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--preset", choices=("healthy", "collapse"), default="healthy")
    ap.add_argument("--steps", type=int, help="grpo.steps (default: params.yaml)")
    ap.add_argument("--lr", type=float, help="grpo.learning_rate (default: params.yaml)")
    ap.add_argument("--max-tasks", type=int, help="grpo.max_tasks (default: params.yaml)")
    ap.add_argument("--tiers", nargs="+", default=["train", "heldout_function", "heldout",
                                                    "regression"])
    ap.add_argument("--tasks-per-tier", type=int, nargs=4, metavar=("TRAIN", "HF", "HO", "REG"),
                    help="evaluate.tasks_per_tier (default: params.yaml)")
    ap.add_argument("--samples", type=int, help="evaluate.samples_per_task (default: params.yaml)")
    ap.add_argument("--tasks-per-draw", type=int, help="grpo.tasks_per_draw (default: params.yaml)")
    ap.add_argument("--max-draws", type=int, help="grpo.max_draws (default: params.yaml)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs/learning/grpo")
    ap.add_argument("--work", type=Path, default=ROOT / "build/learning-grpo")
    ap.add_argument("--solved-from", type=Path,
                    help="collapse preset: the eval.parquet whose solved training tasks it "
                         "trains on (default: the pipeline's artifacts/eval.parquet)")
    ap.add_argument("--train-tasks", nargs="+", default=[],
                    help="train on exactly these task ids (healthy preset; e.g. @FILE holding "
                         "`--train-tasks` and one id per line); collapse preset: these instead "
                         "of the solved ones of --solved-from, topped up to --max-tasks")
    ap.add_argument("--estimator", choices=available(),
                    help="grpo.loss.advantage.estimator, with its default reward scaling "
                         "(default: params.yaml)")
    ap.add_argument("--reward", type=float, nargs=2, metavar=("LAMBDA_FMT", "ALPHA"),
                    help="rollout.reward weights of SPEC §5 for training (default: params.yaml); "
                         "`0 0` = the verdict alone")
    ap.add_argument("--sft-eval", type=Path,
                    help="take SFT's rows from this eval.parquet (e.g. the pipeline's, or an "
                         "earlier run of this bench on the same sets) instead of evaluating "
                         "it again; a named error unless it holds exactly the planned episodes")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="any other grpo key, dotted below `grpo`, as `dvc exp run -S` takes it (e.g. "
                         "`--set epochs=4 --set loss.loss_aggregation=seq_mean`); the preset's "
                         "own knobs (β, entropy control) win over it")
    args = ap.parse_args()
    os.environ.setdefault("RLVR_TRACKING", "off")
    params_file = args.root / "params.yaml"
    grpo = preset(grpo_params(params_file, args.overrides), args.preset, args)
    rollout, sandbox = load_rollout_params(params_file)
    if args.reward:
        rollout = dataclasses.replace(rollout, reward=RewardParams(*args.reward))
    evalp, _ = load_eval_params(params_file)
    if args.tasks_per_tier:
        evalp = dataclasses.replace(evalp, tasks_per_tier=TierSizes(*args.tasks_per_tier))
    if args.samples:
        evalp = dataclasses.replace(evalp, samples_per_task=args.samples)
    pool = pipeline_pool(args.root)
    sets = evaluation_sets(args.root, evalp, args.tiers)
    base = args.root / "models/policy-sft"
    work = args.work / args.preset
    summary: dict = {"preset": args.preset, "seeds": args.seeds, "base": str(base),
                     "grpo": dataclasses.asdict(grpo), "reward": dataclasses.asdict(rollout.reward),
                     "sets": manifest(sets), "runs": {}}
    curves: dict[int, list[dict]] = {}
    verify = VerifyParams(seed=grpo.verify_seed, consensus_runs=grpo.consensus_runs)
    with enclave_verifier(verify, sandbox, where="grpo") as (verifier, enclave):
        rows = (recorded_rows(args.sft_eval, "sft", sets, evalp.samples_per_task)
                if args.sft_eval else
                evaluation(work / "eval-sft.parquet", base, sets, evalp, sandbox, enclave,
                           checkpoint="sft"))
        for seed in args.seeds:
            p = dataclasses.replace(grpo, seed=seed)
            tasks = training_tasks(pool, p, args.solved_from or args.root / "artifacts/eval.parquet",
                                   args.preset, args.train_tasks)
            result = train_grpo(base, tasks, p, rollout, sandbox, work / f"seed{seed}",
                                work / f"seed{seed}-work", verifier=verifier)
            curves[seed] = result.curves
            summary["runs"][f"seed{seed}"] = {
                "tasks": [t.task_id for t in tasks], "steps": result.steps, "policy_step": result.policy_step,
                "flags": result.flags,
                # wall time of the steps trained by this invocation only: a resumed seed's
                # earlier steps are not timed again (their times stay out of checkpoints)
                "steps_this_run": result.steps - result.resumed_from,
                "seconds_this_run": round(sum(result.step_seconds), 1),
                "groups": {s: sum(g["status"] == s for g in result.ledger)
                           for s in ("accepted", "identical_rewards", "infra_error", "surplus")},
                "curves": result.curves}
            print(f"seed {seed}: {result.steps} steps, {result.policy_step} optimizer steps, "
                  f"flags {[k for k, v in result.flags.items() if v]}", flush=True)
            rows += evaluation(work / f"eval-seed{seed}.parquet", work / f"seed{seed}", sets,
                               evalp, sandbox, enclave, checkpoint="grpo", run=f"seed{seed}")
    write_eval(work / "eval.parquet", rows)
    report = build_report(rows, checkpoints=["sft", "grpo"], level=evalp.level,
                          n_boot=evalp.bootstrap, seed=evalp.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    plot_curves(curves, args.out / f"{args.preset}_curves.png",
                f"GRPO from SFT, preset {args.preset}, seeds {args.seeds}")
    write_plots(pass_at_k_table(rows), args.out / f"{args.preset}_pass_at_k.png",
                args.out / f"{args.preset}_pass_at_k.csv")
    write_json(args.out / f"{args.preset}_report.json", {**summary, **report})
    for tier, cmp in report["paired"].get("grpo_vs_sft", {}).items():
        print(f"{tier}: grpo - sft = {cmp.get('difference_estimate')} "
              f"[{cmp.get('difference_low')}, {cmp.get('difference_high')}]")


if __name__ == "__main__":
    main()
