"""Pathology detectors over a GRPO run's per-step curves (SPEC §7 "Pathologies to detect").

Each detector reads the dashboard curves (`[{step, name: value}]`, the records the trainer
logs every step) and raises one *named* flag. The flags go into the run's metrics and the
checkpoint's `training.json` (`{"curves": [...], "flags": {name: bool}}`); the release gate
blocks on any raised one as `trainer:<name>` (rlvr/gate).

    entropy_collapse      token entropy fell by more than `entropy_drop` (relative, first
                          window → last window)
    action_entropy_collapse  the same, on the tool-call tokens alone (`train/entropy_call`):
                          the actions can collapse while the free text around them drifts
                          up and carries the all-token mean with it (LEARNING.md)
    entropy_blowup        last-window token entropy above `entropy_max` (nats per token): the
                          policy samples near-uniformly inside the grammar, the other way a
                          high learning rate breaks it (its reward falls with it, so no
                          accuracy-based detector sees it)
    groups_become_copies  the share of distinct rollouts within a group fell by more than
                          `copies_drop` and ended at or below `copies_floor`
    informative_collapse  the informative-group fraction fell by more than the train
                          accuracy rose, by at least `informative_margin`
    pass_at_k_stall       pass@1 rose by `pass1_rise` while pass@k rose by less than
                          `passk_stall` (sharpening, not discovery)
    length_growth         mean generated length grew by more than `length_factor`×
    parse_error_spike     a step's parse-error rate exceeds the median of the (≥ `window`)
                          steps before it by more than `parse_error_spike`, or `window`
                          consecutive steps all do over the median of every step before
                          them (a format that breaks at the first update and stays broken
                          leaves no clean baseline window behind it)

Windows: "first" and "last" are the means of the first / last `window` finite points of a
curve; a detector with fewer than `2·window` points (or a spike detector with fewer than
`window + 1`) stays False and says so in its `Finding.detail` — never a guess on two points.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from rlvr.errors import ConfigError

# Curve names the detectors read (the trainer's dashboard keys, rlvr/train/grpo.py).
ENTROPY = "train/entropy"
ENTROPY_CALL = "train/entropy_call"
DISTINCT = "train/group_distinct_fraction"
INFORMATIVE = "train/informative_fraction"
ACCURACY = "train/pass_at_1"
PASS_AT_K = "train/pass_at_k"
LENGTH = "train/length_mean"
PARSE_ERROR = "train/parse_error_rate"

FLAGS = ("entropy_collapse", "action_entropy_collapse", "entropy_blowup",
         "groups_become_copies", "informative_collapse", "pass_at_k_stall", "length_growth",
         "parse_error_spike")


@dataclass(frozen=True)
class PathologyParams:
    """Thresholds of the detectors (`grpo.pathology` in params.yaml)."""

    window: int = 3
    """Points averaged at each end of a curve (first / last window)."""
    entropy_drop: float = 0.5
    """entropy_collapse (and action_entropy_collapse, on the tool-call tokens): last-window
    entropy below (1 − this) × first-window entropy."""
    entropy_max: float = 1.5
    """entropy_blowup: last-window entropy above this (nats per token, absolute: the SFT
    policy samples at ~0.1–0.2 and healthy GRPO runs here ended below 0.9, while the
    Dr.GRPO collapse ended at 5.4). The gate's `gate.stop.entropy_max` is the same edge on
    the candidate's last point."""
    copies_drop: float = 0.3
    """groups_become_copies: distinct-rollout share fell by more than this (absolute) ..."""
    copies_floor: float = 0.5
    """... and ended at or below this share (half of each group are duplicates)."""
    informative_margin: float = 0.2
    """informative_collapse: informative-fraction drop − accuracy rise > this."""
    pass1_rise: float = 0.1
    """pass_at_k_stall: pass@1 rose by at least this (absolute) ..."""
    passk_stall: float = 0.02
    """... while pass@k rose by less than this."""
    length_factor: float = 2.0
    """length_growth: last-window mean length > this × first-window mean length."""
    parse_error_spike: float = 0.1
    """parse_error_spike: a step's rate (or the lowest of `window` consecutive steps' rates)
    − the median of the earlier steps > this."""

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ConfigError(f"pathology.window: must be >= 1, got {self.window}")
        for key in ("entropy_drop", "copies_drop", "copies_floor"):
            v = getattr(self, key)
            if not 0.0 < v <= 1.0:
                raise ConfigError(f"pathology.{key}: must be in (0, 1], got {v}")
        for key in ("informative_margin", "pass1_rise", "passk_stall", "parse_error_spike"):
            v = getattr(self, key)
            if not v >= 0:
                raise ConfigError(f"pathology.{key}: must be >= 0, got {v}")
        if not self.entropy_max > 0:
            raise ConfigError(f"pathology.entropy_max: must be > 0, got {self.entropy_max}")
        if not self.length_factor > 1.0:
            raise ConfigError(f"pathology.length_factor: must be > 1, got {self.length_factor}")


@dataclass(frozen=True)
class Finding:
    """One detector's verdict: its flag name, whether it is raised, the number it compared
    against its threshold (None when the curve was too short) and why, in words."""

    name: str
    raised: bool
    value: float | None
    threshold: float
    detail: str


def series(curves: Sequence[Mapping[str, Any]], key: str) -> list[float]:
    """The finite values of curve `key`, in step order."""
    rows = sorted((r for r in curves if _finite(r.get(key))), key=lambda r: r.get("step", 0))
    return [float(r[key]) for r in rows]


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _ends(values: list[float], w: int) -> tuple[float, float] | None:
    if len(values) < 2 * w:
        return None
    return statistics.fmean(values[:w]), statistics.fmean(values[-w:])


