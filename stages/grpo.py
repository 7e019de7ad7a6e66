"""Stage `grpo`: online GRPO of the SFT policy against the enclave -> `models/policy-grpo`
(SPEC §7).

Inputs: the task pool (the `grpo.split` tasks are trained on), the SFT policy. The loop
(`rlvr.train.grpo.train_grpo`) rolls the policy out in its sandbox and hands only the
submitted diffs to the enclave opened here (consensus `grpo.consensus_runs`). Outputs: the
HF model directory (its `training.json` holds the update passport, `policy_step`, the
per-step curves and the pathology flags the gate reads, the curriculum report and the group
ledger), stage metrics, the dashboard CSV for DVC plots. `--work` keeps checkpoints and
rollout shards: a killed stage resumes from its last checkpoint.
"""
from __future__ import annotations

from pathlib import Path

from rlvr.agent.rollout import load_params as load_rollout_params
from rlvr.enclave.batch import VerifyParams, enclave_verifier
from rlvr.errors import exit_on_error
from rlvr.tasks.pool import select_tasks
from rlvr.tracking.stage import stage_run
from rlvr.train.curves import write_loss_csv
from rlvr.train.grpo import train_grpo
from rlvr.train.grpo_config import load_grpo_params
from rlvr.train.grpo_draws import STATUSES
from stages.common import parser

PLOT_COLUMNS = ("step", "train/reward", "train/pass_at_1", "train/pass_at_k",
                "train/informative_fraction", "train/entropy", "train/entropy_call",
                "train/entropy_reasoning", "train/length_mean",
                "train/parse_error_rate", "train/loss_mean", "train/groups_accepted",
                "train/groups_dropped", "train/mismatch/logprob_abs_diff_mean")


@exit_on_error
def main(argv: list[str] | None = None) -> None:
    p = parser("grpo", __doc__)
    p.add_argument("--tasks", type=Path, action="append", required=True,
                   help="tasks Parquet (repeat for several pools)")
    p.add_argument("--base", type=Path, required=True, help="policy to start from (SFT)")
    p.add_argument("--out", type=Path, required=True, help="output policy directory")
    p.add_argument("--work", type=Path, required=True,
                   help="checkpoints and rollout shards (kept for resumption)")
    p.add_argument("--metrics", type=Path, required=True)
    p.add_argument("--plots", type=Path, required=True, help="dashboard curves CSV")
    p.add_argument("--png", type=Path, default=None, help="the same curves as a PNG")
    args = p.parse_args(argv)
    params = load_grpo_params(args.params)
    rollout, sandbox = load_rollout_params(args.params)
    tasks = select_tasks(args.tasks, params.split, params.max_tasks, params.seed)
    verify = VerifyParams(seed=params.verify_seed, consensus_runs=params.consensus_runs)
    inputs = {"base": args.base, **{f"tasks{i}": t for i, t in enumerate(args.tasks)}}
    outputs = {"policy": args.out, "plots": args.plots, "png": args.png}
    with stage_run("grpo", params, sections=("grpo", "rollout", "sandbox"),
                   params_file=args.params, inputs=inputs, outputs=outputs,
                   metrics_path=args.metrics,
                   details_path=args.details) as run, \
            enclave_verifier(verify, sandbox, where="grpo") as (verifier, _):
        result = train_grpo(args.base, tasks, params, rollout, sandbox, args.out, args.work,
                            verifier=verifier, log=run.log_step)
        write_loss_csv(args.plots, result.curves, columns=PLOT_COLUMNS, png=args.png,
                       title="grpo")
        last = result.curves[-1] if result.curves else {}
        run.log_metrics({
            "steps": result.steps, "policy_step": result.policy_step,
            "resumed_from": result.resumed_from, "tasks": len(tasks),
            "flags": result.flags,
            "groups": {s: sum(g["status"] == s for g in result.ledger) for s in STATUSES},
            "curriculum": {k: v for k, v in result.curriculum.items() if k != "per_task"},
            "final": {k: v for k, v in last.items() if k.startswith("train/")},
            "seconds": round(result.seconds, 3),
            "seconds_per_step": (round(sum(result.step_seconds) / len(result.step_seconds), 3)
                                 if result.step_seconds else None),
        })
    raised = [k for k, v in result.flags.items() if v]
    print(f"grpo: {result.steps} steps, {result.policy_step} optimizer steps, "
          f"{sum(g['status'] == 'accepted' for g in result.ledger)}/{len(result.ledger)} groups "
          f"trained; flags: {', '.join(raised) or 'none'} -> {args.out}")


if __name__ == "__main__":
    main()
