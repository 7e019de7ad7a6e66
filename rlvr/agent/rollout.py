"""Resumable rollouts: tasks -> groups of G multi-turn episodes -> rollout passports (SPEC §3).

The `rollout` stage and any training or evaluation loop call the same `roll_out`: the stage
has its engine built from params (`open_engine`), a training loop passes the engine (and
sandbox) it already holds and a `sampling_round` per re-sampling of the same tasks.

* `RolloutParams` / `load_params(path)` — the `rollout` section of params.yaml (+ `sandbox`);
* `roll_out(tasks, params, sandbox_params, parts_root, engine=... | open_engine=...)` —
  every passport row, in a fixed order (task order, then sample index). The engine named by
  `rollout.engine` is built above the agent (`rlvr.teachers.acting.open_engine`: token
  engines and teachers alike), so the caller hands it in, or the function that builds it;
* `patch_rows(rows)` — the submitted diffs the extraction policy passed, as `schemas.PATCHES`
  rows (candidate_id = trajectory_id) for the verifier;
* `summarize(rows, timings=None)` — stop-reason rates, parse errors, lengths, tokens, tool
  statuses; with `timings` (trajectory_id -> `schemas.TRAJECTORY_TIMINGS` row) tool seconds.

The rows carry their timing fields (`passport.passport_row`); the stage writes them to the
timings sidecar, apart from the passports (`passport.write_trajectories`).

Resumable: each finished group (token engines: each finished wave of groups) is written
atomically as its own Parquet shard (`schemas.TRAJECTORY_SHARD`: passports with their
timings) under `parts_root/<fingerprint>/`, where the fingerprint covers params, sandbox,
tasks, policy version and step, environment version, tokenizer and sampling round; a rerun
after an interruption skips what is on disk, and the rows are assembled from the shards in a
fixed order — identical (up to wall-clock columns) to an uninterrupted run.
"""
from __future__ import annotations

import hashlib
import json
import statistics
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any, Callable, Literal, Mapping

import pyarrow as pa

from rlvr.agent.collector import Collector, GroupResult, ScheduleParams, group_id_for
from rlvr.agent.episode import Budgets, EpisodeConfig, env_version
from rlvr.agent.passport import (check_alignment, needs_verdict, parse_error_rate,
                                 passport_row, rebuild_check)
from rlvr.agent.repetition import RepetitionParams
from rlvr.agent.codecs import load_codec
from rlvr.agent.grammar import check_grammar_format
from rlvr.artifacts import schemas
from rlvr.artifacts.digest import file_sha256
from rlvr.artifacts.io import read_table, write_table
from rlvr.artifacts.timings import timings_of
from rlvr.config import as_dict, load_section
from rlvr.engines.base import Decoding, TokenEngine
from rlvr.errors import ConfigError, RlvrError
from rlvr.progress import progress
from rlvr.rl.reward import RewardParams
from rlvr.sandbox import get_sandbox
from rlvr.sandbox.params import SandboxParams
from rlvr.tasks.model import Task


@dataclass(frozen=True)
class TeacherParams:
    """`rollout.teacher`: the scripted teacher's constructor arguments
    (`rlvr.teachers.acting.build_acting_engine`)."""

    noise: float = 0.2  # share of scripted-teacher episodes that submit a wrong/partial fix
    # rank guesses by the synthesis provenance (file/function/operator/line) too: a student
    # never sees it, so SFT demonstrations are made without it (recorded in policy_version)
    hints: bool = False
    # view the suspect function before editing (default: edit the flagged line at once)
    view: bool = False
    # terse: "Flip a comparison." | explain: names the flagged file:line it acts on
    reasoning: str = "terse"
    # how its edits name a line: "line" (path + line number), "suspect" (the rank in the
    # last run_tests' suspicious lines, where the line is listed, then `old` -> `new`) or "fix"
    # (the rank and a named rewrite, rlvr.agent.fixes, where one makes the edit: nothing for a
    # student to copy)
    address: Literal["line", "suspect", "fix"] = "line"


