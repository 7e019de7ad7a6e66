"""Stage `sft`: verified demonstrations -> loss-masked SFT -> `models/policy-sft` (SPEC §6).

Inputs: the scored rollout passports (`verify --trajectories-out`), the base policy, the
task pool (for the parse-error probe). Outputs: the HF model directory with its card, the
kept demonstrations and the drop log (every dropped demonstration with its reason), metrics,
and the loss / parse-error curves for DVC plots.
"""
from __future__ import annotations

from pathlib import Path

from rlvr.agent.passport import read_trajectories
from rlvr.agent.rollout import load_params as load_rollout_params
from rlvr.errors import exit_on_error
from rlvr.tasks.pool import select_tasks
from rlvr.tracking.stage import stage_run
from rlvr.train.curves import LossCurves, write_loss_csv
from rlvr.train.demos import select_demonstrations, write_selection
from rlvr.train.probe import parse_error_probe
from rlvr.train.sft import train_sft
from rlvr.train.sft_config import load_sft_params
from stages.common import parser


@exit_on_error
def main(argv: list[str] | None = None) -> None:
    p = parser("sft", __doc__)
    p.add_argument("--trajectories", type=Path, required=True,
                   help="scored rollout passports (verify --trajectories-out)")
    p.add_argument("--tasks", type=Path, action="append", required=True,
                   help="tasks Parquet for the parse-error probe (repeat for several)")
    p.add_argument("--base", type=Path, required=True, help="base policy directory")
    p.add_argument("--out", type=Path, required=True, help="output policy directory")
    p.add_argument("--data-out", type=Path, required=True)
    p.add_argument("--drops-out", type=Path, required=True)
    p.add_argument("--metrics", type=Path, required=True)
    p.add_argument("--plots", type=Path, required=True, help="loss curves CSV")
    p.add_argument("--png", type=Path, default=None, help="the same curves as a PNG")
    args = p.parse_args(argv)
    params = load_sft_params(args.params)
    rollout, sandbox = load_rollout_params(args.params)
    rows = read_trajectories(args.trajectories).to_pylist()
    probe_tasks = select_tasks(args.tasks, "train", params.probe_tasks, params.seed)
    inputs = {"trajectories": args.trajectories, "base": args.base,
              **{f"tasks{i}": t for i, t in enumerate(args.tasks)}}
    outputs = {"policy": args.out, "data": args.data_out, "drops": args.drops_out,
               "plots": args.plots, "png": args.png}
    with stage_run("sft", params, sections=("sft", "rollout", "sandbox"),
                   params_file=args.params, inputs=inputs, outputs=outputs,
                   metrics_path=args.metrics,
                   details_path=args.details) as run:
        selection = select_demonstrations(rows, params)
        write_selection(selection, args.data_out, args.drops_out)
        curves = LossCurves(then=run.log_step)
        on_eval = parse_error_probe(probe_tasks, rollout, sandbox) if probe_tasks else None
        result = train_sft(args.base, selection.train, selection.val, params, args.out,
                           log=curves, on_eval=on_eval)
        write_loss_csv(args.plots, curves.rows,
                       columns=("step", "train/loss", "val/loss", "eval/parse_error_rate"),
                       png=args.png, title="sft")
        run.log_metrics({"demonstrations": selection.summary(), "steps": result.steps,
                         "stop_reason": result.stop_reason, "train_loss": result.train_loss,
                         "val_loss": result.val_loss, "tokens": result.tokens,
                         "trainable_tokens": result.trainable_tokens,
                         "final_eval": {k: v for k, v in (result.evals[-1] if result.evals
                                                          else {}).items() if k != "step"}})
    print(f"sft: {len(selection.train)} demonstrations, {result.steps} steps "
          f"({result.stop_reason}) -> {args.out}")


if __name__ == "__main__":
    main()
