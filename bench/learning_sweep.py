"""Why the CPU default solves nothing, in numbers (LEARNING.md, issue "Learning I" §4): the
copy rate and pass@1 against pretraining steps, model size and the number of demonstrations.

The skill every fix needs first is copying a location out of the context: run_tests lists
`path:line` suspects and the line-addressed edit must name one. `rlvr.train.copy_probe.copy_probe`
measures it greedily on synthetic bugs (`rlvr.train.pretrain.repair_cases`) in two kinds of
code: the training families' (which pretraining shows) and the held-out families' (never
shown: a flagged path there can only be copied). Three sweeps, each one process:

    # copy rate vs pretraining steps, for one model size (evaluated every --eval-every steps)
    .venv/bin/python bench/learning_sweep.py pretrain --size default --steps 600 --eval-every 100
    .venv/bin/python bench/learning_sweep.py pretrain --size 7m --steps 200 --eval-every 50
    # pass@1 (train, heldout_function) and copy rate vs demonstrations, SFT from a pipeline's
    # init policy on seeded subsets of its verified demonstrations
    .venv/bin/python bench/learning_sweep.py demos --root /path/to/pipeline/checkout --demos 44 87 174
    # pass@1 of given policies as they are (e.g. the pretraining points) and their copy rate
    .venv/bin/python bench/learning_sweep.py evaluate --root /path/to/pipeline/checkout \
        --models DIR... --labels NAME...
    # can the architecture learn in-context copying at all (random strings, repeated)?
    .venv/bin/python bench/learning_sweep.py copy-check --base DIR --steps 1500
    # the figure from the JSON files the sweeps wrote
    .venv/bin/python bench/learning_sweep.py plot

Every run appends its rows to `docs/learning/sweep/*.json`.
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

from bench._common import evaluation_sets  # noqa: E402
from rlvr.agent.transcript import ChatCodec  # noqa: E402
from rlvr.config import load_section  # noqa: E402
from rlvr.engines.local_policy import policy_corpus  # noqa: E402
from rlvr.engines.model_dir import count_parameters, load_policy  # noqa: E402
from rlvr.tasks.splits import SplitParams  # noqa: E402
from rlvr.train.pretrain import pretrain_policy, repair_cases, training_code  # noqa: E402
from rlvr.train.policy_init import PolicyParams, build_random_policy  # noqa: E402
from rlvr.train.copy_probe import copy_probe  # noqa: E402

OUT = ROOT / "docs/learning/sweep"
# the default (params.yaml `policy`) and the issue's ~7 M-parameter probe size
SIZES = {"default": {}, "7m": {"hidden_size": 256, "layers": 6, "heads": 8, "kv_heads": 4,
                               "intermediate_size": 1024}}
CASES = 48  # synthetic bugs per kind of code
# `evaluate` labels of the pipeline's checkpoints that are points of the demonstrations curve
DEMO_POINTS = {"1.5M-200-plain": 0, "1.5M-200-plain+sft174": 174}


def _params(path: Path) -> tuple[PolicyParams, SplitParams]:
    return load_section(PolicyParams, "policy", path), load_section(SplitParams, "split", path)


def probe_code(root: Path, split: SplitParams) -> dict[str, dict[str, str]]:
    """path -> text of the code pretraining sees ('train') and of the held-out families."""
    evaluation = {*split.heldout_families, *split.regression_families}
    train = training_code(root, evaluation)
    heldout = {p: t for p, t in training_code(root, ()).items() if p not in train}
    return {"train_code": train, "heldout_code": heldout}


def probe_cases(codes: dict[str, dict[str, str]]) -> dict:
    """The fixed synthetic bugs of each kind of code (seeded by the kind's sorted rank)."""
    return {kind: repair_cases(code, CASES, seed=1000 + i)
            for i, (kind, code) in enumerate(sorted(codes.items()))}


def combined_probe(cases: dict, codec: ChatCodec):
    """One `on_eval` over every kind of code (`probe_cases`), its rates prefixed by kind."""
    probes = {kind: copy_probe(kind_cases, codec) for kind, kind_cases in cases.items()}

    def on_eval(step, model):
        return {f"{kind}/{k}": v for kind, p in probes.items() for k, v in p(step, model).items()}
    return on_eval


def _append(name: str, row: dict) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.json"
    rows = json.loads(path.read_text()) if path.is_file() else []
    rows = [r for r in rows if r.get("key") != row["key"]] + [row]
    path.write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")


def sweep_pretrain(args) -> None:
    policy, split = _params(args.params)
    policy = dataclasses.replace(policy, **SIZES[args.size])
    evaluation = {*split.heldout_families, *split.regression_families}
    recipe = {"line_shift": args.line_shift, "rename_paths": args.rename_paths,
              "train_on": args.train_on, "drills": args.drills, "address": args.address}
    # named in the key only when set, so the keys of earlier rows stay what they were
    recipe.update({k: v for k, v in (("episodes", args.episodes),
                                     ("batch_size", args.batch_size)) if v is not None})
    key = f"{args.size}-{args.steps}-" + "-".join(f"{v}" for v in recipe.values())
    work = args.work / f"pretrain-{key}"
    texts, _ = policy_corpus(ROOT, seed=policy.seed, synthetic_samples=policy.synthetic_samples,
                             exclude_families=evaluation)
    build_random_policy(policy, work / "random", texts)
    codes = probe_code(ROOT, split)
    probe = combined_probe(probe_cases(codes), ChatCodec.from_model_dir(work / "random"))
    n_params = count_parameters(work / "random")
    curve = [{"step": 0, "tokens": 0, **probe(0, load_policy(work / "random").model)}]
    tokens = {"n": 0}

    def log(step, metrics):
        tokens["n"] = metrics.get("train/tokens", tokens["n"])
        copy = {k: v for k, v in metrics.items() if "/copy_" in k}
        if copy:
            curve.append({"step": step, "tokens": tokens["n"],
                          **{k.removeprefix("eval/"): v for k, v in copy.items()}})
            print(f"step {step}: {json.dumps(curve[-1])}", flush=True)

    t0 = time.perf_counter()
    pre = dataclasses.replace(policy.pretrain, steps=args.steps, **recipe)
    result, _ = pretrain_policy(work / "random", work / "pretrained", codes["train_code"], pre,
                                log=log,
                                eval_every=args.eval_every, on_eval=probe)
    _append("pretrain", {"key": key, "size": args.size, "recipe": recipe,
                         "parameters": n_params, "steps": result.steps,
                         "seconds": round(time.perf_counter() - t0, 1),
                         "tokens_per_second": round(result.tokens_per_second, 1),
                         "final_loss": round(result.train_loss, 4), "curve": curve})


def _pass_at_1(model_dir: Path, name: str, sets, evalp, sandbox, enclave) -> dict:
    """pass@1 with its interval and the parse-error rate per tier (same sets, same seeds)."""
    from rlvr.evaluate.report import build_report
    from rlvr.evaluate.run import evaluate_checkpoint

    ev = evaluate_checkpoint(model_dir, sets, evalp, sandbox, checkpoint=name, enclave=enclave)
    report = build_report(ev, level=evalp.level, n_boot=evalp.bootstrap, seed=evalp.seed)
    return {t: {k: v for k, v in s.items() if k in (
        "tasks", "episodes", "solved", "pass_at_1", "pass_at_1_low", "pass_at_1_high",
        "parse_error_rate")} for t, s in report["checkpoints"][name]["tiers"].items()}


def sweep_evaluate(args) -> None:
    """pass@1 of policies as they are (e.g. each pretraining point) on the train and
    held-out-function tiers, beside their copy rate."""
    from rlvr.enclave.core import Enclave
    from rlvr.evaluate.params import load_params as load_eval_params

    evalp, sandbox = load_eval_params(args.params)
    _, split = _params(args.params)
    sets = evaluation_sets(args.root, evalp, ("train", "heldout_function"))
    cases = probe_cases(probe_code(ROOT, split))
    with Enclave(backend=sandbox.backend, limits=sandbox.limits.to_limits(),
                 workers=sandbox.workers, consensus_runs=evalp.consensus_runs) as enclave:
        for label, model_dir in zip(args.labels, args.models):
            copy = combined_probe(cases, ChatCodec.from_model_dir(model_dir))(
                0, load_policy(model_dir).model)
            row = {"key": label, "model": str(model_dir), "copy": copy,
                   "tiers": _pass_at_1(model_dir, label, sets, evalp, sandbox, enclave)}
            _append("evaluate", row)
            print(json.dumps(row), flush=True)


def sweep_demos(args) -> None:
    from rlvr.agent.passport import read_trajectories
    from rlvr.enclave.core import Enclave
    from rlvr.evaluate.params import load_params as load_eval_params
    from rlvr.train.sft_config import load_sft_params
    from rlvr.train.demos import select_demonstrations
    from rlvr.train.sft import train_sft

    root = args.root
    sft = dataclasses.replace(load_sft_params(args.params), probe_tasks=0)
    evalp, sandbox = load_eval_params(args.params)
    _, split = _params(args.params)
    base = root / "models/policy-init"
    rows = read_trajectories(root / "artifacts/trajectories_verified.parquet").to_pylist()
    sel = select_demonstrations(rows, sft)
    sets = evaluation_sets(root, evalp, ("train", "heldout_function"))
    probe = combined_probe(probe_cases(probe_code(ROOT, split)), ChatCodec.from_model_dir(base))
    with Enclave(backend=sandbox.backend, limits=sandbox.limits.to_limits(),
                 workers=sandbox.workers, consensus_runs=evalp.consensus_runs) as enclave:
        for n in args.demos:
            train = sel.train if n >= len(sel.train) else \
                random.Random(sft.seed).sample(sel.train, n)
            out = args.work / f"sft-demos{n}"
            t0 = time.perf_counter()
            result = train_sft(base, train, sel.val, sft, out)
            seconds = time.perf_counter() - t0
            copy = probe(result.steps, load_policy(out).model)
            tiers = _pass_at_1(out, f"demos{n}", sets, evalp, sandbox, enclave)
            row = {"key": str(n), "demonstrations": len(train), "steps": result.steps,
                   "stop_reason": result.stop_reason, "train_loss": round(result.train_loss, 4),
                   "val_loss": result.val_loss, "sft_seconds": round(seconds, 1),
                   "copy": copy, "tiers": tiers}
            _append("demos", row)
            print(json.dumps(row), flush=True)


def copy_check(args) -> None:
    """Can this architecture and the SFT loop learn in-context copying at all? Random
    12-token strings, a filler, a separator, the string again; only the repeat is trained;
    next-token accuracy on the repeats of fresh strings (1/3,900 by chance)."""
    import torch

    from rlvr.train.sft_config import DemoParams, EarlyStopParams, SFTParams
    from rlvr.train.demos import demo_row, token_hash
    from rlvr.train.sft import train_sft

    rng = random.Random(0)

    def sequence():
        s = [rng.randrange(100, 4000) for _ in range(12)]
        filler = [rng.randrange(100, 4000) for _ in range(rng.randint(0, 40))]
        return s + filler + [5] + s, [0] * (len(s) + len(filler) + 1) + [1] * len(s)

    rows = []
    for i in range(4000):
        ids, mask = sequence()
        rows.append(demo_row({"trajectory_id": f"copy-{i}", "task_id": f"copy-{i}",
                              "family": "copy", "engine": "synthetic", "token_ids": ids,
                              "loss_mask": mask}, token_hash(ids)))
    p = SFTParams(seed=0, learning_rate=3e-3, max_steps=args.steps, epochs=0, batch_size=32,
                  warmup_steps=20, eval_every=0, probe_tasks=0,
                  demos=DemoParams(val_fraction=0.0),
                  early_stop=EarlyStopParams(patience=0, parse_error_stop=None))
    t0 = time.perf_counter()
    result = train_sft(args.base, rows, [], p, args.work / "copy-check")
    model = load_policy(args.work / "copy-check").model
    hit = 0
    for _ in range(50):
        ids, _ = sequence()
        k = len(ids) - 12
        with torch.no_grad():
            pred = model(torch.tensor([ids])).logits[0].argmax(-1).tolist()
        hit += sum(pred[k - 1 + j] == ids[k + j] for j in range(12))
    row = {"key": f"{args.base.name}-{args.steps}", "base": str(args.base),
           "parameters": count_parameters(args.base), "steps": result.steps,
           "sequences_seen": result.steps * 32, "train_loss": round(result.train_loss, 4),
           "fresh_copy_accuracy": round(hit / 600, 4),
           "seconds": round(time.perf_counter() - t0, 1)}
    _append("copy_check", row)
    print(json.dumps(row), flush=True)


def plot(args) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    pre = json.loads((OUT / "pretrain.json").read_text()) if (OUT / "pretrain.json").is_file() else []
    for run in pre:
        r = run.get("recipe", {})
        name = f"{run['parameters'] / 1e6:.1f} M" + (
            f", shift {r['line_shift']}, rename {r['rename_paths']}, {r['train_on']}, "
            f"{r.get('drills', 0)} drills"
            if r.get("line_shift") or r.get("rename_paths") or r.get("train_on") == "actions"
            or r.get("drills") else "")
        for kind, ls in (("train_code", "-"), ("heldout_code", "--")):
            xs = [c["tokens"] / 1e6 for c in run["curve"]]
            label = f"{name}; {kind.replace('_', ' ')}"
            axes[0].plot(xs, [c[f"{kind}/copy_path_flagged"] for c in run["curve"]], ls,
                         marker="o", ms=3, label=label)
            axes[1].plot(xs, [c[f"{kind}/copy_line_flagged"] for c in run["curve"]], ls,
                         marker="o", ms=3, label=label)
    axes[0].set(xlabel="pretraining tokens (M)", ylabel="first edit names a flagged file",
                ylim=(-0.02, 0.5), title="copying the path, vs pretraining")
    axes[1].set(xlabel="pretraining tokens (M)", ylabel="first edit on a flagged path:line",
                ylim=(-0.02, 0.5), title="copying path and line, vs pretraining")
    demos = json.loads((OUT / "demos.json").read_text()) if (OUT / "demos.json").is_file() else []
    # the pipeline's own init (0 demonstrations) and SFT (all of them), run through `evaluate`
    evaluated = json.loads((OUT / "evaluate.json").read_text()) \
        if (OUT / "evaluate.json").is_file() else []
    demos += [dict(r, demonstrations=DEMO_POINTS[r["key"]]) for r in evaluated
              if r["key"] in DEMO_POINTS]
    demos.sort(key=lambda r: r["demonstrations"])
    if demos:
        xs = [r["demonstrations"] for r in demos]
        for tier in ("train", "heldout_function"):
            axes[2].plot(xs, [r["tiers"][tier]["pass_at_1"] for r in demos], "o-",
                         label=f"pass@1 {tier}")
        axes[2].plot(xs, [r["copy"]["heldout_code/copy_path_flagged"] for r in demos], "s--",
                     label="flagged file, held-out code")
        axes[2].plot(xs, [r["copy"]["train_code/copy_path_flagged"] for r in demos], "s:",
                     label="flagged file, training code")
    axes[2].set(xlabel="SFT demonstrations (from the 200-step init)", ylim=(-0.02, 0.5),
                title="pass@1 and copying vs demonstrations")
    for a in axes:
        a.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(ROOT / "docs/learning/sweep.png", dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pretrain")
    p.add_argument("--size", choices=sorted(SIZES), default="default")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--line-shift", type=int, default=0, help="policy.pretrain.line_shift")
    p.add_argument("--rename-paths", type=float, default=0.0, help="policy.pretrain.rename_paths")
    p.add_argument("--train-on", choices=("all", "actions"), default="all",
                   help="policy.pretrain.train_on")
    p.add_argument("--drills", type=int, default=0, help="policy.pretrain.drills")
    p.add_argument("--address", choices=("line", "suspect", "fix"), default="line",
                   help="policy.pretrain.address")
    p.add_argument("--episodes", type=int, help="policy.pretrain.episodes (default: params.yaml)")
    p.add_argument("--batch-size", type=int, help="policy.pretrain.batch_size (default: params.yaml)")
    d = sub.add_parser("demos")
    d.add_argument("--root", type=Path, default=ROOT, help="a checkout after `make pipeline`")
    d.add_argument("--demos", type=int, nargs="+", default=[44, 87, 174])
    e = sub.add_parser("evaluate")
    e.add_argument("--root", type=Path, default=ROOT, help="a checkout after `make pipeline`")
    e.add_argument("--models", type=Path, nargs="+", required=True)
    e.add_argument("--labels", nargs="+", required=True)
    c = sub.add_parser("copy-check")
    c.add_argument("--base", type=Path, required=True, help="a random-init policy directory")
    c.add_argument("--steps", type=int, default=1500)
    sub.add_parser("plot")
    for s in (p, d, e, c):
        s.add_argument("--params", type=Path, default=ROOT / "params.yaml")
        s.add_argument("--work", type=Path, default=ROOT / "build/sweep")
    args = ap.parse_args()
    os.environ.setdefault("RLVR_TRACKING", "off")
    if args.cmd == "evaluate" and len(args.labels) != len(args.models):
        raise SystemExit("--labels: one per --models entry")
    {"pretrain": sweep_pretrain, "demos": sweep_demos, "evaluate": sweep_evaluate,
     "copy-check": copy_check, "plot": plot}[args.cmd](args)


if __name__ == "__main__":
    main()
