"""A fetched real library (rlvr.authoring.corpus) as a seed family for bug injection (SPEC §2).

Real code nobody here wrote, with its upstream suite unchanged, so that held-out evaluation
includes it. What goes where:

- repo snapshot (what the agent sees and operators mutate): the library's packages — every
  top-level directory holding an `__init__.py` (flat layout) or everything under `src/` —
  as `.py` files only (no locale catalogues or data: they would fill the agent's context, and
  a test needing one simply does not pass on the seed state, so it grades nothing); the
  project's pytest configuration files (pytest reads them; rlvr.tasks.project_config honours
  `pythonpath`/src layouts and drops `addopts` the sandbox cannot run); its licence files.
- hidden suite: every text file under the lock's `tests` paths, keyed relative to that path
  (a public copy lands at `tests/<key>`, which is where most upstream suites live anyway). A
  `__init__.py` at a test root only made it a package of the library and is left out; two
  roots with the same file name are a lock error naming the library.
- dependencies: the lock's exact pins (built offline from the corpus wheelhouse).

The family is named after the library, so splits stay family-level (`split.heldout_families`
can hold a whole library out).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from rlvr.errors import ConfigError
from rlvr.sandbox.envs import parse_dependencies
from rlvr.authoring.corpus import CorpusLockError, Library, Lock, source_dir
from rlvr.authoring.synth.seeds import SeedFamily, read_tree, usable

CONFIG_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
_NOT_PACKAGES = {"tests", "test", "docs", "doc", "benchmark", "benchmarks", "scripts", "tools"}


def package_dirs(root: Path, layout: str) -> list[str]:
    """Top-level import packages of an unpacked sdist, as root-relative directories."""
    base = root / "src" if layout == "src" else root
    if not base.is_dir():
        return []
    found = sorted(p.name for p in base.iterdir()
                   if p.is_dir() and (p / "__init__.py").is_file() and p.name not in _NOT_PACKAGES
                   and not p.name.endswith(".egg-info"))
    return [f"src/{name}" if layout == "src" else name for name in found]


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def corpus_family(lib: Library, root: Path | str) -> SeedFamily:
    """The seed family of `lib` unpacked at `root` (scripts/fetch_corpus.py puts it there)."""
    root = Path(root)
    if not root.is_dir():
        raise CorpusLockError(f"library '{lib.name}': {root} not found (fetch the corpus: "
                              "python scripts/fetch_corpus.py)")
    tree = read_tree(root, strict=False)
    test_roots = [t.rstrip("/") for t in lib.tests]
    repo: dict[str, str] = {}
    for pkg in package_dirs(root, lib.layout):
        repo.update({p: c for p, c in tree.items()
                     if p.startswith(pkg + "/") and p.endswith(".py")
                     and not _under(p, test_roots)})
    if not repo:
        raise CorpusLockError(f"library '{lib.name}': no import package found "
                              f"({'src/<pkg>' if lib.layout == 'src' else '<pkg>'}/__init__.py)")
    repo.update({name: tree[name] for name in CONFIG_FILES if name in tree})
    for rel in lib.licence_files:
        if rel not in tree:
            raise CorpusLockError(f"library '{lib.name}': licence file {rel} is not in {root}")
        repo[rel] = tree[rel]
    tests: dict[str, str] = {}
    for test_root in test_roots:
        for path, text in tree.items():
            if path == test_root:          # a single test module
                key = path.rsplit("/", 1)[-1]
            elif _under(path, [test_root]):
                key = path[len(test_root) + 1:]
                if key == "__init__.py":
                    continue
            else:
                continue
            if key in tests:
                raise CorpusLockError(f"library '{lib.name}': test file {key} is in two of "
                                      f"its test paths ({', '.join(test_roots)})")
            tests[key] = text
    deps = tuple(parse_dependencies(list(lib.dependencies), f"library '{lib.name}'"))
    return SeedFamily(lib.name, repo, tests, deps)


def corpus_families(lock: Lock, cache: Path | str, names: Sequence[str] = ()) -> tuple[
        list[SeedFamily], dict[str, str]]:
    """(usable families in name order, {skipped library: reason}) of the libraries in
    `lock` (only `names`, when given; an unknown name is an error)."""
    known = {lib.name: lib for lib in lock.libraries}
    for name in names:
        if name not in known:
            raise ConfigError(f"synthesize.corpus.libraries: unknown library '{name}' "
                              f"(in the lock: {', '.join(sorted(known))})")
    return usable([corpus_family(known[name], source_dir(known[name], cache))
                   for name in sorted(names or known)])
