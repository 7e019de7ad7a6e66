"""`rlvr metrics`: the stages' DVC metrics (their headline numbers) one per line, optionally
beside another revision; `--details`: every metric, from the stages' details files.

Why: `dvc metrics show` prints every metric of every file as one table row per file, so
this project's ten metrics files make a table ~14,000 characters wide that no terminal
shows. The numbers are read through DVC's own API (`Repo.metrics.show`, the engine behind
`dvc metrics show/diff`), so revisions, experiments and the files' paths mean exactly what
they mean to DVC; only the layout differs: long (file, metric, value) instead of wide.
"""
from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from rlvr.errors import RlvrError
from rlvr.tracking.headline import DETAILS_DIR


@dataclass(frozen=True)
class MetricRow:
    file: str
    key: str            # dotted path inside the file, e.g. rules.contract_compliance
    value: Any          # the workspace's value (None: absent there)
    other: Any = None   # the value at `rev` when compared (None: absent there)


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            flat.update(flatten(value, name))
        else:
            flat[name] = value
    return flat


def _by_file(result: Mapping[str, Any], rev: str) -> dict[str, dict[str, Any]]:
    entry = result.get(rev, {})
    if "error" in entry:
        raise RlvrError(f"metrics at {rev!r}: {entry['error']}")
    return {path: flatten(body["data"]) if "data" in body
            else {"<unreadable>": _error_line(body.get("error"))}
            for path, body in entry.get("data", {}).items()}


def _error_line(error: Any) -> str:
    text = str(error or "no data").strip().splitlines()
    return text[-1] if text else "no data"


def _details_by_file(root: Path | str, rev: str | None) -> dict[str, dict[str, Any]]:
    """The stages' details files (`reports/stages/*.json`, git-tracked DVC outs, not DVC
    metrics) of the workspace (`rev` None) or of a revision, read through DVC's filesystem."""
    from dvc.api import DVCFileSystem

    try:
        fs = DVCFileSystem(str(root), rev=rev)
        paths = sorted(fs.glob(f"{DETAILS_DIR}/*.json"))
        return {str(p).lstrip("/"): flatten(json.loads(fs.read_text(p))) for p in paths}
    except Exception as exc:  # DVC's and git's errors: one line naming the revision
        raise RlvrError(f"{DETAILS_DIR}{f' at {rev}' if rev else ''}: {exc}") from None


def metric_rows(root: Path | str = ".", rev: str | None = None,
                patterns: Iterable[str] = (), details: bool = False) -> list[MetricRow]:
    """Every metric of the workspace (and of `rev`), in DVC's file order; `patterns`
    (fnmatch on "file:key" or on the key alone) keep only what matches. `details`: the
    stages' details files instead of the headline metrics DVC shows."""
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    if details:
        here = _details_by_file(root, None)
        there = _details_by_file(root, rev) if rev else {}
    else:
        try:
            with Repo(str(root)) as repo:
                result = repo.metrics.show(revs=["workspace", *([rev] if rev else [])])
        except DvcException as exc:
            raise RlvrError(f"dvc metrics{f' --rev {rev}' if rev else ''}: {exc}") from None
        here = _by_file(result, "workspace")
        there = _by_file(result, rev) if rev else {}
    patterns = list(patterns)
    rows = []
    for path in dict.fromkeys([*here, *there]):
        keys = dict.fromkeys([*here.get(path, {}), *there.get(path, {})])
        for key in keys:
            if patterns and not any(fnmatch.fnmatch(f"{path}:{key}", p) or fnmatch.fnmatch(key, p)
                                    for p in patterns):
                continue
            rows.append(MetricRow(path, key, here.get(path, {}).get(key),
                                  there.get(path, {}).get(key)))
    return rows


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def render(rows: list[MetricRow], rev: str | None = None, changed_only: bool = False) -> str:
    """Grouped by file, one metric per line: `key  value` or `key  value  rev-value  delta`."""
    if changed_only:
        rows = [r for r in rows if r.value != r.other]
    width = max((len(r.key) for r in rows), default=0) + 2
    lines: list[str] = []
    if rev:
        lines.append(f"{'':{width + 2}}{'workspace':>14}  {rev:>14}  {'change':>12}")
    current = None
    for r in rows:
        if r.file != current:
            current = r.file
            lines.append(r.file)
        line = f"  {r.key:<{width}}{_shown(r.value):>14}"
        if rev:
            line += f"  {_shown(r.other):>14}"
            numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool)
                          for v in (r.value, r.other))
            line += f"  {(r.value - r.other):>+12.6g}" if numeric else \
                f"  {'' if r.value == r.other else 'changed':>12}"
        lines.append(line.rstrip())
    return "\n".join(lines) + ("\n" if lines else "")