@dataclass(frozen=True)
class ToolsParams:
    # run_tests through one warm sandboxed pytest fork-server per episode (same mounts,
    # isolation and observation as the cold path; it falls back to cold where it cannot)
    warm: bool = True


@dataclass(frozen=True)
class RolloutParams:
    engine: Literal["scripted", "torch", "vllm", "openai"] = "scripted"
    model_dir: str = "models/policy-init"  # tokenizer for every engine; weights for torch
    policy_version: str = ""               # override the engine's own version string
    split: str = "train"                   # "" = every split
    max_tasks: int = 0                     # 0 = all tasks of the split (seeded sample otherwise)
    group_size: int = 4                    # G rollouts per task
    seed: int = 0
    workers: int = 2                       # tool thread pool / concurrent teacher episodes
    groups_per_wave: int = 8               # token engines: groups batched together
    # token engines: cohorts of one generate call each, or one continuous decode per wave
    schedule: ScheduleParams = field(default_factory=ScheduleParams)
    decoding: Decoding = field(default_factory=Decoding)
    budgets: Budgets = field(default_factory=Budgets)
    repetition: RepetitionParams = field(default_factory=RepetitionParams)
    reward: RewardParams = field(default_factory=RewardParams)
    teacher: TeacherParams = field(default_factory=TeacherParams)
    tools: ToolsParams = field(default_factory=ToolsParams)
    engine_options: dict[str, Any] = field(default_factory=dict)


class RolloutFailed(RlvrError):
    """A rollout passport failed its own rebuild check (a harness bug: nothing is written)."""


def load_params(path: Path) -> tuple[RolloutParams, SandboxParams]:
    """The `rollout` and `sandbox` sections of `path`; every bad value a ConfigError."""
    try:
        params = load_section(RolloutParams, "rollout", path)
    except ValueError as exc:
        if isinstance(exc, RlvrError):
            raise
        raise ConfigError(f"{path}: rollout: {exc}") from None
    if params.group_size < 1 or params.workers < 1 or params.groups_per_wave < 1:
        raise ConfigError(f"{path}: rollout.group_size, workers and groups_per_wave must be >= 1")
    if params.max_tasks < 0:
        raise ConfigError(f"{path}: rollout.max_tasks must be >= 0")
    return params, load_section(SandboxParams, "sandbox", path)


def fingerprint(params: RolloutParams, sandbox: SandboxParams, tasks: list[Task],
                policy_version: str, codec_source: Path, sampling_round: int = 0, *,
                policy_step: int = 0, env: str = "") -> str:
    """What a checkpoint shard depends on: reuse shards only when all of it is unchanged.
    `policy_step` is in it beside `policy_version`: every passport records both, so shards
    of the same weights at another ordinal (a training loop restarted from a checkpoint
    that renumbered its steps) are not reused under the wrong step."""
    h = hashlib.sha256()
    h.update(json.dumps({"params": as_dict(params), "sandbox": as_dict(sandbox),
                         "env": env or env_version(), "policy": policy_version,
                         "policy_step": policy_step, "round": sampling_round},
                        sort_keys=True, default=str).encode())
    for task in tasks:
        h.update(f"{task.task_id}\0{task.hashes()['content_hash']}\0".encode())
    tok = codec_source / "tokenizer.json"
    if tok.is_file():
        h.update(file_sha256(tok).encode())
    return h.hexdigest()[:16]


def part_path(parts: Path, group_id: str) -> Path:
    return parts / f"{hashlib.sha256(group_id.encode()).hexdigest()[:24]}.parquet"


def write_shard(path: Path, rows: list[dict]) -> None:
    """A checkpoint shard: passports and their timings in one file (schema + alignment; the
    data contract runs once, on the assembled artifact)."""
    table = pa.Table.from_pylist(rows, schema=schemas.TRAJECTORY_SHARD)
    check_alignment(table, str(path))
    write_table(path, table, schemas.TRAJECTORY_SHARD)


def read_shard(path: Path) -> list[dict]:
    table = read_table(path, schemas.TRAJECTORY_SHARD)
    check_alignment(table, str(path))
    return table.to_pylist()


