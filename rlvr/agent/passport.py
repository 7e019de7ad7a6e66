"""The rollout passport (SPEC §3): one `trajectories.parquet` row per episode, and the
checks that make it trustworthy without regeneration.

* `passport_row(episode)` — the row (schema `schemas.TRAJECTORIES`) with the episode's
  wall-clock fields (`schemas.TRAJECTORY_TIMING_COLUMNS`) beside it: in memory a passport
  is the whole record; on disk the timings go to a sidecar (`timing_rows`).
* `check_alignment(table)` — what the column contract cannot express: per row,
  len(token_ids) == len(loss_mask) == len(logprobs) == len(turn_ids) == n_tokens.
  `write_trajectories` / `read_trajectories` run it with the data contract; every consumer
  should read through `read_trajectories`.
* `write_trajectories(path, rows, timings_path=...)` writes the passports without their
  timings — a function of the run's inputs, byte-identical on a rerun, so the stages that
  depend on it are not made stale by a clock — and the timings to `timings_path`
  (`schemas.TRAJECTORY_TIMINGS`, read back by `read_trajectory_timings`).
* `rollout_differences(a, b)` — where two runs' passports differ beyond float rounding of
  the logprobs: how two schedules or devices that must sample the same rollouts are compared.
* `rebuild_check(row) -> list[str]` — recomputes from the stored row alone the trainable-token
  count, each turn's logprob (sum of its token logprobs), the stop reason (replaying the
  budget / invalid-action / repetition rules) and the reward fields; every disagreement is a
  problem string. An empty list means the loss can be recomputed from this row.
* `apply_verdict(row, verdict)` — the one place a verdict becomes a reward: R_outcome, the
  total reward R (SPEC §5), `verdict_reason` and `verifier_version`; `apply_verdicts(rows,
  verdicts)` joins a verify run's verdicts to its rollouts (candidate_id == trajectory_id).

`verdict_reason` (one of `schemas.VERDICT_REASONS`, or null) says what decided R_outcome:

* null — no verdict applies: the rollout did not submit (its `stop_reason` says why and its
  outcome was forced to 0 at rollout time, or it is a rollout-time `infra_error` with no
  outcome at all), or it submitted a diff that is not verified yet (outcome null);
* "patch_rejected" — the static patch policy refused the submitted diff at rollout time
  (`patch_ok` false): outcome 0, no verifier call;
* the enclave's reason otherwise: "none" = success (outcome 1), "tests_failed",
  "apply_failed", "timeout", ... (outcome 0) — and "infra_error": the verifier could not
  judge, so the outcome and reward stay null; such a row is excluded from training and from
  pass-rate denominators, counted apart, never a task failure.
"""
from __future__ import annotations

import dataclasses
import json
import math
from operator import itemgetter
from pathlib import Path
from typing import Any, Iterable, Mapping

import pyarrow as pa

from rlvr.agent.episode import ENV_NAME, Episode, env_version
from rlvr.agent.repetition import RepetitionParams, first_repetition
from rlvr.rl.reward import (format_reward, length_fraction, rollout_outcome,
                            trajectory_reward)
from rlvr.artifacts import schemas
from rlvr.artifacts.io import as_table, read_table, write_tables
from rlvr.artifacts.timings import read_sidecar, sidecar_rows
from rlvr.errors import ArtifactError
from rlvr.tasks.patches import PATCH_POLICY_VERSION

LOGPROB_TOL = 1e-6
REWARD_TOL = 1e-9