def _short(name: str, threshold: float, key: str, n: int, need: int) -> Finding:
    return Finding(name, False, None, threshold, f"{key}: {n} point(s), needs {need}")


def _ends_or_short(curves, key: str, name: str, threshold: float,
                   p: PathologyParams) -> tuple[float, float] | Finding:
    """The first and last window means of one curve, or the "too short" finding."""
    values = series(curves, key)
    ends = _ends(values, p.window)
    return _short(name, threshold, key, len(values), 2 * p.window) if ends is None else ends


def _entropy_drop(curves, key: str, name: str, p: PathologyParams) -> Finding:
    ends = _ends_or_short(curves, key, name, p.entropy_drop, p)
    if isinstance(ends, Finding):
        return ends
    first, last = ends
    drop = (first - last) / first if first > 0 else 0.0
    return Finding(name, drop > p.entropy_drop, drop, p.entropy_drop,
                   f"{key} {first:.4g} -> {last:.4g} (relative drop {drop:.3f})")


def entropy_collapse(curves, p: PathologyParams) -> Finding:
    return _entropy_drop(curves, ENTROPY, "entropy_collapse", p)


def action_entropy_collapse(curves, p: PathologyParams) -> Finding:
    return _entropy_drop(curves, ENTROPY_CALL, "action_entropy_collapse", p)


def entropy_blowup(curves, p: PathologyParams) -> Finding:
    ends = _ends_or_short(curves, ENTROPY, "entropy_blowup", p.entropy_max, p)
    if isinstance(ends, Finding):
        return ends
    first, last = ends
    return Finding("entropy_blowup", last > p.entropy_max, last, p.entropy_max,
                   f"entropy {first:.4g} -> {last:.4g} (ceiling {p.entropy_max})")


def groups_become_copies(curves, p: PathologyParams) -> Finding:
    ends = _ends_or_short(curves, DISTINCT, "groups_become_copies", p.copies_drop, p)
    if isinstance(ends, Finding):
        return ends
    first, last = ends
    drop = first - last
    return Finding("groups_become_copies", drop > p.copies_drop and last <= p.copies_floor,
                   drop, p.copies_drop,
                   f"distinct share {first:.3f} -> {last:.3f} (floor {p.copies_floor})")


def informative_collapse(curves, p: PathologyParams) -> Finding:
    inf, acc = series(curves, INFORMATIVE), series(curves, ACCURACY)
    ei, ea = _ends(inf, p.window), _ends(acc, p.window)
    if ei is None or ea is None:
        return _short("informative_collapse", p.informative_margin, INFORMATIVE,
                      min(len(inf), len(acc)), 2 * p.window)
    gap = (ei[0] - ei[1]) - (ea[1] - ea[0])
    return Finding("informative_collapse", gap > p.informative_margin, gap,
                   p.informative_margin,
                   f"informative {ei[0]:.3f} -> {ei[1]:.3f}, accuracy {ea[0]:.3f} -> "
                   f"{ea[1]:.3f}")


def pass_at_k_stall(curves, p: PathologyParams) -> Finding:
    one, k = series(curves, ACCURACY), series(curves, PASS_AT_K)
    e1, ek = _ends(one, p.window), _ends(k, p.window)
    if e1 is None or ek is None:
        return _short("pass_at_k_stall", p.pass1_rise, ACCURACY, min(len(one), len(k)),
                      2 * p.window)
    rise1, risek = e1[1] - e1[0], ek[1] - ek[0]
    return Finding("pass_at_k_stall", rise1 >= p.pass1_rise and risek < p.passk_stall, rise1,
                   p.pass1_rise, f"pass@1 {e1[0]:.3f} -> {e1[1]:.3f}, pass@k {ek[0]:.3f} -> "
                   f"{ek[1]:.3f}")


def length_growth(curves, p: PathologyParams) -> Finding:
    ends = _ends_or_short(curves, LENGTH, "length_growth", p.length_factor, p)
    if isinstance(ends, Finding):
        return ends
    first, last = ends
    factor = last / first if first > 0 else (math.inf if last > 0 else 1.0)
    return Finding("length_growth", factor > p.length_factor, factor, p.length_factor,
                   f"mean length {first:.1f} -> {last:.1f} (x{factor:.2f})")


def parse_error_spike(curves, p: PathologyParams) -> Finding:
    values = series(curves, PARSE_ERROR)
    if len(values) < p.window + 1:
        return _short("parse_error_spike", p.parse_error_spike, PARSE_ERROR, len(values),
                      p.window + 1)
    # A single step over a baseline of >= window steps, or the smallest of `window`
    # consecutive steps over the median of all steps before them (>= 1 of them).
    single = [values[i] - statistics.median(values[:i]) for i in range(p.window, len(values))]
    sustained = [min(values[i:i + p.window]) - statistics.median(values[:i])
                 for i in range(1, len(values) - p.window + 1)]
    worst = max(single + sustained)
    return Finding("parse_error_spike", worst > p.parse_error_spike, worst,
                   p.parse_error_spike, f"largest rise over the earlier median {worst:.3f}")


DETECTORS = (entropy_collapse, action_entropy_collapse, entropy_blowup, groups_become_copies,
             informative_collapse, pass_at_k_stall, length_growth, parse_error_spike)


def detect(curves: Sequence[Mapping[str, Any]],
           params: PathologyParams = PathologyParams()) -> list[Finding]:
    """Every detector over `curves`, in `FLAGS` order."""
    return [d(curves, params) for d in DETECTORS]


def flags(findings: Sequence[Finding]) -> dict[str, bool]:
    """`{name: raised}` — the form the gate reads (`training.json` `flags`)."""
    return {f.name: bool(f.raised) for f in findings}
