"""Seed families: the small, well-tested repositories bugs are injected into.

Flat layout, one directory per family under the seed root:

    <family>/<package>/*.py     library code (what operators mutate)
    <family>/tests/test_*.py    the family's full suite (becomes every task's hidden suite)
    <family>/README.md ...      anything else outside tests/ ships with the repo snapshot

A family directory without a package module or without test files is not usable yet (the
seed families are authored separately) and is skipped with the reason recorded.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlvr.errors import TaskFormatError
from rlvr.tasks.model import files_hash

TESTS_DIR = "tests"
_SKIP_PARTS = {"__pycache__", ".git", ".pytest_cache", ".mypy_cache"}


@dataclass(frozen=True)
class SeedFamily:
    name: str
    repo_files: dict[str, str]      # everything outside tests/, paths relative to the family
    tests: dict[str, str]           # tests/* relative to tests/ (the hidden root)
    # Exact pins the family's code and suite import (a real library's test dependencies,
    # rlvr.authoring.synth.corpus_families); every task built from it carries them.
    dependencies: tuple[str, ...] = ()
    # From the seed state's own suite run (synth.pipeline.graded_family): hidden tests that
    # did not pass there before any bug, and hidden modules left out: they collected nothing.
    not_passing_on_seed: tuple[str, ...] = ()
    dropped_modules: tuple[str, ...] = ()

    @property
    def modules(self) -> list[str]:
        """Library modules that may be mutated (not tests, not top-level scripts)."""
        return sorted(p for p in self.repo_files if p.endswith(".py") and "/" in p)

    @property
    def package(self) -> str:
        """The import name the instructions speak of: the top directory (below `src/` in a
        src layout) holding the most modules, the first by name on a tie."""
        tops = [p.split("/")[1] if p.startswith("src/") and p.count("/") > 1
                else p.split("/")[0] for p in self.modules]
        return min(sorted(set(tops)), key=lambda t: -tops.count(t))

    @property
    def content_hash(self) -> str:
        files = {**self.repo_files, **{f"{TESTS_DIR}/{p}": c for p, c in self.tests.items()}}
        if self.dependencies:  # () adds nothing: the seed families' ids stay as they were
            files["<dependencies>"] = "\n".join(self.dependencies)
        return files_hash(files)


def read_tree(root: Path, *, strict: bool = True) -> dict[str, str]:
    """relative path -> text of the files under `root` (caches and bytecode left out).
    strict (a seed family, written for this repo): a symlink or a non-UTF-8 file is an
    error; not strict (an unpacked sdist, which ships compiled catalogues and images the
    task snapshot has no use for): they are skipped."""
    files = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if _SKIP_PARTS & set(rel.parts) or not path.is_file() or path.suffix in (".pyc", ".pyo"):
            continue
        if path.is_symlink():
            if not strict:
                continue
            raise TaskFormatError(f"{path}: symlinks are not allowed in a seed family")
        try:
            files[rel.as_posix()] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            if not strict:
                continue
            raise TaskFormatError(f"{path}: not a UTF-8 text file") from None
    return files


def load_family(root: Path | str) -> SeedFamily:
    root = Path(root)
    files = read_tree(root)
    prefix = TESTS_DIR + "/"
    tests = {p[len(prefix):]: c for p, c in files.items() if p.startswith(prefix)}
    repo = {p: c for p, c in files.items() if not p.startswith(prefix)}
    return SeedFamily(root.name, repo, tests)


def unusable_reason(family: SeedFamily) -> str | None:
    if not family.modules:
        return "no library module"
    if not any(p.rsplit("/", 1)[-1].startswith("test_") and p.endswith(".py")
               for p in family.tests):
        return "no tests/test_*.py"
    return None


def discover(seed_dir: Path | str, names: list[str] | tuple[str, ...] = ()) -> tuple[
        list[SeedFamily], dict[str, str]]:
    """(usable families in name order, {skipped family: reason}). Naming a family in `names`
    that does not exist is an error; an unusable named family is skipped like any other."""
    seed_dir = Path(seed_dir)
    if not seed_dir.is_dir():
        raise TaskFormatError(f"{seed_dir}: seed repository directory not found")
    present = sorted(p.name for p in seed_dir.iterdir() if p.is_dir()
                     and not p.name.startswith("."))
    for name in names:
        if name not in present:
            raise TaskFormatError(f"{seed_dir}/{name}: seed family not found")
    chosen = list(names) if names else present
    return usable([load_family(seed_dir / name) for name in sorted(chosen)])


def usable(families: list[SeedFamily]) -> tuple[list[SeedFamily], dict[str, str]]:
    """(the usable ones, in the given order; {unusable family: reason})."""
    kept, skipped = [], {}
    for family in families:
        reason = unusable_reason(family)
        if reason:
            skipped[family.name] = reason
        else:
            kept.append(family)
    return kept, skipped