def passport_row(ep: Episode) -> dict[str, Any]:
    """The passport of a finished episode, its timing fields included (module docstring)."""
    spec, cfg, tr = ep.spec, ep.cfg, ep.transcript
    budgets = cfg.budgets
    n_valid = sum(t.action_valid for t in ep.turns)
    fmt = format_reward(n_valid, len(ep.turns))
    outcome = rollout_outcome(ep.stop_reason, ep.infra_error, ep.patch_ok)
    t_max = budgets.max_new_tokens_per_episode
    teacher = any(m and math.isnan(lp) for m, lp in zip(tr.loss_mask, tr.logprobs))
    return {
        "trajectory_id": spec.trajectory_id,
        "group_id": spec.group_id,
        "task_id": spec.task.task_id,
        "sample_index": spec.sample_index,
        "family": spec.task.family,
        "split": spec.task.split,
        "env_id": f"{ENV_NAME}/{spec.task.task_id}",
        "env_version": env_version(cfg.codec),
        "reset_seed": spec.reset_seed,
        "initial_state_checksum": ep.initial_checksum,
        "engine": ep.engine_name,
        "policy_version": ep.turns[0].policy_version if ep.turns else "",
        "policy_step": ep.turns[0].policy_step if ep.turns else 0,
        "turn_policy_versions": [t.policy_version for t in ep.turns],
        "decoding": json.dumps({**cfg.decoding.knobs(), "stop_token_ids": list(cfg.codec.stop_ids)},
                               sort_keys=True),
        "decoding_seed": cfg.run_seed,
        "budgets": json.dumps(_fields(budgets), sort_keys=True),
        "repetition": json.dumps(_fields(cfg.repetition), sort_keys=True),
        "token_ids": list(tr.token_ids),
        "loss_mask": list(tr.loss_mask),
        "logprobs": list(tr.logprobs),
        "logprobs_kind": "none" if teacher else "behaviour",
        "turn_ids": list(tr.turn_ids),
        "turns": [{
            "turn": t.turn, "policy_version": t.policy_version, "sample_seed": t.sample_seed,
            "action_text": t.action_text, "action_valid": t.action_valid,
            "action_error_kind": t.action_error_kind, "action_error": t.action_error,
            "tool_name": t.tool_name, "tool_args": t.tool_args,
            "finish_reason": t.finish_reason, "gen_tokens": t.gen_tokens,
            "logprob_sum": t.logprob_sum, "observation": t.observation,
            "observation_raw_chars": t.observation_raw_chars,
            "observation_truncated": t.observation_truncated, "tool_status": t.tool_status,
            "sampled_by": t.sampled_by,
        } for t in ep.turns],
        "n_turns": len(ep.turns),
        "n_tokens": len(tr),
        "n_prompt_tokens": ep.prompt_tokens,
        "n_trainable_tokens": sum(tr.loss_mask),
        "n_tokens_before_truncation": len(tr) + ep.dropped_tokens,
        "n_invalid_actions": ep.invalid_actions,
        "terminated": ep.terminated,
        "truncated": ep.truncated,
        "truncation_source": ep.truncation_source,
        "infra_error": ep.infra_error,
        "stop_reason": ep.stop_reason,
        "stop_detail": ep.stop_detail,
        "reward_format": fmt,
        "reward_length": length_fraction(ep.generated, t_max),
        "reward_lambda_fmt": cfg.reward.lambda_fmt,
        "reward_alpha": cfg.reward.alpha,
        "reward_t_max": t_max,
        "reward_outcome": outcome,
        "reward": trajectory_reward(ep.stop_reason, ep.infra_error, outcome, fmt, ep.generated,
                                    t_max, cfg.reward.lambda_fmt, cfg.reward.alpha),
        # set when the static patch policy already decided the outcome (a refused diff)
        "verifier_version": PATCH_POLICY_VERSION if (ep.stop_reason == "submitted"
                                                     and not ep.patch_ok) else None,
        "verdict_reason": "patch_rejected" if (ep.stop_reason == "submitted"
                                               and not ep.patch_ok) else None,
        "patch": ep.patch,
        "patch_ok": ep.patch_ok,
        "patch_reason": ep.patch_reason,
        "patch_check": json.dumps(ep.patch_check, sort_keys=True),
        "tool_latency_s": [t.tool_seconds for t in ep.turns],
        "gen_seconds": [t.gen_seconds for t in ep.turns],
        "started_at": ep.started_at,
        "wall_seconds": ep.wall_seconds,
    }


