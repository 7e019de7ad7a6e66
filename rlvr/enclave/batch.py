"""Verification of many candidate patches (SPEC §4): patch rows in, verdict rows out.

The `verify` / `selfcheck` stages and any training or evaluation loop call the same
functions; only the diff text of each candidate crosses into the enclave, only its verdict
comes back. This is the trusted side: the policy side (rlvr/agent, rlvr/engines,
rlvr/teachers, rlvr/train) never imports it, it only reads the verdict rows.

* `VerifyParams` / `load_params(path)` — the `verify` section of params.yaml (+ `sandbox`);
* `candidate_seed(seed, candidate_id)` — a candidate's verification seed, a function of its
  id (not its position), so verdicts don't change when the patches file is reordered or
  extended;
* `verify_patches(tasks, patches, params, sandbox) -> list[dict]` — one `schemas.VERDICTS`
  row per patch row, in the same order, with the verdict's measurements beside it
  (`schemas.VERDICT_TIMING_COLUMNS`: wall and CPU seconds, peak RSS);
* `write_verdicts(path, rows, timings_path=...)` — the verdicts without their measurements
  (same patches, params and verifier -> the same bytes, so a rerun does not make the stages
  that read verdicts stale) and the measurements to the timings sidecar
  (`schemas.VERDICT_TIMINGS`, `read_verdict_timings`);
* `summarize_verdicts(rows, timings=None)` — success rates (with and without infra errors
  in the denominator), reasons, per-origin rates; with `timings`, the seconds spent;
* `check_selfcheck(rows)` — a `reference` patch must pass and an `empty` one must fail, or
  `SelfCheckFailed`: a verifier that cannot tell them apart must stop the pipeline.
"""
from __future__ import annotations

import zlib
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from rlvr.artifacts import schemas
from rlvr.artifacts.io import read_table, write_tables
from rlvr.artifacts.timings import read_sidecar, sidecar_rows, timings_of
from rlvr.config import load_section
from rlvr.enclave.core import Enclave
from rlvr.errors import RlvrError, UnknownTaskError
from rlvr.progress import progress
from rlvr.sandbox.params import SandboxParams
from rlvr.seeds import derive_seed
from rlvr.tasks.model import Task


@dataclass(frozen=True)
class VerifyParams:
    seed: int = 1234
    consensus_runs: int = 3


class SelfCheckFailed(RlvrError):
    """The verifier disagreed with a patch whose verdict is known in advance."""


def load_params(path: Path) -> tuple[VerifyParams, SandboxParams]:
    return (load_section(VerifyParams, "verify", path),
            load_section(SandboxParams, "sandbox", path))


def candidate_seed(seed: int, candidate_id: str) -> int:
    return derive_seed(seed, zlib.crc32(candidate_id.encode()))


def verify_patches(tasks: Sequence[Task], patches: Sequence[Mapping], params: VerifyParams,
                   sandbox: SandboxParams, *, enclave: Enclave | None = None,
                   where: str = "patches") -> list[dict]:
    """A verdict row for every patch row (`schemas.PATCHES`: task_id, candidate_id, origin,
    patch), in input order. `enclave`: an open one to reuse (a training loop's); otherwise
    one is opened on `sandbox` for this call. A patch naming a task that `tasks` lacks is an
    UnknownTaskError naming the candidate and `where` (the patches file)."""
    by_id = {t.task_id: t for t in tasks}
    for row in patches:
        if row["task_id"] not in by_id:
            raise UnknownTaskError(f"{where}: candidate {row['candidate_id']} names task "
                                   f"'{row['task_id']}', which no given tasks file holds")
    items = [(by_id[r["task_id"]], r["patch"], candidate_seed(params.seed, r["candidate_id"]))
             for r in patches]
    with progress(len(items), "verify") as bar:
        if enclave is not None:
            verdicts = enclave.verify_many(items, progress=bar.update)
        else:
            with Enclave.for_sandbox(sandbox, consensus_runs=params.consensus_runs) as own:
                verdicts = own.verify_many(items, progress=bar.update)
    return [{
        "task_id": row["task_id"], "candidate_id": row["candidate_id"],
        "origin": row["origin"], "success": verdict.success, "reason": verdict.reason,
        "runs": verdict.runs, "verifier_version": verdict.verifier_version,
        "safety_flags": list(verdict.safety_flags), "seed": params.seed,
        **_measurements(verdict.wall_seconds, verdict.resources),
    } for row, verdict in zip(patches, verdicts)]


Verifier = Callable[[Sequence[Task], Sequence[Mapping]], list[dict]]


