"""A gate run end to end, shared by `stages/gate.py` and `rlvr gate`.

Order matters (SPEC §8 "no alias moved on bad input"): `load_inputs` reads and checks every
input (params, both evaluations, checkpoint hashes, training metrics), `decide_and_register`
runs the rules and — only after the registry is seen to agree with the inputs
(`registry.check_champion`) — records the decision in the registry; `write_outputs` writes
gate.json and the report last. Any bad input raises an `RlvrError` before the first write.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.artifacts.io import timings_path, write_json
from rlvr.evaluate.report import read_eval, read_eval_timings
from rlvr.gate.decision import GateResult, clean, run_gate
from rlvr.gate.inputs import (GateInputError, TrainingMetrics, checkpoint_hash, policy_steps,
                              policy_versions, read_training_metrics, select_side)
from rlvr.gate.params import GateParams
from rlvr.gate.reliability import cost
from rlvr.gate.report import write_report
from rlvr.tracking.registry import Checkpoint, apply_decision, check_champion


@dataclass(frozen=True)
class GateInputs:
    candidate_rows: list[dict]
    champion_rows: list[dict]
    candidate_hash: str
    champion_hash: str
    candidate_eval: str
    champion_eval: str
    training: TrainingMetrics | None
    candidate_timings: dict | None
    champion_timings: dict | None


def _timings(path: Path) -> dict | None:
    side = timings_path(path)
    return read_eval_timings(side) if side.is_file() else None


def load_inputs(params: GateParams, candidate_eval: Path | str, champion_eval: Path | str, *,
                training_metrics: Path | str | None = None,
                use_dirs: bool = True) -> GateInputs:
    """Every input, read and checked. `use_dirs`: hash `params.candidate_dir` /
    `champion_dir` and check them against the evaluated policy versions (off: the
    evaluations' own policy versions are the hashes)."""
    ce, he = Path(candidate_eval), Path(champion_eval)
    same = he.resolve() == ce.resolve()
    if same and params.candidate == params.champion:
        raise GateInputError(f"{ce}: candidate and champion are both checkpoint "
                             f"{params.candidate!r} of one evaluation")
    rows_c = read_eval(ce)
    rows_h = rows_c if same else read_eval(he)
    cand = select_side(rows_c, params.candidate, str(ce))
    champ = select_side(rows_h, params.champion, str(he))
    ch = checkpoint_hash(cand, params.candidate_dir if use_dirs else None, "candidate")
    hh = checkpoint_hash(champ, params.champion_dir if use_dirs else None, "champion")
    return GateInputs(cand, champ, ch, hh, str(ce), str(he),
                      read_training_metrics(training_metrics), _timings(ce), _timings(he))


def checkpoints(params: GateParams, inputs: GateInputs):
    def one(name, hash_, rows, model_dir, evaluation):
        source = str(Path(model_dir).resolve()) if model_dir else str(Path(evaluation).resolve())
        return Checkpoint(name, hash_, source, tuple(policy_versions(rows)),
                          tuple(policy_steps(rows)))

    return (one(params.candidate, inputs.candidate_hash, inputs.candidate_rows,
                params.candidate_dir, inputs.candidate_eval),
            one(params.champion, inputs.champion_hash, inputs.champion_rows,
                params.champion_dir, inputs.champion_eval))


def decide_and_register(params: GateParams, inputs: GateInputs, *,
                        registry_client=None) -> GateResult:
    """The rules on the inputs; with `registry_client`, the decision in the registry (the
    registry is checked against the inputs before anything in it changes)."""
    result = run_gate(inputs.candidate_rows, inputs.champion_rows, params,
                      training=inputs.training, candidate_hash=inputs.candidate_hash,
                      champion_hash=inputs.champion_hash, candidate_eval=inputs.candidate_eval,
                      champion_eval=inputs.champion_eval)
    if registry_client is None:
        return result
    cand, champ = checkpoints(params, inputs)
    for ckpt in (cand, champ):
        if "," in ckpt.content_hash:
            raise GateInputError(f"{ckpt.name}: {len(ckpt.policy_versions)} policy versions "
                                 "(pooled runs) are no single checkpoint to register")
    model, alias = params.registry.model_name, params.registry.alias
    check_champion(registry_client, model, champ.content_hash, cand.content_hash, alias)
    outcome = apply_decision(registry_client, model, result.decision, cand, champ, alias=alias,
                             reason=f"gate: {result.decision} ({', '.join(result.blocking)})"
                             if result.blocking else f"gate: {result.decision}")
    return dataclasses.replace(result, registry=outcome)


def costs(result: GateResult, inputs: GateInputs) -> dict[str, Any]:
    """Seconds per side and tier from the timings sidecars (empty where there is none)."""
    out = {}
    for role, rows, t in (("candidate", inputs.candidate_rows, inputs.candidate_timings),
                          ("champion", inputs.champion_rows, inputs.champion_timings)):
        if t is not None:
            out[role] = clean(cost(rows, t, level=result.params.level))
    return out


def headline(result: GateResult, cost_numbers: dict[str, Any]) -> dict[str, Any]:
    """The DVC metrics: decision, each rule's status, the target difference, contract rate,
    raised signals, the registry outcome, and the seconds (metrics only)."""
    target = result.comparisons[result.params.target_tier]
    contract = result.rule("contract_compliance").numbers
    return clean({
        "decision": result.decision, "promoted": int(result.decision == "promote"),
        "rules": {r.name: r.status for r in result.rules},
        "target": {"tier": target.tier, "difference": target.difference, "low": target.low,
                   "high": target.high, "pairs": target.n_pairs},
        "contract_unparsed_rate": contract["rate"],
        "stop_signals_raised": result.rule("stop_signals").numbers["raised"],
        "registry": {k: v for k, v in result.registry.items()
                     if k in ("candidate_version", "champion_now", "alias_moved")},
        "cost": cost_numbers,
    })


def write_outputs(result: GateResult, inputs: GateInputs, *, gate_json: Path | str,
                  report: Path | str, plots_dir: Path | str | None = None,
                  seconds_in_report: bool = True) -> dict[str, Any]:
    """gate.json and the report (with its plots); returns the cost numbers.
    `seconds_in_report=False` (stage `gate`): the report is a versioned DVC out, and wall
    seconds would change its hash on every run; they go to the metrics only."""
    gate = result.as_json()
    cost_numbers = costs(result, inputs)
    write_report(report, gate, candidate_rows=inputs.candidate_rows,
                 champion_rows=inputs.champion_rows, training=inputs.training,
                 keys=result.params.keys, plots_dir=plots_dir,
                 cost=cost_numbers if seconds_in_report else None)
    write_json(gate_json, gate)
    return cost_numbers
