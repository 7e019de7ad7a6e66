"""One gate run as data: inputs checked, rules applied, everything gate.json holds.

`run_gate(candidate_rows, champion_rows, params, ...)` is the library entry point: it refuses
unpaired inputs (`inputs.check_comparable`), applies the rules (`rules.apply_rules`) and
returns a `GateResult`; it writes nothing and touches no registry, so a caller can validate
everything before any output or alias moves. `GateResult.as_json()` is gate.json: a function
of the rows, params and training metrics (no clock in it).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from rlvr.config import as_dict
from rlvr.gate.inputs import (TrainingMetrics, check_comparable, policy_steps, policy_versions)
from rlvr.gate.params import GateParams
from rlvr.gate.reliability import changes, reliability, safety
from rlvr.gate.rules import Rule, TierComparison, apply_rules

GATE_VERSION = "rlvr.gate/2"  # 2: safety_flags counted per side and tier (was a note)


def clean(x: Any) -> Any:
    """JSON-safe: NaN/inf -> None, floats rounded to 6 places, tuples -> lists."""
    if isinstance(x, float):
        return None if not math.isfinite(x) else round(x, 6)
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    return x


@dataclass(frozen=True)
class Side:
    """One side of the comparison: checkpoint name, the content hash of the evaluated
    checkpoint, where its evaluation came from."""

    role: str                          # candidate | champion
    name: str
    content_hash: str
    evaluation: str                    # file (or description) of its eval rows
    policy_versions: tuple[str, ...]
    policy_steps: tuple[int, ...]
    model_dir: str = ""


@dataclass(frozen=True)
class GateResult:
    decision: str                      # promote | block | inconclusive
    rules: tuple[Rule, ...]
    comparisons: dict[str, TierComparison]
    candidate: Side
    champion: Side
    params: GateParams
    reliability: dict[str, Any]
    safety: dict[str, Any]             # role -> tier -> reliability.safety
    changes: dict[str, Any]
    training_source: str | None
    training_keys: tuple[str, ...] = ()
    registry: dict[str, Any] = field(default_factory=dict)

    def rule(self, name: str) -> Rule:
        return next(r for r in self.rules if r.name == name)

    @property
    def blocking(self) -> list[str]:
        """Names of what stopped a promotion: failed rules and raised stop signals."""
        out = [r.name for r in self.rules if r.status == "fail"]
        out += [f"stop_signals:{s}" for s in self.rule("stop_signals").numbers["raised"]]
        return out

    @property
    def candidate_is_champion(self) -> bool:
        """Same content hash: training made no update (e.g. GRPO accepted no group)."""
        return self.candidate.content_hash == self.champion.content_hash

    def discard(self) -> list[dict[str, Any]]:
        """Rollouts to discard: a rejected (blocked) candidate's policy versions and steps;
        none when the candidate is the champion's own checkpoint (its rollouts are the
        champion's)."""
        if self.decision != "block" or self.candidate_is_champion:
            return []
        return [{"checkpoint": self.candidate.name, "content_hash": self.candidate.content_hash,
                 "policy_version": v, "policy_steps": list(self.candidate.policy_steps)}
                for v in self.candidate.policy_versions]

    def as_json(self) -> dict[str, Any]:
        return clean({
            "gate_version": GATE_VERSION,
            "decision": self.decision,
            "candidate_is_champion": self.candidate_is_champion,
            "blocking": self.blocking,
            "inconclusive": [r.name for r in self.rules if r.status == "inconclusive"],
            "rules": {r.name: {"status": r.status, "why": r.why, **r.numbers}
                      for r in self.rules},
            "candidate": asdict(self.candidate),
            "champion": asdict(self.champion),
            "tiers": {t: asdict(c) for t, c in self.comparisons.items()},
            "reliability": self.reliability,
            "safety_flags": self.safety,
            "changes": self.changes,
            "training_metrics": {"source": self.training_source,
                                 "curves": list(self.training_keys)},
            "discard": self.discard(),
            "registry": self.registry,
            "params": {k: list(v) if isinstance(v, tuple) else v
                       for k, v in as_dict(self.params).items()},
        })


def _side(role: str, name: str, rows: Sequence[Mapping[str, Any]], content_hash: str,
          evaluation: str, model_dir: str) -> Side:
    return Side(role, name, content_hash, evaluation, tuple(policy_versions(rows)),
                tuple(policy_steps(rows)), model_dir)


def run_gate(candidate_rows: Sequence[Mapping[str, Any]],
             champion_rows: Sequence[Mapping[str, Any]], params: GateParams, *,
             training: TrainingMetrics | None = None, candidate_hash: str | None = None,
             champion_hash: str | None = None, candidate_eval: str = "",
             champion_eval: str = "") -> GateResult:
    """The gate on one candidate's and one champion's eval rows (`schemas.EVAL`, one
    checkpoint each). Hashes: the content hashes of the evaluated checkpoints
    (`inputs.checkpoint_hash`; default: the rows' single policy version). Raises
    `GateInputError` on inputs that are not paired."""
    check_comparable(candidate_rows, champion_rows, params.gated_tiers)
    decision, rules, cmps = apply_rules(candidate_rows, champion_rows, params, training)
    cand = _side("candidate", params.candidate, candidate_rows,
                 candidate_hash or ",".join(policy_versions(candidate_rows)), candidate_eval,
                 params.candidate_dir)
    champ = _side("champion", params.champion, champion_rows,
                  champion_hash or ",".join(policy_versions(champion_rows)), champion_eval,
                  params.champion_dir)
    return GateResult(
        decision=decision, rules=tuple(rules), comparisons=cmps, candidate=cand,
        champion=champ, params=params,
        reliability={"candidate": reliability(candidate_rows, level=params.level),
                     "champion": reliability(champion_rows, level=params.level)},
        safety={"candidate": safety(candidate_rows), "champion": safety(champion_rows)},
        changes=changes(cmps, candidate_rows, champion_rows, level=params.level),
        training_source=training.source if training else None,
        training_keys=tuple(training.keys()) if training else ())
