"""Evaluation metrics as pure functions (SPEC §6, §8): pass@k, pass^k, intervals, paired deltas.

Conventions. A *task* is evaluated with n samples, c of them verified successes; samples
whose verifier ended in `infra_error` are not samples at all (they are dropped before these
functions see them and counted separately), so n is the number of *graded* samples. Rates
over a tier are macro averages over tasks (each task weighs the same, however many graded
samples it kept), because the unit we generalise over is the task, not the sample.

Intervals are clustered by task: the n samples of one task share its difficulty, so they are
not n independent trials, and an interval that treats them as such is too narrow.

- `pass_rate_interval` — a Wilson score interval on the task-averaged rate with a *Kish
  effective sample size* (Wilson with a design effect): n_eff = p(1−p)/Var̂(p̂), where Var̂ is
  the between-task variance of the per-task rates over T tasks, clipped to [T, Σn]
  (between "each task is one draw" and "every sample is independent"). Wilson rather than a
  t-interval or a percentile bootstrap because pass rates of weak policies sit at or near 0,
  where both of those collapse to a zero-width [0, 0] while Wilson keeps an honest upper
  bound. With one sample per task it *is* the plain Wilson interval (n_eff = T = Σn);
  otherwise the normal quantile becomes Student's t on T − 1 degrees of freedom (the
  variance comes from T task rates). When p̂ is 0 or 1 the between-task variance carries no
  information, so n_eff = T (conservative). Its coverage is checked by simulation in tests/test_evaluate_metrics.py.
- `paired_difference` — two checkpoints on the identical (task, sample seed) set: the mean
  per-task difference of pass@1 with a seeded percentile bootstrap that resamples tasks
  (pairs kept together) and, when several training runs/seeds are pooled, also resamples each
  side's runs, so seed-to-seed variance enters the interval.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from scipy.stats import t as student_t


# ---- per-task estimators -----------------------------------------------------------------------
def _check(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n):
        raise ValueError(f"need 0 <= c <= n, got c={c}, n={n}")
    if not (1 <= k <= n):
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c successes: 1 − C(n−c, k)/C(n, k) (SPEC §8).

    Product form 1 − Π_{i=n−c+1..n} (1 − k/i), which never forms the (huge) binomials."""
    _check(n, c, k)
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k (all k of k attempts succeed) from n samples with c successes:
    C(c, k)/C(n, k) = Π_{i=0..k−1} (c − i)/(n − i)."""
    _check(n, c, k)
    if c < k:
        return 0.0
    prod = 1.0
    for i in range(k):
        prod *= (c - i) / (n - i)
    return prod


def pass_at_k_closed(p: float, k: int) -> float:
    """pass@k of a task solved with probability p per attempt: 1 − (1 − p)^k (SPEC §6)."""
    if not 0.0 <= p <= 1.0 or k < 1:
        raise ValueError(f"need 0 <= p <= 1 and k >= 1, got p={p}, k={k}")
    return 1.0 - (1.0 - p) ** k


def pass_hat_k_closed(p: float, k: int) -> float:
    """pass^k of a task solved with probability p per attempt: p^k."""
    if not 0.0 <= p <= 1.0 or k < 1:
        raise ValueError(f"need 0 <= p <= 1 and k >= 1, got p={p}, k={k}")
    return p ** k


# ---- over tasks ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided interval at `level`."""

    estimate: float
    low: float
    high: float
    level: float
    method: str
    n_tasks: int
    n_samples: int

    def excludes(self, value: float) -> bool:
        return value < self.low or value > self.high

    def as_dict(self, prefix: str = "") -> dict[str, Any]:
        return {f"{prefix}estimate" if prefix else "estimate": self.estimate,
                f"{prefix}low": self.low, f"{prefix}high": self.high,
                f"{prefix}level": self.level, f"{prefix}method": self.method,
                f"{prefix}n_tasks": self.n_tasks, f"{prefix}n_samples": self.n_samples}


def tier_pass_at_k(counts: Sequence[tuple[int, int]], k: int) -> tuple[float, int]:
    """Mean unbiased pass@k over tasks given (n, c) per task, and how many tasks entered (a
    task with fewer than k graded samples cannot estimate pass@k and is left out)."""
    vals = [pass_at_k(n, c, k) for n, c in counts if n >= k]
    return (float(np.mean(vals)) if vals else float("nan")), len(vals)


def tier_pass_hat_k(counts: Sequence[tuple[int, int]], k: int) -> tuple[float, int]:
    """Mean unbiased pass^k over tasks given (n, c) per task, as `tier_pass_at_k`."""
    vals = [pass_hat_k(n, c, k) for n, c in counts if n >= k]
    return (float(np.mean(vals)) if vals else float("nan")), len(vals)


def _wilson(p: float, n: float, z: float) -> tuple[float, float]:
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(max(p * (1 - p) / n + z * z / (4 * n * n), 0.0))
    return max(0.0, centre - half), min(1.0, centre + half)


