"""Evaluation rows and the report made of them (SPEC §8).

* `eval_rows(passports, checkpoint, tiers, run="", safety_flags=None)` — scored rollout
  passports (rows of `schemas.TRAJECTORIES` after `apply_verdict`) and the enclave's flags
  on their verdicts -> `schemas.EVAL` rows, each with the episode's timings beside it
  (`schemas.EVAL_TIMING_COLUMNS`, from in-memory passports);
  `write_eval(path, rows, timings_path=...)` / `read_eval(path)` — `eval.parquet` through
  its contract, the timings in a sidecar (`schemas.EVAL_TIMINGS`, `read_eval_timings`) so
  the same evaluation gives the same `eval.parquet` bytes;
* `check_pairing(rows)` — every checkpoint (and run) holds the identical (task_id, seed) set
  per tier, or PairingError: comparisons between checkpoints are paired;
* `summarize(rows, ..., timings=None)` — one group's pass@1 with its interval, pass@k and
  pass^k for k = 1..n, parse-error rate, stop and verdict reasons, turns, lengths, tokens
  per solved task, and with `timings` ((checkpoint, run, trajectory_id) -> timing row) the
  seconds per solved task;
* `build_report(rows, ...)` — per checkpoint: per tier and per (tier, family); per pair of
  checkpoints and tier: the paired pass@1 difference with its interval; no clock unless
  `timings` is given, so the report of the same rows is the same file;
* `cost_report(rows, timings)` — per checkpoint and tier the seconds spent (for metrics);
* `pass_at_k_table(rows)` / `write_plots(table, png, csv)` — the pass@k curves, one line per
  checkpoint and tier, as a tidy CSV (for `dvc plots`) and a PNG.

Infra errors: a row whose `success` is null (the episode or its verification hit an infra
error) is counted in `infra_errors` and left out of every rate's denominator — an
infrastructure failure says nothing about the policy, so it is never a task failure.
Cost per solved task counts every episode (infra ones included): it is what was spent to get
the solutions. Seconds come only from the timings (a sidecar of `eval.parquet`), never from
the rows a report or `eval.parquet` is made of.
"""
from __future__ import annotations

import csv
import io
import math
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from rlvr.agent.passport import invalid_turns
from rlvr.artifacts.io import read_table, write_tables, write_text
from rlvr.artifacts.plots import pyplot, save_png
from rlvr.artifacts.schemas import EVAL, EVAL_TIERS, EVAL_TIMING_COLUMNS, EVAL_TIMINGS
from rlvr.artifacts.timings import read_sidecar, timings_of
from rlvr.errors import ArtifactError
from rlvr.evaluate.metrics import (PairingError, paired_difference, pass_rate_interval,
                                   tier_pass_at_k, tier_pass_hat_k)


class UnscoredPassport(ValueError):
    """A passport without an outcome that is not an infra error: verification never ran."""


def _outcome(row: Mapping[str, Any]) -> bool | None:
    """True / False for a verified success / failure, None for an infra error."""
    outcome = row.get("reward_outcome")
    infra = bool(row.get("infra_error")) or row.get("verdict_reason") == "infra_error"
    if outcome is None or (isinstance(outcome, float) and math.isnan(outcome)):
        if not infra:
            raise UnscoredPassport(f"trajectory {row['trajectory_id']}: no reward_outcome and "
                                   "no infra error (apply the verdicts first)")
        return None
    if infra:
        return None
    return float(outcome) >= 1.0


