"""Helpers shared by the benchmarks: statistics, a realistic task built from a seed
repository (with a bug injected by a simple operator flip), result printing, and one arm
of an ours-vs-TRL comparison run in its own process."""
from __future__ import annotations

import json
import math
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rlvr.tasks.patches import make_patch  # noqa: E402
from rlvr.tasks.model import Task  # noqa: E402

DEFAULT_SEED_REPO = ROOT / "data" / "seed_repos" / "caching"
# What a `make pipeline` checkout holds for the evaluation pool (stage `evaluate`'s --tasks).
PIPELINE_TASKS = ("artifacts/tasks_authored.parquet", "artifacts/tasks_synthetic.parquet")
_FLIPS = [(" < ", " <= "), (" <= ", " < "), (" > ", " >= "), (" >= ", " > "), (" + 1", " + 2"),
          (" - 1", " - 2"), (" == ", " != ")]


def pipeline_pool(root: Path = ROOT) -> list[Path]:
    """The task Parquets of a `make pipeline` checkout at `root`."""
    return [root / name for name in PIPELINE_TASKS]


def evaluation_sets(root: Path, evalp, tiers=None) -> list:
    """Stage `evaluate`'s seeded sets over `root`'s pool, with `evalp`'s tier sizes (a
    bench's override included), only `tiers` where given: the same tasks and sample seeds the
    pipeline evaluated, so a bench's rows pair with the pipeline's."""
    from rlvr.evaluate.sets import build_sets
    from rlvr.tasks.pool import select_tasks

    sets = build_sets(select_tasks(pipeline_pool(root), "", 0, evalp.seed),
                      evalp.tasks_per_tier, evalp.seed)
    return [s for s in sets if tiers is None or s.tier in tiers]


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


def grpo_scratch_run(root: Path, base: Path, params, rollout, sandbox, verifier):
    """Stage `grpo`'s loop on `root`'s task pool (the split and sample `params` name) into a
    throwaway directory: (its `GRPOResult`, every step's logged metrics, the pool's size)."""
    import tempfile

    from rlvr.tasks.pool import select_tasks
    from rlvr.train.grpo import train_grpo

    tasks = select_tasks(pipeline_pool(root), params.split, params.max_tasks, params.seed)
    logged: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        result = train_grpo(base, tasks, params, rollout, sandbox, Path(tmp) / "out",
                            Path(tmp) / "work", verifier=verifier,
                            log=lambda step, m: logged.append(dict(m)))
    return result, logged, len(tasks)


def mismatch(a: list[list[float]], b: list[list[float]]) -> dict:
    """|Δ logp| between two logprob lists per sample (e.g. a sampler's recorded behaviour
    logprobs and a teacher-forced rescoring of the same tokens), over every token pair."""
    diffs = [abs(x - y) for xs, ys in zip(a, b) for x, y in zip(xs, ys)]
    if not diffs:
        return {"tokens": 0, "max_abs": None, "mean_abs": None}
    return {"tokens": len(diffs), "max_abs": max(diffs), "mean_abs": math.fsum(diffs) / len(diffs),
            "frac_gt_1e-3": sum(d > 1e-3 for d in diffs) / len(diffs)}


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


CORPUS_CACHE = ROOT / "data" / "real" / ".cache"
# The project files a library's suite configuration lives in (rlvr.tasks.project_config reads them).
PROJECT_CONFIG_FILES = ("pyproject.toml", "setup.cfg", "tox.ini", "pytest.ini")


@dataclass(frozen=True)
class Library:
    """A corpus library as a bench task source: its package files plus project config (the
    repository snapshot), its upstream test files keyed relative to their test directory (the
    hidden suite, unchanged), and its declared dependency pins (the task env)."""

    label: str
    sources: dict[str, str]
    tests: dict[str, str]
    dependencies: tuple[str, ...]


def read_library(name: str) -> Library:
    """The pinned corpus library `name` (data/real/corpus.toml), read from the cache that
    scripts/fetch_corpus.py fills; a missing entry or an unfetched cache is a clear exit."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fetch_corpus", ROOT / "scripts" / "fetch_corpus.py")
    fc = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fetch_corpus", fc)  # its dataclasses look their module up
    spec.loader.exec_module(fc)
    libs = {lib.name: lib for lib in fc.load_lock().libraries}
    if name not in libs:
        raise SystemExit(f"--library {name!r}: not in data/real/corpus.toml (have {', '.join(sorted(libs))})")
    lib = libs[name]
    src = CORPUS_CACHE / "src" / f"{lib.name}-{lib.version}"
    if not src.is_dir():
        raise SystemExit(f"{src}: not fetched; run: python scripts/fetch_corpus.py")
    test_roots = [src / t for t in lib.tests]
    sources: dict[str, str] = {}
    tests: dict[str, str] = {}
    for file in sorted(p for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        rel = file.relative_to(src).as_posix()
        root = next((t for t in test_roots if file == t or t in file.parents), None)
        if root is not None:
            if file.suffix == ".py":
                key = file.name if file == root else file.relative_to(root).as_posix()
                tests[key] = file.read_text(encoding="utf-8")
        elif rel in PROJECT_CONFIG_FILES or (_in_package(file, src) and file.suffix in (".py", ".typed")):
            sources[rel] = file.read_text(encoding="utf-8")
    if not tests or not any(p.endswith(".py") for p in sources):
        raise SystemExit(f"{src}: found no package sources or no tests ({lib.tests})")
    return Library(f"{lib.name}-{lib.version}", sources, tests, tuple(lib.dependencies))


def _in_package(file: Path, top: Path) -> bool:
    """Inside an importable package directory (one with __init__.py up to `top`'s child)."""
    parent = file.parent
    if parent == top:
        return False
    while parent != top:
        if not (parent / "__init__.py").is_file():
            return False
        parent = parent.parent
    return True


def bug_candidates(sources: dict[str, str], *, include_init: bool = False):
    """(path, buggy_text) for single operator flips, in a fixed order. Only `.py` files;
    `__init__.py` is skipped unless `include_init` (a real library may keep all its code
    there, e.g. inflection)."""
    for path in sorted(sources):
        if not path.endswith(".py") or (path.endswith("__init__.py") and not include_init):
            continue
        text = sources[path]
        for old, new in _FLIPS:
            for m in re.finditer(re.escape(old), text):
                yield path, text[: m.start()] + new + text[m.end():]


def make_task(task_id: str, family: str, fixed: dict[str, str], buggy_path: str, buggy_text: str,
              hidden: dict[str, str], dependencies: tuple[str, ...] = ()) -> Task:
    buggy = {**fixed, buggy_path: buggy_text}
    return Task(task_id=task_id, family=family, instruction="fix the bug", repo_files=buggy,
                public_tests=(), hidden_tests=hidden, reference_patch=make_patch(buggy, fixed),
                dependencies=tuple(dependencies))


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