def roll_out(tasks: list[Task], params: RolloutParams, sandbox_params: SandboxParams,
             parts_root: Path | None, *, engine=None,
             open_engine: Callable[[RolloutParams, str], Any] | None = None, sandbox=None,
             sampling_round: int = 0, on_group_written: Callable[[str], None] | None = None,
             stats: dict | None = None) -> list[dict]:
    """Run (or resume) the rollouts of `tasks`; return every passport row in a fixed order.

    The engine: `engine`, a live one (a training loop's policy engine), or else the one
    `open_engine` builds from `params` (`rlvr.teachers.acting.open_engine`: engines are built
    by kind above the agent); an engine built here is closed here.
    `sandbox`: an open sandbox to use instead of one made from `sandbox_params`.
    `sampling_round`: the r-th sampling of these tasks with these params — mixed into group
    and trajectory ids and every seed (round 0: `<task_id>@s<seed>`), so re-sampling with
    unchanged weights neither replays nor collides with an earlier round.
    `parts_root`: where checkpoint shards live (None: a temporary directory, no resumption).
    `stats` (if given) receives what this run spent: generate calls / seconds / prompts,
    wall seconds, the engine's busy fraction and the number of groups resumed from disk."""
    if sampling_round < 0:
        raise ConfigError(f"sampling_round must be >= 0 (got {sampling_round})")
    if engine is None and open_engine is None:
        raise TypeError("roll_out needs a live `engine` or `open_engine` to build one")
    codec = load_codec(params.model_dir)
    check_grammar_format(params.decoding.grammar, codec.format.name, "rollout.decoding.grammar")
    if sandbox is None:
        sandbox = get_sandbox(sandbox_params.backend, **sandbox_params.options())
    owned = engine is None
    engine = open_engine(params, codec.format.name) if owned else engine
    try:
        if parts_root is None:
            with tempfile.TemporaryDirectory(prefix="rlvr-rollout-parts-") as tmp:
                return _roll_out(tasks, params, sandbox_params, Path(tmp), engine, sandbox,
                                 codec, sampling_round, on_group_written, stats)
        return _roll_out(tasks, params, sandbox_params, Path(parts_root), engine, sandbox,
                         codec, sampling_round, on_group_written, stats)
    finally:
        if owned:
            engine.close()  # TokenEngine and Teacher both state it: e.g. stop a vLLM server


def _roll_out(tasks, params, sandbox_params, parts_root, engine, sandbox, codec,
              sampling_round, on_group_written, stats) -> list[dict]:
    config = EpisodeConfig(codec=codec, budgets=params.budgets, decoding=params.decoding,
                           repetition=params.repetition, reward=params.reward,
                           sandbox=sandbox, limits=sandbox_params.limits.to_limits(),
                           warm_tests=params.tools.warm, run_seed=params.seed)
    step = engine.policy_step if isinstance(engine, TokenEngine) else 0  # teachers: 0
    parts = parts_root / fingerprint(params, sandbox_params, tasks, engine.policy_version,
                                     Path(params.model_dir), sampling_round, policy_step=step,
                                     env=env_version(codec))
    parts.mkdir(parents=True, exist_ok=True)
    gids = [group_id_for(t.task_id, params.seed, sampling_round) for t in tasks]
    done = {g for g in gids if part_path(parts, g).is_file()}
    collector = Collector(engine, config, group_size=params.group_size,
                          workers=params.workers, groups_per_wave=params.groups_per_wave,
                          sampling_round=sampling_round, schedule=params.schedule)
    with progress(len(tasks), "rollout") as bar:
        bar.update(len(done))

        def write_group(result: GroupResult) -> None:
            rows = [passport_row(ep) for ep in result.episodes]
            for row in rows:
                problems = rebuild_check(row)
                if problems:
                    raise RolloutFailed(f"rollout {row['trajectory_id']}: passport does not "
                                        f"rebuild: {'; '.join(problems[:3])}")
            write_shard(part_path(parts, result.group_id), rows)  # + rebuild checks above
            bar.update(1)
            if on_group_written is not None:
                on_group_written(result.group_id)

        collector.run(tasks, done=done, on_group=write_group)
    if stats is not None:
        stats.update({k: round(v, 3) if isinstance(v, float) else v
                      for k, v in collector.stats.items()})
        stats["generate_busy_fraction"] = round(
            collector.stats["generate_seconds"] / collector.stats["wall_seconds"], 4) \
            if collector.stats["wall_seconds"] else 0.0
        stats["groups_resumed"] = len(done)
    rows: list[dict] = []
    for gid in gids:
        group = read_shard(part_path(parts, gid))
        rows += sorted(group, key=lambda r: r["sample_index"])
    return rows