def pass_rate_interval(counts: Sequence[tuple[int, int]], level: float = 0.95) -> Interval:
    """Task-averaged pass rate (pass@1) with a cluster-aware Wilson interval.

    counts: (n, c) per task — n graded samples, c successes; tasks with n = 0 (every sample
    an infra error) are left out. See the module docstring for the method."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    kept = [(n, c) for n, c in counts if n > 0]
    for n, c in kept:
        _check(n, c, 1)
    if not kept:
        return Interval(float("nan"), float("nan"), float("nan"), level, "wilson-deff", 0, 0)
    rates = np.array([c / n for n, c in kept], dtype=float)
    t, total = len(kept), sum(n for n, _ in kept)
    p = float(rates.mean())
    if t == total:  # one sample per task: plain Wilson
        n_eff, z = float(t), NormalDist().inv_cdf(0.5 + level / 2)
    else:
        # The variance is estimated from T task rates: Student's t on T − 1 degrees of
        # freedom instead of z (what keeps coverage near nominal at 20-60 tasks).
        z = float(student_t.ppf(0.5 + level / 2, max(t - 1, 1)))
        if p in (0.0, 1.0) or t < 2:
            n_eff = float(t)
        else:
            var = float(rates.var(ddof=1)) / t
            n_eff = float(total) if var <= 0 else min(max(p * (1 - p) / var, t), total)
    low, high = _wilson(p, n_eff, z)
    return Interval(p, low, high, level, "wilson-deff", t, total)


# ---- paired comparison -----------------------------------------------------------------------
class PairingError(ValueError):
    """Two checkpoints were not evaluated on the identical (task, sample seed) set."""


@dataclass(frozen=True)
class PairedComparison:
    """Mean per-task pass@1 difference (b − a) over the shared tasks, with its interval."""

    difference: Interval
    mean_a: float
    mean_b: float
    runs_a: int
    runs_b: int
    n_pairs: int
    n_excluded_infra: int

    def as_dict(self) -> dict[str, Any]:
        return {**self.difference.as_dict("difference_"), "mean_a": self.mean_a,
                "mean_b": self.mean_b, "runs_a": self.runs_a, "runs_b": self.runs_b,
                "n_pairs": self.n_pairs, "n_excluded_infra": self.n_excluded_infra}


def _by_run(rows: Iterable[Mapping[str, Any]], side: str,
            run_key: str) -> dict[Any, dict[tuple[str, int], bool | None]]:
    out: dict[Any, dict[tuple[str, int], bool | None]] = defaultdict(dict)
    for r in rows:
        key = (str(r["task_id"]), int(r["sample_seed"]))
        run = r.get(run_key, 0)
        if key in out[run]:
            raise PairingError(f"{side}: (task {key[0]}, sample seed {key[1]}) appears twice "
                               f"in run {run!r}")
        out[run][key] = None if r["success"] is None else bool(r["success"])
    if not out:
        raise PairingError(f"{side}: no evaluated episodes")
    return dict(out)


def paired_difference(rows_a: Iterable[Mapping[str, Any]], rows_b: Iterable[Mapping[str, Any]],
                      *, level: float = 0.95, n_boot: int = 2000, seed: int = 0,
                      run_key: str = "run") -> PairedComparison:
    """Checkpoint b minus checkpoint a: mean over tasks of per-task pass@1, paired.

    rows: mappings with `task_id`, `sample_seed`, `success` (True / False / None = infra
    error) and optionally `run_key` (training run or seed; several runs of one side are
    pooled: a task's rate is its mean over that side's runs and samples). Every run of both
    sides must cover the identical (task_id, sample_seed) set, else PairingError. A pair with
    an infra error in any run of either side is dropped from both sides (and counted), so the
    comparison stays on identical samples.

    Interval: seeded percentile bootstrap, `n_boot` replicates; each replicate draws T tasks
    with replacement (the same draw for both sides: pairing) and each side's runs with
    replacement. Arrays: rate_a (R_a, T), rate_b (R_b, T)."""
    runs_a, runs_b = _by_run(rows_a, "a", run_key), _by_run(rows_b, "b", run_key)
    keys = set(next(iter(runs_a.values())))
    for side, runs in (("a", runs_a), ("b", runs_b)):
        for run, outcomes in runs.items():
            if set(outcomes) != keys:
                diff = sorted(set(outcomes) ^ keys)
                raise PairingError(f"{side} run {run!r}: (task, sample seed) set differs from "
                                   f"the other side's, e.g. {diff[0]}")
    infra = {k for runs in (runs_a, runs_b) for o in runs.values() for k, v in o.items()
             if v is None}
    graded = sorted(keys - infra)
    tasks = sorted({t for t, _ in graded})
    if not tasks:
        raise PairingError("no graded (non-infra) pair left to compare")
    col = {t: i for i, t in enumerate(tasks)}

    def rates(runs: dict) -> np.ndarray:
        ok = np.zeros((len(runs), len(tasks)))
        cnt = np.zeros((len(runs), len(tasks)))
        for r, outcomes in enumerate(runs[k] for k in sorted(runs, key=repr)):
            for key in graded:
                ok[r, col[key[0]]] += outcomes[key]
                cnt[r, col[key[0]]] += 1
        return ok / cnt

    ra, rb = rates(runs_a), rates(runs_b)           # (R_a, T), (R_b, T)
    point = float((rb.mean(axis=0) - ra.mean(axis=0)).mean())
    rng = np.random.default_rng(seed)
    t = len(tasks)
    task_idx = rng.integers(0, t, size=(n_boot, t))                   # (B, T)
    run_a = rng.integers(0, ra.shape[0], size=(n_boot, ra.shape[0]))  # (B, R_a)
    run_b = rng.integers(0, rb.shape[0], size=(n_boot, rb.shape[0]))  # (B, R_b)
    mean_a = ra[run_a].mean(axis=1)                                   # (B, T)
    mean_b = rb[run_b].mean(axis=1)
    diffs = np.take_along_axis(mean_b - mean_a, task_idx, axis=1).mean(axis=1)  # (B,)
    alpha = (1 - level) / 2
    low, high = np.quantile(diffs, [alpha, 1 - alpha])
    interval = Interval(point, float(low), float(high), level, "paired-cluster-bootstrap",
                        t, len(graded))
    return PairedComparison(interval, float(ra.mean()), float(rb.mean()), ra.shape[0],
                            rb.shape[0], len(graded), len(keys) - len(graded))