def eval_rows(passports: Iterable[Mapping[str, Any]], checkpoint: str,
              tiers: Mapping[str, str], run: str = "",
              safety_flags: Mapping[str, Sequence[str]] | None = None) -> list[dict]:
    """`schemas.EVAL` rows of scored passports; `tiers`: task_id -> tier (`sets.tier_of`);
    `safety_flags`: trajectory_id -> the enclave's flags on its verdict (the verdicts'
    `safety_flags`, keyed by candidate_id), so the gate can report them beside capability
    (SPEC §8). Each row also carries the episode's timings (`schemas.EVAL_TIMING_COLUMNS`)
    when the passport has them (`roll_out`'s rows do; a passport read from disk does not:
    None)."""
    flags = safety_flags or {}
    out = []
    for r in passports:
        success = _outcome(r)
        reason = r.get("verdict_reason")
        if success is None:
            reason = "infra_error"  # rollout-time or verifier: never a task failure
        elif reason is None:  # decided at rollout time: it never submitted a diff
            if r["stop_reason"] == "submitted":
                raise UnscoredPassport(f"trajectory {r['trajectory_id']}: submitted, with an "
                                       "outcome but no verdict_reason")
            reason = "not_submitted"
        out.append({
            "checkpoint": checkpoint, "run": run, "tier": tiers[r["task_id"]],
            "family": r["family"], "task_id": r["task_id"], "sample_index": r["sample_index"],
            "seed": r["reset_seed"], "success": success, "infra_error": success is None,
            "verdict_reason": reason,
            "safety_flags": sorted(flags.get(r["trajectory_id"], ())),
            "stop_reason": r["stop_reason"],
            "n_turns": r["n_turns"], "n_invalid_actions": invalid_turns(r),
            "n_trainable_tokens": r["n_trainable_tokens"], "n_tokens": r["n_tokens"],
            "trajectory_id": r["trajectory_id"],
            "policy_version": r["policy_version"], "policy_step": r.get("policy_step"),
            "seconds": r.get("wall_seconds"),
            "tool_seconds": _sum(r.get("tool_latency_s")),
            "gen_seconds": _sum(r.get("gen_seconds")),
        })
    return out


def _sum(values: Sequence[float] | None) -> float | None:
    return None if values is None else math.fsum(values)


def timing_key(row: Mapping[str, Any]) -> tuple[str, str, str]:
    """The key of an eval row and of its timing row: (checkpoint, run, trajectory_id)."""
    return row["checkpoint"], row["run"], row["trajectory_id"]


def eval_timing_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict]:
    """The `schemas.EVAL_TIMINGS` rows of in-memory eval rows (`eval_rows` of `roll_out`'s
    passports); a row without an episode time is an ArtifactError naming it."""
    out = []
    for r in rows:
        if r.get("seconds") is None:
            raise ArtifactError(f"eval row {timing_key(r)}: no episode timings (rows made "
                                "from passports read from disk have none)")
        out.append({"checkpoint": r["checkpoint"], "run": r["run"],
                    "trajectory_id": r["trajectory_id"],
                    **{c: r.get(c) for c in EVAL_TIMING_COLUMNS}})
    return out


def timings_by_key(timing_rows: Iterable[Mapping[str, Any]]) -> dict[tuple, dict]:
    """(checkpoint, run, trajectory_id) -> timing row: the `timings` of `summarize`."""
    return {timing_key(t): dict(t) for t in timing_rows}


def _order(r: Mapping[str, Any]) -> tuple:
    return (r["checkpoint"], r["run"], EVAL_TIERS.index(r["tier"]), r["task_id"],
            r["sample_index"])


def write_eval(path: Path | str, rows: Sequence[Mapping[str, Any]], *,
               timings_path: Path | str | None = None) -> None:
    """Rows in (checkpoint, run, tier, task_id, sample_index) order without their timings:
    same rows, same bytes. `timings_path`: the timings too, in the same order (both
    tables are checked before either file is written)."""
    ordered = sorted(rows, key=_order)
    parts = [(path, ordered, EVAL, "eval")]
    if timings_path is not None:
        parts.append((timings_path, eval_timing_rows(ordered), EVAL_TIMINGS, "eval_timings"))
    write_tables(parts)


def read_eval(path: Path | str) -> list[dict]:
    return read_table(path, EVAL, contract="eval").to_pylist()