@contextmanager
def enclave_verifier(params: VerifyParams, sandbox: SandboxParams,
                     where: str = "grpo") -> Iterator[tuple[Verifier, Enclave]]:
    """An open enclave and `verify_patches` bound to it: the verifier a training loop is
    handed (it passes tasks and patch rows, gets verdict rows, never sees the enclave); the
    enclave itself for the caller's other verification (an evaluation beside the loop)."""
    with Enclave.for_sandbox(sandbox, consensus_runs=params.consensus_runs) as enclave:
        def verifier(tasks: Sequence[Task], patches: Sequence[Mapping]) -> list[dict]:
            return verify_patches(tasks, patches, params, sandbox, enclave=enclave, where=where)
        yield verifier, enclave


def _measurements(wall_seconds: float, resources: Mapping[str, Any]) -> dict[str, Any]:
    """A verdict's run-to-run-varying numbers (`schemas.VERDICT_TIMING_COLUMNS`); a verdict
    that ran no suite (an infra error before the first run) has no CPU or RSS figure."""
    cpu, rss = resources.get("cpu_seconds"), resources.get("max_rss_kb")
    return {"wall_seconds": float(wall_seconds),
            "cpu_seconds": None if cpu is None else float(cpu),
            "max_rss_kb": None if rss is None else int(rss)}


def verdict_timing_rows(rows: Sequence[Mapping]) -> list[dict]:
    """The `schemas.VERDICT_TIMINGS` rows of in-memory verdict rows (`verify_patches`)."""
    return sidecar_rows(rows, "candidate_id", schemas.VERDICT_TIMING_COLUMNS,
                        label="verdict", why="a verdict read from disk keeps them in the sidecar")


def write_verdicts(path: Path | str, rows: Sequence[Mapping], *,
                   timings_path: Path | str | None = None) -> None:
    """`rows` as `schemas.VERDICTS` (measurements left out) through the data contract, and
    with `timings_path` their measurements as `schemas.VERDICT_TIMINGS`; both tables are
    checked before either file is written."""
    parts = [(path, rows, schemas.VERDICTS, "verdicts")]
    if timings_path is not None:
        parts.append((timings_path, verdict_timing_rows(rows), schemas.VERDICT_TIMINGS,
                      "verdict_timings"))
    write_tables(parts)


def read_verdicts(path: Path | str) -> list[dict]:
    return read_table(path, schemas.VERDICTS, contract="verdicts").to_pylist()


def read_verdict_timings(path: Path | str) -> dict[str, dict]:
    """candidate_id -> its measurements, from a verdicts timings sidecar."""
    return read_sidecar(path, schemas.VERDICT_TIMINGS, "verdict_timings",
                        itemgetter("candidate_id"))


def _rates(rows: Sequence[Mapping]) -> dict:
    """success over all verdicts, and over those that are not infra errors (an infra error
    says nothing about the patch: it is counted apart, never as a failure)."""
    graded = [r for r in rows if r["reason"] != "infra_error"]
    return {
        "n": len(rows),
        "success_rate": sum(r["success"] for r in rows) / len(rows) if rows else 0.0,
        "infra_errors": len(rows) - len(graded),
        "success_rate_excluding_infra": (sum(r["success"] for r in graded) / len(graded)
                                         if graded else 0.0),
    }


def summarize_verdicts(rows: Sequence[Mapping],
                       timings: Mapping[str, Mapping] | None = None) -> dict:
    """The verify metrics. `timings` (candidate_id -> `schemas.VERDICT_TIMINGS` row:
    `read_verdict_timings`, or `{t["candidate_id"]: t for t in verdict_timing_rows(rows)}`)
    adds the seconds spent; without it they are left out."""
    by_origin = {origin: _rates([r for r in rows if r["origin"].split(":")[0] == origin])
                 for origin in sorted({r["origin"].split(":")[0] for r in rows})}
    overall = _rates(rows)
    out = {
        "verdicts": overall["n"],
        "success_rate": overall["success_rate"],
        "infra_errors": overall["infra_errors"],
        "success_rate_excluding_infra": overall["success_rate_excluding_infra"],
        "runs_total": sum(r["runs"] for r in rows),
        "reasons": dict(sorted(Counter(r["reason"] for r in rows).items())),
        "by_origin": by_origin,
    }
    if timings is not None:
        mine = timings_of(rows, timings, itemgetter("candidate_id"), "verdict(s)")
        out["wall_seconds_total"] = round(sum(t["wall_seconds"] for t in mine), 3)
        out["cpu_seconds_total"] = round(sum(t["cpu_seconds"] or 0.0 for t in mine), 3)
        out["max_rss_kb"] = max((t["max_rss_kb"] or 0 for t in mine), default=0)
    return out


def check_selfcheck(rows: Sequence[Mapping]) -> None:
    for r in rows:
        want = {"reference": True, "empty": False}.get(r["origin"])
        if want is not None and r["success"] != want:
            raise SelfCheckFailed(
                f"task '{r['task_id']}': {r['origin']} patch got success={r['success']} "
                f"(reason {r['reason']}), expected success={want}")
