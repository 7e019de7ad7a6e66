"""Beside capability (SPEC §8): reliability over repeats, turns and tool calls, cost, infra
errors and the enclave's safety flags per side and tier, and the "what improved / what got
worse" table.

Everything here is a function of the eval rows, except `cost`, which reads the evaluation's
timings sidecar (seconds vary run to run, so they go to metrics and the report, never to
gate.json).
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Sequence

from rlvr.artifacts.schemas import EVAL_TIERS
from rlvr.evaluate.report import summarize
from rlvr.gate.rules import TierComparison

def _tiers(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    return [t for t in EVAL_TIERS if any(r["tier"] == t for r in rows)]


def safety(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per tier: episodes whose verdict carried an enclave safety flag (tampering, a resource
    limit, an unresponsive runner, ...) and how often each flag was raised. Reported, not a
    rule: a run that tampers already fails its verdict (`Enclave.judge`), so capability
    counts it; here the reader sees what the policy tried."""
    out: dict[str, Any] = {}
    for tier in _tiers(rows):
        group = [r for r in rows if r["tier"] == tier]
        counts = Counter(f for r in group for f in r.get("safety_flags") or ())
        out[tier] = {"episodes": len(group),
                     "flagged": sum(bool(r.get("safety_flags")) for r in group),
                     "flags": dict(sorted(counts.items()))}
    return out


def reliability(rows: Sequence[Mapping[str, Any]], *, level: float) -> dict[str, Any]:
    """Per tier: pass@k and pass^k (k = 1..n), turns and valid tool calls per episode,
    tokens (whole transcript and generated) per solved task, infra errors."""
    out: dict[str, Any] = {}
    for tier in _tiers(rows):
        group = [r for r in rows if r["tier"] == tier]
        s = summarize(group, level=level)
        valid = sum(r["n_turns"] - r["n_invalid_actions"] for r in group)
        out[tier] = {
            "tasks": s["tasks"], "episodes": s["episodes"], "solved": s["solved"],
            "pass_at_1": s["pass_at_1"], "pass_at_1_low": s["pass_at_1_low"],
            "pass_at_1_high": s["pass_at_1_high"],
            "pass_at_k": s["pass_at_k"], "pass_hat_k": s["pass_hat_k"],
            "turns_per_episode": s["turns_mean"],
            "tool_calls_per_episode": valid / len(group) if group else None,
            "tool_calls_per_task": valid / s["tasks"] if s["tasks"] else None,
            "parse_error_rate": s["parse_error_rate"],
            "tokens_per_solved": s["tokens_per_solved"],
            "generated_tokens_per_solved": s["generated_tokens_per_solved"],
            "generated_tokens_mean": s["generated_tokens_mean"],
            "infra_errors": s["infra_errors"],
            "stop_reasons": s["stop_reasons"],
        }
    return out


def cost(rows: Sequence[Mapping[str, Any]], timings: Mapping[tuple, Mapping[str, Any]],
         *, level: float) -> dict[str, Any]:
    """Per tier: seconds per episode and per solved task (`rlvr.evaluate.report._cost`
    through `summarize`); `timings`: (checkpoint, run, trajectory_id) -> timing row."""
    out = {}
    for tier in _tiers(rows):
        s = summarize([r for r in rows if r["tier"] == tier], level=level, timings=timings)
        out[tier] = {k: s[k] for k in ("seconds_mean", "seconds_per_solved",
                                       "tool_seconds_per_solved", "gen_seconds_per_solved")}
    return out


def _label(low: float, high: float) -> str:
    if low != low:
        return "no graded pair"
    if low > 0:
        return "improved"
    if high < 0:
        return "got worse"
    return "no clear change"


def changes(comparisons: Mapping[str, TierComparison], candidate: Sequence[Mapping[str, Any]],
            champion: Sequence[Mapping[str, Any]], *, level: float) -> dict[str, Any]:
    """What improved and what got worse, nearest tier first (train vs held-out): per tier the
    paired pass@1 difference with its interval and pass@k; per (tier, family) the point
    difference of pass@1 (families are too small for intervals of their own)."""
    tiers = []
    for tier, c in comparisons.items():
        tiers.append({"tier": tier, "champion_pass_at_1": c.champion_pass_at_1,
                      "candidate_pass_at_1": c.candidate_pass_at_1,
                      "difference": c.difference, "low": c.low, "high": c.high,
                      "k": c.k, "champion_pass_at_k": c.champion_pass_at_k,
                      "candidate_pass_at_k": c.candidate_pass_at_k,
                      "verdict": _label(c.low, c.high)})
    families = []
    for tier in comparisons:
        fams = sorted({r["family"] for r in candidate if r["tier"] == tier})
        for fam in fams:
            a = summarize([r for r in champion if r["tier"] == tier and r["family"] == fam],
                          level=level)["pass_at_1"]
            b = summarize([r for r in candidate if r["tier"] == tier and r["family"] == fam],
                          level=level)["pass_at_1"]
            d = None if a is None or b is None else b - a
            families.append({"tier": tier, "family": fam, "champion_pass_at_1": a,
                             "candidate_pass_at_1": b, "difference": d,
                             "direction": "n/a" if d is None else
                             "up" if d > 0 else "down" if d < 0 else "same"})
    return {"tiers": tiers, "families": families}