def read_eval_timings(path: Path | str) -> dict[tuple, dict]:
    """(checkpoint, run, trajectory_id) -> timing row, from an eval timings sidecar."""
    return read_sidecar(path, EVAL_TIMINGS, "eval_timings", timing_key)


def _key(row: Mapping[str, Any]) -> tuple[str, int]:
    return row["task_id"], int(row["seed"])


def check_pairing(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Per tier, every (checkpoint, run) must hold the identical (task_id, seed) set;
    returns the set size per tier."""
    sets: dict[str, dict[tuple[str, str], set]] = defaultdict(lambda: defaultdict(set))
    for r in rows:
        sets[r["tier"]][(r["checkpoint"], r["run"])].add(_key(r))
    sizes = {}
    for tier, by_ckpt in sets.items():
        (first, keys), *rest = sorted(by_ckpt.items())
        for other, k in rest:
            if k != keys:
                diff = sorted(k ^ keys)[0]
                raise PairingError(f"tier {tier}: checkpoint {other[0]!r} (run {other[1]!r}) "
                                   f"and {first[0]!r} (run {first[1]!r}) differ in their "
                                   f"(task, seed) sets, e.g. {diff}")
        sizes[tier] = len(keys)
    return sizes


def _clean(x: Any) -> Any:
    """JSON-safe: NaN -> None, floats rounded to 6 places."""
    if isinstance(x, float):
        return None if math.isnan(x) else round(x, 6)
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def _counts(rows: Sequence[Mapping[str, Any]], by: Sequence[str]) -> list[tuple[int, int]]:
    """(graded samples, successes) per group of `by` columns."""
    acc: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        cell = acc[tuple(r[c] for c in by)]
        if r["success"] is not None:
            cell[0] += 1
            cell[1] += bool(r["success"])
    return list(acc.values())


def _cost(rows: Sequence[Mapping[str, Any]], solved: int,
          timings: Mapping[tuple, Mapping[str, Any]]) -> dict[str, float]:
    """Seconds spent on a group of eval rows (every episode, infra ones included: what the
    solutions cost), per episode and per solved task (NaN: nothing solved)."""
    mine = timings_of(rows, timings, timing_key, "eval row(s)")

    def total(column: str) -> float:
        return math.fsum(t[column] or 0.0 for t in mine)

    n = len(mine)
    return {
        "seconds_mean": total("seconds") / n if n else float("nan"),
        "seconds_per_solved": total("seconds") / solved if solved else float("nan"),
        "tool_seconds_per_solved": total("tool_seconds") / solved if solved else float("nan"),
        "gen_seconds_per_solved": total("gen_seconds") / solved if solved else float("nan"),
    }


def summarize(rows: Sequence[Mapping[str, Any]], *, level: float = 0.95,
              timings: Mapping[tuple, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """One group of eval rows (one checkpoint; a tier, or a tier's family). `timings`
    ((checkpoint, run, trajectory_id) -> `schemas.EVAL_TIMINGS` row: `read_eval_timings`,
    or `timings_by_key(eval_timing_rows(rows))` in memory) adds the seconds spent; without
    it the summary holds no clock."""
    graded = [r for r in rows if r["success"] is not None]
    solved = sum(bool(r["success"]) for r in graded)
    # pass@1 interval: clustered by task (several runs of a checkpoint pool per task)
    interval = pass_rate_interval(_counts(rows, ("task_id",)), level=level)
    # pass@k / pass^k: per (run, task) — k attempts of one policy
    units = [(n, c) for n, c in _counts(rows, ("run", "task_id")) if n > 0]
    n_max = max((n for n, _ in units), default=0)
    pass_k, hat_k = {}, {}
    for k in range(1, n_max + 1):
        pass_k[str(k)] = tier_pass_at_k(units, k)[0]
        hat_k[str(k)] = tier_pass_hat_k(units, k)[0]
    turns = sum(r["n_turns"] for r in rows)

    def mean(values):
        return statistics.fmean(values) if values else float("nan")

    out = {
        "episodes": len(rows),
        "graded": len(graded),
        "infra_errors": len(rows) - len(graded),
        "tasks": len({r["task_id"] for r in rows}),
        "solved": solved,
        "pass_at_1": interval.estimate,
        "pass_at_1_low": interval.low,
        "pass_at_1_high": interval.high,
        "pass_at_1_method": interval.method,
        "pass_at_k": pass_k,
        "pass_hat_k": hat_k,
        "parse_error_rate": (sum(r["n_invalid_actions"] for r in rows) / turns) if turns
        else float("nan"),
        "stop_reasons": dict(sorted(Counter(r["stop_reason"] for r in rows).items())),
        "verdict_reasons": dict(sorted(Counter(r["verdict_reason"] for r in rows).items())),
        "turns_mean": mean([r["n_turns"] for r in rows]),
        "turns_median": statistics.median([r["n_turns"] for r in rows]) if rows
        else float("nan"),
        "tokens_mean": mean([r["n_tokens"] for r in rows]),
        "generated_tokens_mean": mean([r["n_trainable_tokens"] for r in rows]),
        "tokens_per_solved": sum(r["n_tokens"] for r in rows) / solved if solved
        else float("nan"),
        "generated_tokens_per_solved": sum(r["n_trainable_tokens"] for r in rows) / solved
        if solved else float("nan"),
    }
    if timings is not None:
        out.update(_cost(rows, solved, timings))
    return _clean(out)


def cost_report(rows: Sequence[Mapping[str, Any]], timings: Mapping[tuple, Mapping[str, Any]],
                *, checkpoints: Sequence[str] | None = None) -> dict[str, Any]:
    """Per checkpoint and tier, the seconds spent (`_cost`): the clock-dependent part of an
    evaluation, for metrics (the report itself stays a function of the rows)."""
    out: dict[str, Any] = {}
    for name in _ordered((r["checkpoint"] for r in rows), checkpoints):
        out[name] = {}
        for tier in EVAL_TIERS:
            group = [r for r in rows if r["checkpoint"] == name and r["tier"] == tier]
            if group:
                solved = sum(bool(r["success"]) for r in group if r["success"] is not None)
                out[name][tier] = _clean(_cost(group, solved, timings))
    return out


def _ordered(names: Iterable[str], order: Sequence[str] | None) -> list[str]:
    names = list(dict.fromkeys(names))
    if not order:
        return names
    return [n for n in order if n in names] + [n for n in names if n not in order]


def build_report(rows: Sequence[Mapping[str, Any]], *, checkpoints: Sequence[str] | None = None,
                 level: float = 0.95, n_boot: int = 2000, seed: int = 0,
                 timings: Mapping[tuple, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The evaluation report (metrics JSON): per checkpoint per tier and per family, and the
    paired pass@1 difference of every later checkpoint against every earlier one (in
    `checkpoints` order) per tier. `timings`: as in `summarize` (none: no clock in it).
    Raises PairingError if the sets differ."""
    sizes = check_pairing(rows)
    names = _ordered((r["checkpoint"] for r in rows), checkpoints)
    tiers = [t for t in EVAL_TIERS if t in sizes]
    out: dict[str, Any] = {"tiers": {t: {"pairs": sizes[t]} for t in tiers},
                           "checkpoints": {}, "paired": {}}
    by: dict[tuple, list] = defaultdict(list)
    for r in rows:
        by[(r["checkpoint"], r["tier"])].append(r)
    for name in names:
        ckpt_rows = [r for r in rows if r["checkpoint"] == name]
        entry: dict[str, Any] = {
            "policy_versions": sorted({r["policy_version"] for r in ckpt_rows}),
            "runs": sorted({r["run"] for r in ckpt_rows}),
            "tiers": {}, "families": {},
        }
        for tier in tiers:
            group = by[(name, tier)]
            entry["tiers"][tier] = summarize(group, level=level, timings=timings)
            fams = sorted({r["family"] for r in group})
            entry["families"][tier] = {f: summarize([r for r in group if r["family"] == f],
                                                    level=level, timings=timings)
                                       for f in fams}
        out["checkpoints"][name] = entry
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            pair: dict[str, Any] = {}
            for tier in tiers:
                def side(name):
                    return [{"task_id": r["task_id"], "sample_seed": r["seed"],
                             "success": r["success"], "run": r["run"]} for r in by[(name, tier)]]
                try:
                    cmp = paired_difference(side(a), side(b), level=level, n_boot=n_boot,
                                            seed=seed)
                except PairingError as exc:
                    if "no graded" not in str(exc):
                        raise
                    pair[tier] = {"n_pairs": 0, "note": str(exc)}
                    continue
                pair[tier] = _clean(cmp.as_dict())
            out["paired"][f"{b}_vs_{a}"] = pair
    return out


PLOT_COLUMNS = ("series", "checkpoint", "tier", "k", "pass_at_k", "pass_hat_k")


def pass_at_k_table(rows: Sequence[Mapping[str, Any]],
                    checkpoints: Sequence[str] | None = None) -> list[dict]:
    """Tidy rows for the pass@k plot: one series per checkpoint x tier, x = k."""
    names = _ordered((r["checkpoint"] for r in rows), checkpoints)
    table = []
    for name in names:
        for tier in EVAL_TIERS:
            group = [r for r in rows if r["checkpoint"] == name and r["tier"] == tier]
            if not group:
                continue
            units = [(n, c) for n, c in _counts(group, ("run", "task_id")) if n > 0]
            for k in range(1, max((n for n, _ in units), default=0) + 1):
                at, _ = tier_pass_at_k(units, k)
                hat, _ = tier_pass_hat_k(units, k)
                table.append({"series": f"{name}/{tier}", "checkpoint": name, "tier": tier,
                              "k": k, "pass_at_k": round(at, 6), "pass_hat_k": round(hat, 6)})
    return table


def write_plots(table: Sequence[Mapping[str, Any]], png: Path | str | None,
                csv_path: Path | str | None) -> None:
    """The pass@k curves: a tidy CSV (columns PLOT_COLUMNS) and a PNG with one panel per
    tier, one line per checkpoint (solid: pass@k, dashed: pass^k). Both written atomically."""
    if csv_path is not None:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(PLOT_COLUMNS), lineterminator="\n")
        writer.writeheader()
        writer.writerows({c: r[c] for c in PLOT_COLUMNS} for r in table)
        write_text(csv_path, buf.getvalue())
    if png is None:
        return
    from matplotlib.ticker import MaxNLocator  # lazy: matplotlib only when a PNG is drawn

    plt = pyplot()

    tiers = [t for t in EVAL_TIERS if any(r["tier"] == t for r in table)] or ["(none)"]
    fig, axes = plt.subplots(1, len(tiers), figsize=(4 * len(tiers), 3.4), squeeze=False,
                             sharey=True)
    names = list(dict.fromkeys(r["checkpoint"] for r in table))
    colours = {n: f"C{i % 10}" for i, n in enumerate(names)}
    for ax, tier in zip(axes[0], tiers):
        for name in names:
            pts = [r for r in table if r["tier"] == tier and r["checkpoint"] == name]
            if not pts:
                continue
            ks = [r["k"] for r in pts]
            ax.plot(ks, [r["pass_at_k"] for r in pts], marker="o", color=colours[name],
                    label=f"{name} pass@k")
            ax.plot(ks, [r["pass_hat_k"] for r in pts], linestyle="--", color=colours[name],
                    label=f"{name} pass^k")
        ax.set_title(tier)
        ax.set_xlabel("k")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("rate")
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    save_png(fig, png)