def _fields(obj) -> dict:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def needs_verdict(row: Mapping[str, Any]) -> bool:
    """Whether only the verifier can decide this rollout's outcome: it submitted a diff the
    patch policy passed (every other outcome is decided when the rollout ends)."""
    return (row["stop_reason"] == "submitted" and bool(row["patch_ok"])
            and not row["infra_error"])


def apply_verdict(row: Mapping[str, Any], verdict: Mapping[str, Any]) -> dict[str, Any]:
    """`row` scored by `verdict` (a `schemas.VERDICTS` row or `Verdict.public()`: `success`,
    `reason`, `verifier_version`): R_outcome, R (SPEC §5), `verdict_reason` and
    `verifier_version` (module docstring for the values).

    Forced outcomes win over any verdict: a rollout that did not submit keeps its
    rollout-time outcome (0, or none for a rollout-time infra error) and a null reason; one
    whose diff the patch policy refused keeps outcome 0 and "patch_rejected". A verifier
    `infra_error` leaves outcome and reward null (no reward for what was never judged)."""
    reason = verdict["reason"]
    if reason not in schemas.VERDICT_REASONS:
        raise ArtifactError(f"verdict for {row['trajectory_id']!r}: reason {reason!r} is not "
                            f"one of {', '.join(schemas.VERDICT_REASONS)}")
    if bool(verdict["success"]) != (reason == "none"):
        raise ArtifactError(f"verdict for {row['trajectory_id']!r}: success="
                            f"{verdict['success']} contradicts reason {reason!r}")
    out = dict(row)
    if not needs_verdict(row):
        return out  # decided at rollout time (passport_row): nothing a verdict may change
    out["verifier_version"] = verdict["verifier_version"]
    out["verdict_reason"] = reason
    out["reward_outcome"] = None if reason == "infra_error" else float(reason == "none")
    out["reward"] = trajectory_reward(
        row["stop_reason"], row["infra_error"], out["reward_outcome"], row["reward_format"],
        row["n_trainable_tokens"], row["reward_t_max"], row["reward_lambda_fmt"],
        row["reward_alpha"])
    return out


def apply_verdicts(rows: Iterable[Mapping[str, Any]], verdicts: Iterable[Mapping[str, Any]],
                   *, where: str = "verdicts") -> list[dict[str, Any]]:
    """Every rollout row, each one that `needs_verdict` scored by the verdict whose
    candidate_id is its trajectory_id. The join is exact: a rollout that needs a verdict and
    has none, a verdict for a rollout whose outcome is already decided, and a `rollout:`
    verdict for a trajectory not in `rows` are ArtifactErrors naming `where` (the files do
    not belong together). Every scored row must still pass `rebuild_check`."""
    rows = list(rows)
    by_id = {v["candidate_id"]: v for v in verdicts}
    known = {r["trajectory_id"] for r in rows}
    orphans = sorted(cid for cid, v in by_id.items()
                     if str(v.get("origin", "")).startswith("rollout:") and cid not in known)
    if orphans:
        raise ArtifactError(f"{where}: {len(orphans)} rollout verdict(s) for trajectories "
                            f"the trajectories file lacks, e.g. {orphans[0]!r}")
    out, missing = [], []
    for row in rows:
        verdict = by_id.get(row["trajectory_id"])
        if verdict is None:
            if needs_verdict(row):
                missing.append(row["trajectory_id"])
            out.append(dict(row))
            continue
        if not needs_verdict(row):
            raise ArtifactError(f"{where}: a verdict for trajectory {row['trajectory_id']!r}, "
                                f"whose outcome was decided at rollout time (stop_reason "
                                f"{row['stop_reason']}, patch_ok {row['patch_ok']})")
        scored = apply_verdict(row, verdict)
        problems = rebuild_check(scored)
        if problems:
            raise ArtifactError(f"{where}: trajectory {row['trajectory_id']!r} does not "
                                f"rebuild once scored: {'; '.join(problems[:3])}")
        out.append(scored)
    if missing:
        raise ArtifactError(f"{where}: no verdict for {len(missing)} submitted rollout(s), "
                            f"e.g. {missing[0]!r}")
    return out


