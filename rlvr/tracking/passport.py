"""The data / verifier passport (SPEC §9): what a reader must know to trust a reward signal.

Written by the `verify` stage (`--passport`), where every fact is at hand: the task pools
with their rejection logs, the self-check verdicts (a labelled sample: a reference patch
must pass, the empty patch must fail), the rollout verdicts (the initial success rate of
each task under the rollout policy) and the verify / sandbox params. No clock and no host
path goes in: the same inputs give the same bytes, like every artifact a stage depends on.

* `labelled_rates(rows)` — false-positive / false-negative rates of the verifier on verdict
  rows whose origin has a known label (`LABELS`), each with its exact (Clopper-Pearson)
  one-sided 95% upper bound: 0 false passes in 16 tries is not a rate of 0;
* `pool_summary(path)` — a tasks Parquet and its rejection log: accepted by split / family /
  source / generator and operator, rejected by reason, curation's own wrong-solution checks;
* `success_rate_distribution(rows)` — per-task p̂ of the judged rollouts, binned;
* `sandbox_identity(sandbox)` — backend, limits and the image (docker tag, or for bwrap the
  host interpreter and bwrap version the sandbox mounts);
* `build_passport(...)` — all of it, with the verifier version and the hash of its config.
"""
from __future__ import annotations

import hashlib
import json
import platform
import shutil
import subprocess
from collections import Counter, defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from rlvr.artifacts import schemas
from rlvr.artifacts.io import read_table
from rlvr.chat_format import SPECIAL_TOKENS
from rlvr.enclave.core import VERIFIER_VERSION
from rlvr.sandbox.image import image_tag
from rlvr.tasks.pool import load_tasks, rejections_path

FORMAT = "rlvr-passport/1"
# origin (before any ":") -> whether a correct verifier accepts it; others are unlabelled
LABELS = {"reference": True, "empty": False, "wrong": False, "adversarial": False}
SUCCESS_BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def upper_bound(errors: int, n: int, level: float = 0.95) -> float | None:
    """Exact one-sided upper confidence bound of a binomial rate (Clopper-Pearson)."""
    if n == 0:
        return None
    if errors >= n:
        return 1.0
    from scipy.stats import beta

    return round(float(beta.ppf(level, errors + 1, n - errors)), 6)


