"""Timings sidecars: the run-to-run-varying measurements of an artifact's rows, kept apart.

An artifact is a function of its inputs; seconds and RSS are not. So rollout passports,
verdicts and eval rows carry their measurements in memory beside the row, and are written
in two files (`io.timings_path`): the artifact without them (same inputs, same bytes) and
its sidecar keyed by the row's id (`schemas`: TRAJECTORY_TIMINGS, VERDICT_TIMINGS,
EVAL_TIMINGS). The three kinds share these moves, written once here:

* `sidecar_rows(rows, key, columns, ...)` — the sidecar rows of in-memory rows;
* `read_sidecar(path, schema, contract, key)` — id -> sidecar row, from the file;
* `timings_of(rows, timings, key, plural)` — each row's sidecar row, in row order, or an
  ArtifactError when one has none (the files do not belong together).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence

import pyarrow as pa

from rlvr.artifacts.io import read_table
from rlvr.errors import ArtifactError

Key = Callable[[Mapping[str, Any]], Hashable]


def sidecar_rows(rows: Iterable[Mapping[str, Any]], key: str, columns: Sequence[str], *,
                 label: str, why: str) -> list[dict[str, Any]]:
    """`{key: ..., <columns>...}` of each row; a row lacking a column is an ArtifactError
    "<label> <id>: no timing field(s) [...] (<why>)" — a row read back from its artifact has
    none, `why` says so in the caller's words."""
    out = []
    for r in rows:
        missing = [c for c in columns if c not in r]
        if missing:
            raise ArtifactError(f"{label} {r.get(key)!r}: no timing field(s) {missing} ({why})")
        out.append({key: r[key], **{c: r[c] for c in columns}})
    return out


def read_sidecar(path: Path | str, schema: pa.Schema, contract: str,
                 key: Key) -> dict[Hashable, dict[str, Any]]:
    """id (`key` of a sidecar row) -> that row, read through the sidecar's contract."""
    return {key(r): r for r in read_table(path, schema, contract=contract).to_pylist()}


def timings_of(rows: Iterable[Mapping[str, Any]], timings: Mapping[Hashable, Mapping[str, Any]],
               key: Key, plural: str) -> list[Mapping[str, Any]]:
    """The sidecar row of each of `rows` (by `key`), in order; rows without one are an
    ArtifactError "no timings for <n> <plural>, e.g. <id>"."""
    rows = list(rows)
    missing = [key(r) for r in rows if key(r) not in timings]
    if missing:
        raise ArtifactError(f"no timings for {len(missing)} {plural}, e.g. {missing[0]!r}")
    return [timings[key(r)] for r in rows]
