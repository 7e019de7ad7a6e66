"""Stage `gate`: the release gate on the candidate vs the champion (SPEC §8).

Inputs: `eval.parquet` (both checkpoints, paired on tasks and sample seeds; the candidate's
and champion's names and directories are `gate` params), the candidate's training metrics
(its model card or stage metrics). Outputs: `gate.json` (decision, each rule's numbers, what
to discard), the Markdown report with its plots, DVC metrics; the decision goes to the MLflow
model registry (alias `champion` moves only on promotion).
"""
from __future__ import annotations

from pathlib import Path

from rlvr.errors import exit_on_error
from rlvr.gate.apply import decide_and_register, headline, load_inputs, write_outputs
from rlvr.gate.params import load_params
from rlvr.tracking.registry import client
from rlvr.tracking.stage import stage_run
from stages.common import parser


@exit_on_error
def main(argv: list[str] | None = None) -> None:
    p = parser("gate", __doc__)
    p.add_argument("--eval", type=Path, required=True,
                   help="eval.parquet holding the candidate (and the champion)")
    p.add_argument("--champion-eval", type=Path, default=None,
                   help="the champion's evaluation, when it is another file")
    p.add_argument("--training-metrics", type=Path, default=None,
                   help="the candidate's training metrics (model card training.json)")
    p.add_argument("--out", type=Path, required=True, help="gate.json")
    p.add_argument("--report", type=Path, required=True, help="Markdown report")
    p.add_argument("--plots-dir", type=Path, default=None, help="report PNGs")
    p.add_argument("--metrics", type=Path, required=True)
    args = p.parse_args(argv)
    params = load_params(args.params)
    inputs = load_inputs(params, args.eval, args.champion_eval or args.eval,
                         training_metrics=args.training_metrics)
    files = {"eval": args.eval, **({"champion_eval": args.champion_eval}
                                   if args.champion_eval else {}),
             **({"training_metrics": args.training_metrics} if args.training_metrics else {})}
    outputs = {"gate": args.out, "report": args.report, "plots": args.plots_dir}
    with stage_run("gate", params, sections=("gate",), params_file=args.params, inputs=files,
                   outputs=outputs, metrics_path=args.metrics,
                   details_path=args.details) as run:
        result = decide_and_register(params, inputs, registry_client=client())
        cost = write_outputs(result, inputs, gate_json=args.out, report=args.report,
                             plots_dir=args.plots_dir, seconds_in_report=False)
        run.log_metrics(headline(result, cost))
        plots = args.plots_dir or args.report.with_name(f"{args.report.stem}_plots")
        for path in [args.out, args.report, *sorted(plots.glob("*.png"))]:
            run.log_artifact(path)
    print(f"gate: {result.decision} ({params.candidate} vs {params.champion}"
          + (f"; blocked by {', '.join(result.blocking)}" if result.blocking else "")
          + f") -> {args.out}")


if __name__ == "__main__":
    main()