def patch_rows(rows: list[dict]) -> list[dict]:
    """The verifier's work: the diff of every rollout that submitted one the extraction
    policy passed (the others' outcomes are already decided)."""
    return [{"task_id": r["task_id"], "candidate_id": r["trajectory_id"],
             "origin": f"rollout:{r['trajectory_id']}", "patch": r["patch"]}
            for r in rows if needs_verdict(r)]


def summarize(rows: list[dict], timings: Mapping[str, Mapping[str, Any]] | None = None
              ) -> dict[str, Any]:
    """The rollout metrics of passport rows. `timings` (trajectory_id -> its
    `schemas.TRAJECTORY_TIMINGS` row: `passport.read_trajectory_timings`, or
    `{t["trajectory_id"]: t for t in timing_rows(rows)}` in memory) adds the wall-clock
    numbers; without it they are left out (a passport holds no clock)."""
    n = len(rows)
    turns = [t for r in rows for t in r["turns"]]
    gen = [r["n_trainable_tokens"] for r in rows]
    total = [r["n_tokens"] for r in rows]
    nturns = [r["n_turns"] for r in rows]

    def dist(values: list[int]) -> dict[str, float]:
        if not values:
            return {"mean": 0.0, "median": 0.0, "p90": 0.0, "max": 0.0}
        ordered = sorted(values)
        return {"mean": round(statistics.fmean(values), 3),
                "median": float(statistics.median(values)),
                "p90": float(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]),
                "max": float(ordered[-1])}

    stops = Counter(r["stop_reason"] for r in rows)
    submitted = [r for r in rows if r["stop_reason"] == "submitted"]
    out = {
        "rollouts": n,
        "groups": len({r["group_id"] for r in rows}),
        "tasks": len({r["task_id"] for r in rows}),
        "stop_reasons": {k: round(stops.get(k, 0) / n, 4) if n else 0.0
                         for k in schemas.STOP_REASONS},
        "truncated_rate": round(sum(r["truncated"] for r in rows) / n, 4) if n else 0.0,
        "infra_error_rate": round(sum(r["infra_error"] for r in rows) / n, 4) if n else 0.0,
        "parse_error_rate": round(parse_error_rate(rows), 4),
        "action_errors": dict(sorted(Counter(t["action_error_kind"] for t in turns
                                             if not t["action_valid"]).items())),
        "tool_calls": dict(sorted(Counter(t["tool_name"] for t in turns if t["tool_name"])
                                  .items())),
        "tool_status": dict(sorted(Counter(t["tool_status"] for t in turns).items())),
        "observation_truncated_rate": round(sum(t["observation_truncated"] for t in turns)
                                            / len(turns), 4) if turns else 0.0,
        "patch_ok_rate_submitted": round(sum(r["patch_ok"] for r in submitted)
                                         / len(submitted), 4) if submitted else 0.0,
        "turns": dist(nturns),
        "generated_tokens": dist(gen),
        "total_tokens": dist(total),
        "tokens_generated_sum": sum(gen),
        "tokens_total_sum": sum(total),
    }
    if timings is not None:
        mine = timings_of(rows, timings, itemgetter("trajectory_id"), "trajectory(ies)")
        out["tool_seconds_sum"] = round(sum(s for t in mine for s in t["tool_latency_s"]), 3)
        out["episode_seconds"] = dist([t["wall_seconds"] for t in mine])
    return out
