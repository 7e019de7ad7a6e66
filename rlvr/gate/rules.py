"""The five gate rules and the decision, as pure functions of eval rows (SPEC §8).

Each rule returns a `Rule`: a name, a status — `pass`, `fail` or `inconclusive` — a one-line
reason, and the numbers it was decided on. The decision (`decide`) is `block` if any rule
fails, else `inconclusive` if any rule could not decide, else `promote`: a candidate is never
promoted on missing evidence, and a hard failure is reported as such even when other rules
lack evidence.

Rows are `schemas.EVAL` rows of one side each (candidate, champion), already checked to be
paired (`inputs.check_comparable`). Rates follow `rlvr.evaluate.metrics`: infra errors leave
every denominator, pass rates are task-averaged, intervals clustered by task.

1. `target_capability` — the paired pass@1 difference (candidate − champion) on the target
   tier with its interval: point estimate below −tolerance fails; lower bound at or above
   −tolerance passes (superiority — lower bound above 0 — is reported); otherwise the data
   cannot tell (inconclusive).
2. `no_regressions` — the same test on every other gated tier, with its own tolerance.
3. `contract_compliance` — the share of the candidate's tool calls that did not parse.
4. `stop_signals` — the declared flags (`StopSignalParams`); any raised one fails the rule
   with its name; a flag whose input is missing is `unavailable`, said so, and does not pass
   silently.
5. `enough_evidence` — per gated tier: enough tasks and trials, and an interval narrow enough
   to resolve the tolerance; otherwise inconclusive (never fail, never promote).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any, Mapping, Sequence

from rlvr.artifacts.schemas import EVAL_TIERS
from rlvr.evaluate.metrics import PairingError, paired_difference, tier_pass_at_k
from rlvr.gate.inputs import TrainingMetrics
from rlvr.gate.params import ContractParams, GateParams, StopSignalParams, TrainingKeys

PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
PROMOTE, BLOCK = "promote", "block"
RULES = ("target_capability", "no_regressions", "contract_compliance", "stop_signals",
         "enough_evidence")


@dataclass(frozen=True)
class Rule:
    name: str
    status: str                       # pass | fail | inconclusive
    why: str
    numbers: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TierComparison:
    """Candidate vs champion on one tier, paired on (task, sample seed)."""

    tier: str
    n_tasks: int
    n_pairs: int                      # graded pairs (an infra error on either side drops one)
    n_excluded_infra: int
    champion_pass_at_1: float
    candidate_pass_at_1: float
    difference: float                 # candidate − champion, mean over tasks of pass@1
    low: float
    high: float
    level: float
    k: int                            # the largest k both sides can estimate (samples per task)
    champion_pass_at_k: float
    candidate_pass_at_k: float

    @property
    def difference_at_k(self) -> float:
        return self.candidate_pass_at_k - self.champion_pass_at_k


NAN = float("nan")


def _units(rows: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """(graded samples, successes) per (run, task): the k attempts of one policy on a task."""
    acc: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        if r["success"] is not None:
            cell = acc[(r["run"], r["task_id"])]
            cell[0] += 1
            cell[1] += bool(r["success"])
    return [(n, c) for n, c in acc.values() if n > 0]


def compare_tier(candidate: Sequence[Mapping[str, Any]], champion: Sequence[Mapping[str, Any]],
                 tier: str, *, level: float, n_boot: int, seed: int) -> TierComparison:
    """The paired comparison of one tier (rows of other tiers are ignored)."""
    cand = [r for r in candidate if r["tier"] == tier]
    champ = [r for r in champion if r["tier"] == tier]

    def side(rows):
        return [{"task_id": r["task_id"], "sample_seed": r["seed"], "success": r["success"],
                 "run": r["run"]} for r in rows]

    ua, ub = _units(champ), _units(cand)
    k = min(max((n for n, _ in ua), default=0), max((n for n, _ in ub), default=0))
    at_a = tier_pass_at_k(ua, k)[0] if k else NAN
    at_b = tier_pass_at_k(ub, k)[0] if k else NAN
    tasks = len({r["task_id"] for r in cand})
    try:
        cmp = paired_difference(side(champ), side(cand), level=level, n_boot=n_boot, seed=seed)
    except PairingError as exc:
        if "no graded" not in str(exc):
            raise
        return TierComparison(tier, tasks, 0, len({(r["task_id"], r["seed"]) for r in cand}),
                              NAN, NAN, NAN, NAN, NAN, level, k, at_a, at_b)
    d = cmp.difference
    return TierComparison(tier, d.n_tasks, cmp.n_pairs, cmp.n_excluded_infra, cmp.mean_a,
                          cmp.mean_b, d.estimate, d.low, d.high, level, k, at_a, at_b)


def compare_tiers(candidate, champion, tiers: Sequence[str], params: GateParams
                  ) -> dict[str, TierComparison]:
    return {t: compare_tier(candidate, champion, t, level=params.level,
                            n_boot=params.bootstrap, seed=params.seed) for t in tiers}


# ---- rules 1 and 2 -----------------------------------------------------------------------
def _non_inferiority(c: TierComparison, tolerance: float) -> tuple[str, str]:
    if c.n_pairs == 0:
        return INCONCLUSIVE, f"{c.tier}: no graded pair (every pair hit an infra error)"
    span = f"{c.difference:+.3f} [{c.low:+.3f}, {c.high:+.3f}]"
    if c.difference < -tolerance:
        return FAIL, f"{c.tier}: worse by {span}, beyond the tolerance {tolerance:.3f}"
    if c.low >= -tolerance:
        better = " (superior: the interval excludes 0)" if c.low > 0 else ""
        return PASS, f"{c.tier}: {span}, not worse than -{tolerance:.3f}{better}"
    return INCONCLUSIVE, (f"{c.tier}: {span} reaches below -{tolerance:.3f}: cannot tell "
                          "it is not worse")


def _tier_numbers(c: TierComparison, tolerance: float) -> dict[str, Any]:
    out = asdict(c)
    out["difference_at_k"] = c.difference_at_k
    out["tolerance"] = tolerance
    out["superior"] = bool(c.n_pairs and c.low > 0)
    return out


def target_capability(c: TierComparison, tolerance: float) -> Rule:
    status, why = _non_inferiority(c, tolerance)
    return Rule("target_capability", status, why, _tier_numbers(c, tolerance))


def _combine(statuses: Sequence[str]) -> str:
    if FAIL in statuses:
        return FAIL
    return INCONCLUSIVE if INCONCLUSIVE in statuses else PASS


def no_regressions(comparisons: Sequence[TierComparison], tolerance: float) -> Rule:
    if not comparisons:
        return Rule("no_regressions", PASS, "no other tier is gated", {"tiers": {}})
    results = {c.tier: _non_inferiority(c, tolerance) for c in comparisons}
    status = _combine([s for s, _ in results.values()])
    shown = [why for s, why in results.values() if s == status]
    numbers = {c.tier: {**_tier_numbers(c, tolerance), "status": results[c.tier][0]}
               for c in comparisons}
    return Rule("no_regressions", status, "; ".join(shown), {"tiers": numbers})


# ---- rule 3 --------------------------------------------------------------------------------
def parse_error_rate(rows: Sequence[Mapping[str, Any]]) -> float:
    """Unparsed tool calls / tool calls (turns) over `rows`; NaN with no turn."""
    turns = sum(r["n_turns"] for r in rows)
    return sum(r["n_invalid_actions"] for r in rows) / turns if turns else NAN


def contract_compliance(candidate: Sequence[Mapping[str, Any]],
                        champion: Sequence[Mapping[str, Any]], p: ContractParams) -> Rule:
    calls = sum(r["n_turns"] for r in candidate)
    bad = sum(r["n_invalid_actions"] for r in candidate)
    offenders = sorted((r for r in candidate if r["n_invalid_actions"]),
                       key=lambda r: (-r["n_invalid_actions"], r["tier"], r["task_id"],
                                      r["seed"], r["run"]))
    by_tier: dict[str, Any] = {}
    for tier in dict.fromkeys(r["tier"] for r in candidate):
        mine = [r for r in candidate if r["tier"] == tier]
        by_tier[tier] = {"tool_calls": sum(r["n_turns"] for r in mine),
                         "unparsed": sum(r["n_invalid_actions"] for r in mine),
                         "rate": parse_error_rate(mine)}
    numbers = {
        "tool_calls": calls, "unparsed": bad, "rate": bad / calls if calls else NAN,
        "max_invalid_rate": p.max_invalid_rate,
        "episodes_with_unparsed": len(offenders), "episodes": len(candidate),
        "champion_rate": parse_error_rate(champion), "by_tier": by_tier,
        "examples": [{k: r[k] for k in ("tier", "task_id", "seed", "run", "trajectory_id",
                                        "n_invalid_actions", "n_turns", "stop_reason")}
                     for r in offenders[:p.examples]],
    }
    if not calls:
        return Rule("contract_compliance", INCONCLUSIVE, "the candidate made no tool call",
                    numbers)
    rate = bad / calls
    if rate > p.max_invalid_rate:
        return Rule("contract_compliance", FAIL,
                    f"{bad} of {calls} tool calls did not parse ({rate:.3f} > "
                    f"{p.max_invalid_rate:.3f}), in {len(offenders)} of {len(candidate)} "
                    "episodes", numbers)
    return Rule("contract_compliance", PASS,
                f"{bad} of {calls} tool calls did not parse (<= {p.max_invalid_rate:.3f})",
                numbers)


# ---- rule 4 --------------------------------------------------------------------------------
RAISED, CLEAR, UNAVAILABLE, OFF = "raised", "clear", "unavailable", "off"


@dataclass(frozen=True)
class Signal:
    name: str
    status: str                       # raised | clear | unavailable | off
    value: float | None
    threshold: float | None
    why: str


def _off(name: str) -> Signal:
    return Signal(name, OFF, None, None, "switched off in params (null)")


def _heldout_drop(heldout: Sequence[TierComparison]) -> tuple[float, str]:
    """The largest fall (positive number) of pass@1 or pass@k over held-out tiers."""
    worst, where = 0.0, ""
    for c in heldout:
        for label, d in (("pass@1", c.difference), (f"pass@{c.k}", c.difference_at_k)):
            if d == d and -d > worst:  # d == d: not NaN
                worst, where = -d, f"{c.tier} {label}"
    return worst, where


def _rise_with_drop(name: str, rise: float | None, rise_label: str, drop: float,
                    drop_where: str, p: StopSignalParams, rise_thr: float | None) -> Signal:
    if rise_thr is None or p.heldout_drop is None:
        return _off(name)
    raised = rise is not None and rise >= rise_thr and drop >= p.heldout_drop
    why = (f"{rise_label} {rise:+.3f} (signal at >= +{rise_thr:.3f}) while the largest "
           f"held-out fall is {drop:.3f}{' (' + drop_where + ')' if drop_where else ''} "
           f"(signal at >= {p.heldout_drop:.3f})")
    return Signal(name, RAISED if raised else CLEAR, rise, rise_thr, why)


def _entropy_edge(name: str, edge: float | None, entropy: list[tuple[int, float]], missing: str,
                  *, below: bool) -> Signal:
    """The last logged token entropy outside one edge of the band (SPEC §7): under the floor
    (`below`) or over the ceiling."""
    if edge is None:
        return _off(name)
    if not entropy:
        return Signal(name, UNAVAILABLE, None, edge, missing)
    step, last = entropy[-1]
    outside = last < edge if below else last > edge
    return Signal(name, RAISED if outside else CLEAR, last, edge,
                  f"token entropy {last:.4f} at step {step} (band "
                  f"{'floor' if below else 'ceiling'} {edge:.4f})")


def _curve(training: TrainingMetrics | None, key: str) -> tuple[list[tuple[int, float]], str]:
    if training is None:
        return [], "no training metrics for the candidate"
    s = training.series(key)
    return s, "" if s else f"{training.source} has no {key!r} curve"


def stop_signals(candidate: Sequence[Mapping[str, Any]], champion: Sequence[Mapping[str, Any]],
                 comparisons: Mapping[str, TierComparison], training: TrainingMetrics | None,
                 p: StopSignalParams, keys: TrainingKeys) -> Rule:
    """Every declared flag; `comparisons`: every tier both sides hold (held-out tiers: all
    but `train`)."""
    heldout = [c for t, c in comparisons.items() if t != "train"]
    drop, drop_where = _heldout_drop(heldout)
    signals: list[Signal] = []

    train = comparisons.get("train")
    if p.train_rise is None or p.heldout_drop is None:
        signals.append(_off("train_up_heldout_down"))
    elif train is None or train.n_pairs == 0:
        signals.append(Signal("train_up_heldout_down", UNAVAILABLE, None, p.train_rise,
                              "no graded train tier in the evaluations"))
    else:
        signals.append(_rise_with_drop("train_up_heldout_down", train.difference,
                                       "train pass@1", drop, drop_where, p, p.train_rise))

    reward, missing = _curve(training, keys.reward)
    if p.reward_rise is None or p.heldout_drop is None:
        signals.append(_off("reward_up_heldout_down"))
    elif len(reward) < 2:
        signals.append(Signal("reward_up_heldout_down", UNAVAILABLE, None, p.reward_rise,
                              missing or f"{keys.reward!r} has fewer than 2 points"))
    else:
        signals.append(_rise_with_drop("reward_up_heldout_down", reward[-1][1] - reward[0][1],
                                       "train reward", drop, drop_where, p, p.reward_rise))

    if p.pass_at_k_drop is None:
        signals.append(_off("pass_at_k_drop"))
    else:
        falls = [(-c.difference_at_k, c) for c in heldout if c.difference_at_k == c.difference_at_k]
        if not falls:
            signals.append(Signal("pass_at_k_drop", UNAVAILABLE, None, p.pass_at_k_drop,
                                  "no held-out tier with graded samples"))
        else:
            fall, c = max(falls, key=lambda x: x[0])
            signals.append(Signal("pass_at_k_drop", RAISED if fall > p.pass_at_k_drop else CLEAR,
                                  -fall, p.pass_at_k_drop,
                                  f"largest held-out pass@{c.k} change {-fall:+.3f} ({c.tier}); "
                                  f"blocks below -{p.pass_at_k_drop:.3f}"))

    entropy, missing = _curve(training, keys.entropy)
    signals.append(_entropy_edge("entropy_collapse", p.entropy_min, entropy, missing, below=True))
    signals.append(_entropy_edge("entropy_blowup", p.entropy_max, entropy, missing, below=False))

    def delta_signal(name, thr, value, what):
        if thr is None:
            return _off(name)
        if value != value:
            return Signal(name, UNAVAILABLE, None, thr, f"{what}: no episodes to measure")
        return Signal(name, RAISED if value > thr else CLEAR, value, thr,
                      f"{what} changed by {value:+.3f} (blocks above +{thr:.3f})")

    signals.append(delta_signal("parse_error_spike", p.parse_error_spike,
                                parse_error_rate(candidate) - parse_error_rate(champion),
                                "evaluation parse-error rate"))
    signals.append(delta_signal("infra_error_rise", p.infra_error_rise,
                                infra_rate(candidate) - infra_rate(champion),
                                "verifier / rollout infra error rate"))

    if p.length_growth is None:
        signals.append(_off("length_growth"))
    else:
        a, b = mean_generated(champion), mean_generated(candidate)
        if not a or a != a or b != b:
            signals.append(Signal("length_growth", UNAVAILABLE, None, p.length_growth,
                                  "the champion generated no tokens to compare with"))
        else:
            ratio = b / a
            signals.append(Signal("length_growth", RAISED if ratio > p.length_growth else CLEAR,
                                  ratio, p.length_growth,
                                  f"mean generated tokens per episode {a:.1f} -> {b:.1f} "
                                  f"(x{ratio:.2f}; blocks above x{p.length_growth:.2f})"))

    if not p.trainer_flags:
        signals.append(_off("trainer_flags"))
    elif training is None or training.flags is None:
        signals.append(Signal("trainer_flags", UNAVAILABLE, None, None,
                              "no training metrics for the candidate" if training is None
                              else f"{training.source} records no pathology flags"))
    else:
        raised = sorted(k for k, v in training.flags.items() if v)
        for name in raised:
            signals.append(Signal(f"trainer:{name}", RAISED, 1.0, None,
                                  f"raised by the trainer ({training.source})"))
        if not raised:
            signals.append(Signal("trainer_flags", CLEAR, 0.0, None,
                                  f"none of {sorted(training.flags)} raised"))

    up = [s.name for s in signals if s.status == RAISED]
    unavailable = [s.name for s in signals if s.status == UNAVAILABLE]
    numbers = {"signals": [asdict(s) for s in signals], "raised": up,
               "unavailable": unavailable}
    if up:
        return Rule("stop_signals", FAIL, "raised: " + ", ".join(up), numbers)
    tail = f" (unavailable: {', '.join(unavailable)})" if unavailable else ""
    return Rule("stop_signals", PASS, "no declared stop signal raised" + tail, numbers)


def infra_rate(rows: Sequence[Mapping[str, Any]]) -> float:
    return sum(bool(r["infra_error"]) for r in rows) / len(rows) if rows else NAN


def mean_generated(rows: Sequence[Mapping[str, Any]]) -> float:
    return sum(r["n_trainable_tokens"] for r in rows) / len(rows) if rows else NAN


# ---- rule 5 --------------------------------------------------------------------------------
def resolution(c: TierComparison) -> float:
    """The smallest difference this tier's trials resolve: the interval's half-width, or —
    when every task's difference is the same (a zero-width bootstrap, typically both sides at
    0) — the Wilson upper bound z²/(T + z²) on the share of tasks on which the two could still
    differ, having seen none of T do so."""
    if c.n_pairs == 0:
        return NAN
    half = (c.high - c.low) / 2
    if half > 0:
        return half
    z = NormalDist().inv_cdf(0.5 + c.level / 2)
    return z * z / (c.n_tasks + z * z)


def enough_evidence(comparisons: Sequence[TierComparison], params: GateParams) -> Rule:
    tiers, short = {}, []
    for c in comparisons:
        tol = params.tolerance_of(c.tier)
        res = resolution(c)
        gaps = []
        if c.n_tasks < params.min_tasks:
            gaps.append(f"{c.n_tasks} tasks < {params.min_tasks}")
        if c.n_pairs < params.min_trials:
            gaps.append(f"{c.n_pairs} graded trials < {params.min_trials}")
        if not res <= tol:  # NaN (no graded pair) is short too
            gaps.append(f"resolution {res:.3f} > tolerance {tol:.3f}")
        tiers[c.tier] = {"tasks": c.n_tasks, "trials": c.n_pairs,
                         "excluded_infra": c.n_excluded_infra, "resolution": res,
                         "tolerance": tol, "min_tasks": params.min_tasks,
                         "min_trials": params.min_trials, "enough": not gaps}
        if gaps:
            short.append(f"{c.tier}: " + ", ".join(gaps))
    if short:
        return Rule("enough_evidence", INCONCLUSIVE, "; ".join(short), {"tiers": tiers})
    return Rule("enough_evidence", PASS, "every gated tier resolves its tolerance",
                {"tiers": tiers})


def decide(rules: Sequence[Rule]) -> str:
    """block if any rule fails; inconclusive if any could not decide; else promote."""
    statuses = [r.status for r in rules]
    if FAIL in statuses:
        return BLOCK
    return INCONCLUSIVE if INCONCLUSIVE in statuses else PROMOTE


def apply_rules(candidate: Sequence[Mapping[str, Any]], champion: Sequence[Mapping[str, Any]],
                params: GateParams, training: TrainingMetrics | None = None
                ) -> tuple[str, list[Rule], dict[str, TierComparison]]:
    """The decision, the five rules in order, and the comparison of every tier both sides
    hold (inputs already checked by `inputs.check_comparable`)."""
    tiers = [t for t in EVAL_TIERS if any(r["tier"] == t for r in candidate)]
    cmps = compare_tiers(candidate, champion, tiers, params)
    rules = [
        target_capability(cmps[params.target_tier], params.tolerance),
        no_regressions([cmps[t] for t in params.other_tiers], params.regression_tolerance),
        contract_compliance(candidate, champion, params.contract),
        stop_signals(candidate, champion, cmps, training, params.stop, params.keys),
        enough_evidence([cmps[t] for t in params.gated_tiers], params),
    ]
    return decide(rules), rules, cmps