def invalid_turns(row: Mapping[str, Any]) -> int:
    """Turns whose action did not parse against its schema — including a final turn cut by
    the token budget, which `n_invalid_actions` (the invalid-action budget) does not count.
    The parse-error rate is this over turns, wherever it is reported (SPEC §6, §8.3)."""
    return sum(not t["action_valid"] for t in row["turns"])


def parse_error_rate(rows: Iterable[Mapping[str, Any]]) -> float:
    """Invalid turns / turns over rollout passports (0.0 when there are no turns)."""
    rows = list(rows)
    turns = sum(len(r["turns"]) for r in rows)
    return sum(invalid_turns(r) for r in rows) / turns if turns else 0.0


def outcome_summary(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What the verdicts made of the rollouts: success rate over the judged rollouts only
    (infra errors, rollout-time or verifier, and unverified rows are counted apart)."""
    rows = list(rows)
    infra = [r for r in rows if r["infra_error"] or r["verdict_reason"] == "infra_error"]
    judged = [r for r in rows if r["reward_outcome"] is not None]
    rewards = [r["reward"] for r in judged if r["reward"] is not None]
    reasons: dict[str, int] = {}
    for r in rows:
        key = r["verdict_reason"] or (f"not_submitted:{r['stop_reason']}"
                                      if r["stop_reason"] != "submitted" else "unverified")
        reasons[key] = reasons.get(key, 0) + 1
    return {
        "rollouts": len(rows),
        "judged": len(judged),
        "infra_errors": len(infra),
        "unverified": sum(1 for r in rows if needs_verdict(r) and r["verdict_reason"] is None),
        "success_rate": (sum(r["reward_outcome"] for r in judged) / len(judged)
                         if judged else 0.0),
        "reward_mean": sum(rewards) / len(rewards) if rewards else 0.0,
        "outcome_reasons": dict(sorted(reasons.items())),
    }


def deterministic_view(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows without wall-clock columns (what must be identical across identical runs)."""
    drop = set(schemas.TRAJECTORY_TIMING_COLUMNS)
    return [{k: v for k, v in r.items() if k not in drop} for r in rows]


def rollout_differences(a: list[Mapping[str, Any]], b: list[Mapping[str, Any]], *,
                        tol: float = 1e-4) -> list[str]:
    """Where two runs' passports differ, beyond float rounding of the behaviour logprobs
    (`tol` per token) and of each turn's logprob sum (`tol` per generated token): one
    "trajectory_id: field" per difference, [] when the runs sampled the same rollouts. Two
    schedules or devices that must draw the same episodes are compared with this."""
    if len(a) != len(b):
        return [f"{len(a)} rollouts against {len(b)}"]
    out = []
    for x, y in zip(a, b):
        where = x.get("trajectory_id")
        for key in sorted(set(x) | set(y)):
            p, q = x.get(key), y.get(key)
            if key == "logprobs":
                same = p is not None and q is not None and len(p) == len(q) and all(
                    (math.isnan(u) and math.isnan(v)) or abs(u - v) <= tol
                    for u, v in zip(p, q))
            elif key == "turns":
                same = p is not None and q is not None and len(p) == len(q) and all(
                    _same_turn(s, t, tol) for s, t in zip(p, q))
            else:
                same = p == q
            if not same:
                out.append(f"{where}: {key}")
    return out


def _same_turn(s: Mapping[str, Any], t: Mapping[str, Any], tol: float) -> bool:
    s, t = dict(s), dict(t)
    ls, lt = s.pop("logprob_sum", 0.0), t.pop("logprob_sum", 0.0)
    return s == t and abs(ls - lt) <= tol * max(1, int(s.get("gen_tokens") or 0))


def timing_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The `schemas.TRAJECTORY_TIMINGS` rows of in-memory passports (`passport_row`); a row
    read back from a trajectories file has none (ArtifactError naming the trajectory)."""
    return sidecar_rows(rows, "trajectory_id", schemas.TRAJECTORY_TIMING_COLUMNS,
                        label="trajectory",
                        why="a passport read from disk keeps its timings in the sidecar")


# ---- table-level checks -----------------------------------------------------------------------
def check_alignment(table: pa.Table, where: str) -> None:
    cols = {c: table.column(c).to_pylist() for c in
            ("trajectory_id", "token_ids", "loss_mask", "logprobs", "turn_ids", "n_tokens")}
    for i, tid in enumerate(cols["trajectory_id"]):
        lengths = {c: len(cols[c][i] or []) for c in ("token_ids", "loss_mask", "logprobs",
                                                       "turn_ids")}
        lengths["n_tokens"] = cols["n_tokens"][i]
        if len(set(lengths.values())) != 1:
            raise ArtifactError(f"{where}: trajectory {tid!r}: token columns are not aligned "
                                f"({lengths})")


def write_trajectories(path: Path | str, rows: list[dict[str, Any]], *,
                       timings_path: Path | str | None = None,
                       contract: bool = True) -> pa.Table:
    """Atomic write of the passports (the `schemas.TRAJECTORIES` columns: timing fields are
    left out) with the schema, the alignment check and (unless `contract=False`) the data
    contract. `timings_path`: also write the rows' timings there (`timing_rows`), checked
    before either file is written, so a bad timing field writes nothing."""
    table = as_table(rows, schemas.TRAJECTORIES, str(path))
    check_alignment(table, str(path))
    parts = [(path, table, schemas.TRAJECTORIES, "trajectories" if contract else None)]
    if timings_path is not None:
        parts.append((timings_path, timing_rows(rows), schemas.TRAJECTORY_TIMINGS,
                      "trajectory_timings"))
    return write_tables(parts)[0]


def read_trajectories(path: Path | str, *, contract: bool = True) -> pa.Table:
    table = read_table(path, schemas.TRAJECTORIES,
                       contract="trajectories" if contract else None)
    check_alignment(table, str(path))
    return table


def read_trajectory_timings(path: Path | str) -> dict[str, dict[str, Any]]:
    """trajectory_id -> its timing row, from a timings sidecar (`write_trajectories`)."""
    return read_sidecar(path, schemas.TRAJECTORY_TIMINGS, "trajectory_timings",
                        itemgetter("trajectory_id"))


# ---- the rebuild check --------------------------------------------------------------------------
def rebuild_check(row: dict[str, Any]) -> list[str]:
    """Every way `row` disagrees with what its own stored tokens and turns imply."""
    problems: list[str] = []
    ids, mask, lps, tids = row["token_ids"], row["loss_mask"], row["logprobs"], row["turn_ids"]
    turns = row["turns"] or []
    n = len(ids)
    if not (len(mask) == len(lps) == len(tids) == n == row["n_tokens"]):
        return [f"token columns not aligned: ids {n}, mask {len(mask)}, logprobs {len(lps)}, "
                f"turn_ids {len(tids)}, n_tokens {row['n_tokens']}"]
    if any(m not in (0, 1) for m in mask):
        problems.append("loss_mask has values other than 0/1")
    if sum(mask) != row["n_trainable_tokens"]:
        problems.append(f"n_trainable_tokens {row['n_trainable_tokens']} != sum(loss_mask) "
                        f"{sum(mask)}")
    if any(b < a for a, b in zip(tids, tids[1:])):
        problems.append("turn_ids decrease")
    n_prompt = sum(1 for t in tids if t == -1)
    if n_prompt != row["n_prompt_tokens"]:
        problems.append(f"n_prompt_tokens {row['n_prompt_tokens']} != prompt tokens {n_prompt}")
    if any(m for m, t in zip(mask, tids) if t == -1):
        problems.append("loss_mask is 1 on the initial prompt")
    if any(lp != 0.0 for m, lp in zip(mask, lps) if not m):
        problems.append("a context token (loss_mask 0) carries a non-zero logprob")
    policy_lps = [lp for m, lp in zip(mask, lps) if m]
    if row["logprobs_kind"] == "behaviour":
        if any(math.isnan(lp) or lp > 1e-6 for lp in policy_lps):
            problems.append("behaviour logprobs must be finite and <= 0 on policy tokens")
    elif not all(math.isnan(lp) for lp in policy_lps):
        problems.append("logprobs_kind 'none' but policy tokens carry logprobs")
    if row["n_turns"] != len(turns):
        problems.append(f"n_turns {row['n_turns']} != {len(turns)} stored turns")
    if len(row["turn_policy_versions"]) != len(turns):
        problems.append("turn_policy_versions does not have one entry per turn")
    if row["policy_step"] is None or row["policy_step"] < 0:
        problems.append(f"policy_step {row['policy_step']} is not an ordinal >= 0")
    elif row["logprobs_kind"] == "none" and row["policy_step"] != 0:
        problems.append(f"a teacher's rollout (logprobs_kind 'none') has policy_step "
                        f"{row['policy_step']}, not 0")
    for k, turn in enumerate(turns):
        problems += _check_turn(k, turn, ids, mask, lps, tids,
                                row["turn_policy_versions"][k:k + 1])
    problems += _check_counts(row, turns)
    expected_stop = recompute_stop_reason(row)
    if expected_stop != row["stop_reason"]:
        problems.append(f"stop_reason {row['stop_reason']!r} but the stored rollout implies "
                        f"{expected_stop!r}")
    problems += _check_flags(row)
    problems += _check_reward(row, turns)
    problems += _check_verdict(row)
    return problems


def _check_turn(k, turn, ids, mask, lps, tids, version) -> list[str]:
    out = []
    if turn["turn"] != k:
        out.append(f"turn {k}: stored index {turn['turn']}")
    positions = [i for i, (m, t) in enumerate(zip(mask, tids)) if m and t == k]
    if len(positions) != turn["gen_tokens"]:
        out.append(f"turn {k}: gen_tokens {turn['gen_tokens']} != {len(positions)} trainable "
                   "tokens")
    if positions and positions[-1] - positions[0] + 1 != len(positions):
        out.append(f"turn {k}: its generated tokens are not one contiguous span")
    total = math.fsum(lps[i] for i in positions)
    stored = turn["logprob_sum"]
    same = (math.isnan(total) and math.isnan(stored)) or (
        not math.isnan(total) and not math.isnan(stored)
        and abs(total - stored) <= LOGPROB_TOL * max(1.0, abs(total)))
    if not same:
        out.append(f"turn {k}: logprob_sum {stored} != sum of its token logprobs {total}")
    if version and version[0] != turn["policy_version"]:
        out.append(f"turn {k}: policy_version differs from turn_policy_versions")
    return out


def _check_counts(row, turns) -> list[str]:
    out = []
    invalid = sum(1 for t in turns if t["tool_status"] == "invalid")
    if invalid != row["n_invalid_actions"]:
        out.append(f"n_invalid_actions {row['n_invalid_actions']} != {invalid} invalid turns")
    if row["n_tokens_before_truncation"] < row["n_tokens"]:
        out.append("n_tokens_before_truncation < n_tokens")
    if (row["n_tokens_before_truncation"] > row["n_tokens"]) != (
            row["truncation_source"] == "observation"):
        out.append("tokens were dropped iff an observation did not fit: violated")
    return out


def recompute_stop_reason(row: dict[str, Any]) -> str:
    """The stop reason implied by the stored turns, tokens and budgets."""
    turns = row["turns"] or []
    budgets = json.loads(row["budgets"])
    rep = RepetitionParams(**json.loads(row["repetition"]))
    if row["infra_error"]:
        return "infra_error"
    if not turns:
        return "max_tokens"  # nothing could be generated: the prompt filled the context
    last = turns[-1]
    generated = [t for t, m in zip(row["token_ids"], row["loss_mask"]) if m]
    fired = first_repetition(generated, rep)
    if fired is not None:
        # it must fire inside the last turn: the episode stops right after that turn
        return ("repetition" if fired >= len(generated) - last["gen_tokens"]
                else "<repetition fired earlier>")
    if last["finish_reason"] == "length":
        return "max_tokens"
    if last["action_valid"] and last["tool_name"] == "submit":
        return "submitted"
    invalid = sum(1 for t in turns if t["tool_status"] == "invalid")
    if last["tool_status"] == "invalid" and invalid >= budgets["max_invalid_actions"]:
        return "invalid_action_limit"
    if len(turns) >= budgets["max_turns"]:
        return "max_turns"
    if row["truncation_source"] == "observation":
        return "max_tokens"
    room = min(budgets["max_new_tokens_per_turn"],
               budgets["max_new_tokens_per_episode"] - len(generated),
               budgets["max_context_tokens"] - row["n_tokens"])
    if room <= 0:
        return "max_tokens"
    return "<unexplained stop>"


def _check_flags(row) -> list[str]:
    stop, src = row["stop_reason"], row["truncation_source"]
    out = []
    if row["truncated"] != bool(src):
        out.append("truncated flag disagrees with truncation_source")
    if src == "max_turns" and stop != "max_turns":
        out.append("truncation_source max_turns but stop_reason is not max_turns")
    if src in ("max_tokens", "observation") and stop != "max_tokens":
        out.append(f"truncation_source {src} but stop_reason is not max_tokens")
    if stop in ("max_turns", "max_tokens") and not src:
        out.append(f"stop_reason {stop} without a truncation_source")
    if row["terminated"] != (stop in ("submitted", "repetition", "invalid_action_limit")):
        out.append("terminated flag disagrees with stop_reason")
    if row["infra_error"] != (stop == "infra_error"):
        out.append("infra_error flag disagrees with stop_reason")
    return out


def _check_reward(row, turns) -> list[str]:
    out = []
    n_valid = sum(1 for t in turns if t["action_valid"])
    fmt = format_reward(n_valid, len(turns))
    if abs(fmt - row["reward_format"]) > REWARD_TOL:
        out.append(f"reward_format {row['reward_format']} != {fmt}")
    length = length_fraction(row["n_trainable_tokens"], row["reward_t_max"])
    if abs(length - row["reward_length"]) > REWARD_TOL:
        out.append(f"reward_length {row['reward_length']} != {length}")
    known = rollout_outcome(row["stop_reason"], row["infra_error"], row["patch_ok"])
    outcome = row["reward_outcome"]
    if known is not None and outcome != known:
        out.append(f"reward_outcome {outcome} but the rollout forces {known}")
    if row["infra_error"] and outcome is not None:
        out.append("an infra_error rollout carries an outcome")
    expected = trajectory_reward(row["stop_reason"], row["infra_error"], outcome, fmt,
                                 row["n_trainable_tokens"], row["reward_t_max"],
                                 row["reward_lambda_fmt"], row["reward_alpha"])
    stored = row["reward"]
    if (expected is None) != (stored is None) or (
            expected is not None and abs(expected - stored) > REWARD_TOL):
        out.append(f"reward {stored} != recomputed {expected}")
    return out


def _check_verdict(row) -> list[str]:
    """`verdict_reason` agrees with the outcome it explains (module docstring)."""
    reason, outcome = row["verdict_reason"], row["reward_outcome"]
    if reason is None:
        if needs_verdict(row) and outcome is not None:
            return [f"reward_outcome {outcome} without a verdict_reason"]
        return []
    out = []
    if reason not in schemas.VERDICT_REASONS:
        out.append(f"verdict_reason {reason!r} is not a verdict reason")
    if row["stop_reason"] != "submitted" or row["infra_error"]:
        out.append(f"verdict_reason {reason!r} on a rollout that did not submit")
    elif not row["patch_ok"] and reason != "patch_rejected":
        out.append(f"verdict_reason {reason!r} but the patch policy refused the diff")
    want = None if reason == "infra_error" else float(reason == "none")
    if outcome != want:
        out.append(f"reward_outcome {outcome} but verdict_reason {reason!r} implies {want}")
    if row["verifier_version"] is None:
        out.append(f"verdict_reason {reason!r} without a verifier_version")
    return out
