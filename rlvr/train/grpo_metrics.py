"""The GRPO dashboard (SPEC §7): per-step numbers of everything drawn — rewards, pass rates,
parse errors, lengths, stop reasons, rollout age, group statuses and staleness drops per
difficulty band — logged every step and kept (the stable ones) in the card's curves."""
from __future__ import annotations

import statistics
from typing import Any, Mapping, Sequence

from rlvr.agent.passport import parse_error_rate
from rlvr.artifacts import schemas
from rlvr.train.curriculum import BANDS, Curriculum
from rlvr.train.grpo_draws import STATUSES
from rlvr.train.grpo_state import LoopState, versions_behind


def rollout_metrics(groups: Sequence[Mapping[str, Any]], state: LoopState,
                    curriculum: Curriculum) -> dict[str, float]:
    """Per-step SPEC §7 dashboard numbers of everything drawn this step (kept or not).
    Rollout age is in policy versions (Δv, `versions_behind`), the staleness bound's unit."""
    rows = [r for g in groups for r in g["rows"]]
    n = len(rows)
    graded = [r for r in rows if r["reward_outcome"] is not None]
    lengths = sorted(int(r["n_trainable_tokens"]) for r in rows)
    statuses = [g["status"] for g in groups]
    informative = sum(s in ("accepted", "surplus") for s in statuses)
    accepted = statuses.count("accepted")
    final = [x for g in groups if g["rewards"] is not None for x in g["rewards"]]
    m: dict[str, float] = {
        "train/groups_drawn": float(len(groups)),
        "train/groups_accepted": float(accepted),
        "train/groups_dropped": float(len(groups) - accepted),
        "train/informative_fraction": informative / len(groups) if groups else 0.0,
        "train/reward": statistics.fmean(final) if final else 0.0,
        "train/pass_at_1": (sum(r["reward_outcome"] >= 1 for r in graded) / len(graded)
                            if graded else 0.0),
        "train/parse_error_rate": parse_error_rate(rows) if rows else 0.0,
        "train/truncated_rate": sum(bool(r["truncated"]) for r in rows) / n if n else 0.0,
        "train/infra_error_rate": (sum(bool(r["infra_error"]) or r["verdict_reason"] ==
                                       "infra_error" for r in rows) / n if n else 0.0),
        "train/length_mean": statistics.fmean(lengths) if lengths else 0.0,
        "train/length_median": float(statistics.median(lengths)) if lengths else 0.0,
        "train/length_p90": float(lengths[min(n - 1, int(0.9 * n))]) if lengths else 0.0,
        "train/length_max": float(lengths[-1]) if lengths else 0.0,
        "train/turns_mean": statistics.fmean(r["n_turns"] for r in rows) if rows else 0.0,
    }
    for key in ("reward_outcome", "reward_format", "reward_length"):
        vals = [float(r[key]) for r in rows if r[key] is not None]
        m[f"train/{key}"] = statistics.fmean(vals) if vals else 0.0
    for reason in schemas.STOP_REASONS:
        m[f"train/stop/{reason}"] = (sum(r["stop_reason"] == reason for r in rows) / n
                                     if n else 0.0)
    for reason in ("timeout", "resource_limit"):
        m[f"train/verdict_{reason}_rate"] = (sum(r["verdict_reason"] == reason for r in rows)
                                             / n if n else 0.0)
    by_group = [g for g in groups if any(r["reward_outcome"] is not None for r in g["rows"])]
    m["train/pass_at_k"] = (sum(any((r["reward_outcome"] or 0) >= 1 for r in g["rows"])
                                for g in by_group) / len(by_group) if by_group else 0.0)
    m["train/group_distinct_fraction"] = (statistics.fmean(
        len({tuple(r["token_ids"]) for r in g["rows"]}) / len(g["rows"]) for g in groups)
        if groups else 0.0)
    ages = [versions_behind(state, int(r["policy_step"])) for r in rows]
    m["train/rollout_age_mean"] = statistics.fmean(ages) if ages else 0.0
    m["train/rollout_age_max"] = float(max(ages)) if ages else 0.0
    gen = sum(int(r["n_trainable_tokens"]) for r in rows)
    if accepted:
        m["train/tokens_per_effective_prompt"] = gen / accepted
    drawn = [g["task_id"] for g in groups]
    pim = curriculum.p_info_mean()
    pim_drawn = curriculum.p_info_mean(drawn)
    if pim is not None:
        m["train/p_info_mean"] = pim
    if pim_drawn:
        m["train/p_info_drawn"] = pim_drawn
        m["train/expected_draws"] = 1.0 / pim_drawn
    for band in BANDS:
        m[f"curriculum/drawn_{band}"] = float(sum(g["band"] == band for g in groups))
    for status in STATUSES:
        m[f"groups/{status}"] = float(statuses.count(status))
    for band in BANDS:  # SPEC §7: staleness drops by difficulty (strict bounds drop hard tasks)
        m[f"groups/stale_{band}"] = float(sum(g["status"] == "stale" and g["band"] == band
                                              for g in groups))
    kept = [g["staleness"] for g in groups if g["status"] == "accepted"]
    m["train/staleness_accepted_max"] = float(max(kept)) if kept else 0.0
    return m
