"""Helpers shared by the benchmarks: statistics, a realistic task built from a seed
repository (with a bug injected by a simple operator flip), result printing, and one arm
of an ours-vs-TRL comparison run in its own process."""
from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rlvr.tasks.patches import make_patch  # noqa: E402
from rlvr.tasks.model import Task  # noqa: E402

DEFAULT_SEED_REPO = ROOT / "data" / "seed_repos" / "caching"
_FLIPS = [(" < ", " <= "), (" <= ", " < "), (" > ", " >= "), (" >= ", " > "), (" + 1", " + 2"),
          (" - 1", " - 2"), (" == ", " != ")]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary(values: list[float]) -> dict:
    return {"median_s": round(statistics.median(values), 4), "p90_s": round(percentile(values, 0.9), 4),
            "n": len(values)}


def read_seed_repo(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(package sources, tests) of a seed repository: tests/ becomes the hidden suite."""
    sources: dict[str, str] = {}
    tests: dict[str, str] = {}
    for file in sorted(path.rglob("*.py")):
        rel = file.relative_to(path).as_posix()
        if "__pycache__" in rel:
            continue
        if rel.startswith("tests/"):
            tests[rel[len("tests/"):]] = file.read_text()
        else:
            sources[rel] = file.read_text()
    if not sources or not tests:
        raise SystemExit(f"{path}: expected a package and a tests/ directory")
    return sources, tests


def bug_candidates(sources: dict[str, str]):
    """(path, buggy_text) for single operator flips, in a fixed order."""
    for path in sorted(sources):
        if path.endswith("__init__.py"):
            continue
        text = sources[path]
        for old, new in _FLIPS:
            for m in re.finditer(re.escape(old), text):
                yield path, text[: m.start()] + new + text[m.end():]


def make_task(task_id: str, family: str, fixed: dict[str, str], buggy_path: str, buggy_text: str,
              hidden: dict[str, str]) -> Task:
    buggy = {**fixed, buggy_path: buggy_text}
    return Task(task_id=task_id, family=family, instruction="fix the bug", repo_files=buggy,
                public_tests=(), hidden_tests=hidden, reference_patch=make_patch(buggy, fixed))


def emit(summary_obj: dict) -> None:
    """Benchmarks end with one machine-readable JSON line."""
    print(json.dumps(summary_obj, sort_keys=True))


def run_side(a, ours, trl) -> None:
    """One arm of an ours-vs-TRL bench in this (fresh) process: `a.side` picks `ours` or `trl`,
    called as fn(model_dir, data, a) on `a.data` (JSON); prints its result with this
    process's peak RSS, so each arm's memory is its own."""
    import resource

    import torch

    torch.set_num_threads(a.threads)
    data = json.loads(Path(a.data).read_text())
    res = (ours if a.side == "ours" else trl)(Path(a.model), data, a)
    res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(res))