def labelled_rates(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Verdict rows (`schemas.VERDICTS`) -> false positives (a must-fail patch accepted)
    and false negatives (a must-pass patch refused) over the labelled origins. Infra errors
    judge nothing: counted apart, outside both denominators."""
    by_origin: dict[str, dict[str, Any]] = {}
    pos = neg = fp = fn = infra = unlabelled = 0
    for r in rows:
        origin = r["origin"].split(":")[0]
        label = LABELS.get(origin)
        if label is None:
            unlabelled += 1
            continue
        if r["reason"] == "infra_error":
            infra += 1
            continue
        entry = by_origin.setdefault(origin, {"expected": "pass" if label else "fail",
                                              "n": 0, "wrong": 0})
        entry["n"] += 1
        wrong = bool(r["success"]) != label
        entry["wrong"] += wrong
        if label:
            pos, fn = pos + 1, fn + wrong
        else:
            neg, fp = neg + 1, fp + wrong
    return {
        "negatives": neg, "false_positives": fp,
        "false_positive_rate": fp / neg if neg else None,
        "false_positive_rate_upper95": upper_bound(fp, neg),
        "positives": pos, "false_negatives": fn,
        "false_negative_rate": fn / pos if pos else None,
        "false_negative_rate_upper95": upper_bound(fn, pos),
        "infra_errors": infra, "unlabelled": unlabelled,
        "by_origin": dict(sorted(by_origin.items())),
    }


def pool_summary(path: Path | str) -> dict[str, Any]:
    """One task pool and the rejection log beside it (`rlvr.tasks.pool.rejections_path`)."""
    tasks = load_tasks(path)
    rejections = read_table(rejections_path(path), schemas.REJECTIONS,
                            contract="rejections").to_pylist()
    families: dict[str, Counter] = defaultdict(Counter)
    for t in tasks:
        families[t.family][t.split] += 1
    checks = [t.checks for t in tasks]
    generators = Counter(f"{t.provenance.get('generator', t.source)}"
                         + (f":{t.provenance['operator']}" if "operator" in t.provenance else "")
                         for t in tasks)
    seed_repos = sorted({(t.family, t.provenance["seed_repo_hash"]) for t in tasks
                         if "seed_repo_hash" in t.provenance})
    return {
        "accepted": len(tasks),
        "rejected": len(rejections),
        "rejected_by_reason": dict(sorted(Counter(r["reason"] for r in rejections).items())),
        "by_split": dict(sorted(Counter(t.split for t in tasks).items())),
        "by_source": dict(sorted(Counter(t.source for t in tasks).items())),
        "by_generator": dict(sorted(generators.items())),
        "families": {f: dict(sorted(c.items())) for f, c in sorted(families.items())},
        "seed_repo_hashes": {f: h for f, h in seed_repos},
        "quarantined_tests": sum(len(t.quarantined) for t in tasks),
        # curation's rule 3 on the accepted tasks: every wrong solution refused by
        # construction; other mutants of the fixed function may survive up to the kill rate
        "curation_checks": {
            "wrong_solutions_refused": sum(c.get("wrong_solutions", 0) - c.get("mutants", 0)
                                           for c in checks),
            "mutants": sum(c.get("mutants", 0) for c in checks),
            "mutants_killed": sum(c.get("mutants_killed", 0) for c in checks),
            "reference_runs": sorted({c["reference_runs"] for c in checks
                                      if "reference_runs" in c}),
        },
    }


def success_rate_distribution(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Scored rollout passports -> per-task p̂ = successes / judged rollouts (rows without
    a verdict left out), binned by `SUCCESS_BINS` (the last bin holds 1.0), plus how many
    tasks sit at exactly 0 and 1 (no learning signal in a group, SPEC §1)."""
    per_task: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.get("reward_outcome") is not None:
            per_task[r["task_id"]].append(float(r["reward_outcome"]))
    rates = {t: sum(v) / len(v) for t, v in sorted(per_task.items())}
    bins = []
    for lo, hi in zip(SUCCESS_BINS, SUCCESS_BINS[1:]):
        last = hi == SUCCESS_BINS[-1]
        bins.append({"low": lo, "high": hi,
                     "tasks": sum(1 for p in rates.values() if lo <= p < hi or (last and p == hi))})
    return {
        "tasks": len(rates), "rollouts": sum(len(v) for v in per_task.values()),
        "policy_versions": sorted({r["policy_version"] for r in rows if r.get("policy_version")}),
        "engines": sorted({r["engine"] for r in rows if r.get("engine")}),
        "mean": sum(rates.values()) / len(rates) if rates else None,
        "at_zero": sum(1 for p in rates.values() if p == 0.0),
        "at_one": sum(1 for p in rates.values() if p == 1.0),
        "bins": bins,
        "per_task": {t: {"p_hat": round(p, 6), "n": len(per_task[t])} for t, p in rates.items()},
    }


def _bwrap_version() -> str | None:
    exe = shutil.which("bwrap")
    if exe is None:
        return None
    try:
        return subprocess.run([exe, "--version"], capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def sandbox_identity(sandbox) -> dict[str, Any]:
    """The sandbox the verdicts came from (`SandboxParams`): backend, limits, image."""
    out: dict[str, Any] = {"backend": sandbox.backend, "workers": sandbox.workers,
                           "limits": asdict(sandbox.limits)}
    if sandbox.backend == "docker":
        out["image"] = image_tag()
    else:  # bwrap mounts the host's interpreter read-only: that is its image
        out["image"] = {"python": platform.python_version(), "bwrap": _bwrap_version()}
    return out


def config_hash(*sections: Any) -> str:
    """sha256 of the canonical JSON of the verifier's param dataclasses."""
    text = json.dumps([asdict(s) for s in sections], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def build_passport(*, pools: Sequence[Path | str], split: Any, verify: Any, sandbox: Any,
                   verdicts: Sequence[Mapping[str, Any]],
                   selfcheck: Sequence[Mapping[str, Any]],
                   scored: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The passport of one verify run: `pools` the tasks Parquet files (rejection logs
    beside them), `split` / `verify` / `sandbox` the param dataclasses, `verdicts` this
    run's verdict rows, `selfcheck` the self-check stage's, `scored` the rollout passports
    with their verdicts (for the initial success rates, stop reasons and length limits)."""
    scored = list(scored or [])
    versions = sorted({r["verifier_version"] for r in [*verdicts, *selfcheck]})
    pool_info = {Path(p).name: pool_summary(p) for p in pools}
    return {
        "format": FORMAT,
        "tasks": {
            "pools": pool_info,
            "accepted": sum(p["accepted"] for p in pool_info.values()),
            "rejected": sum(p["rejected"] for p in pool_info.values()),
            "rejected_by_reason": dict(sorted(sum(
                (Counter(p["rejected_by_reason"]) for p in pool_info.values()),
                Counter()).items())),
            "split_rules": asdict(split),
        },
        "verifier": {
            "version": VERIFIER_VERSION,
            "versions_in_verdicts": versions,
            "config_hash": config_hash(verify, sandbox),
            "config": {"verify": asdict(verify)},
            "labelled_sample": {"selfcheck": labelled_rates(selfcheck),
                                "this_run": labelled_rates(verdicts)},
            "reasons": dict(sorted(Counter(r["reason"] for r in verdicts).items())),
        },
        "initial_success_rate": success_rate_distribution(scored),
        "rollouts": {
            "stop_reasons": dict(sorted(Counter(r["stop_reason"] for r in scored).items())),
            "length_limits": sorted({r["budgets"] for r in scored if r.get("budgets")}),
            "decoding": sorted({r["decoding"] for r in scored if r.get("decoding")}),
            "env_versions": sorted({r["env_version"] for r in scored if r.get("env_version")}),
        },
        "answer_format": {"chat_special_tokens": list(SPECIAL_TOKENS),
                          "turn": "<|im_start|>{role}\\n{content}<|im_end|>\\n",
                          "action": "<tool_call>{json}</tool_call>"},
        "sandbox": sandbox_identity(sandbox),
    }
