"""dvc.yaml against the code: a stage depends on every source its command imports, and on no
timings sidecar (what makes a fresh clone's `dvc repro` leave `dvc.lock` unchanged except
for measurements)."""
from __future__ import annotations

import ast
import shlex
from pathlib import Path

import pytest
import yaml

from rlvr.artifacts.io import timings_path

ROOT = Path(__file__).resolve().parent.parent
DAG = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
# The stages whose --out artifact has run-to-run-varying measurements beside it.
TIMED = ("selfcheck", "rollout", "verify", "evaluate")


def _module_file(name: str) -> Path | None:
    path = ROOT.joinpath(*name.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _import_time_statements(body):
    """Statements that run when the module is imported (function bodies do not)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        yield node
        for name in ("body", "orelse", "finalbody", "handlers"):
            sub = getattr(node, name, None)
            if isinstance(sub, list):
                yield from _import_time_statements(sub)


def _imports(path: Path, module: str):
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in _import_time_statements(ast.parse(path.read_text()).body):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module
            yield base
            yield from (f"{base}.{a.name}" for a in node.names)  # a submodule, maybe


def imported_sources(module: str) -> set[str]:
    """Repo files loaded by `import module` (what `sys.modules` holds afterwards, restricted
    to rlvr/ and stages/), found statically so no stage's heavy imports run here."""
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        path = None if name in seen else _module_file(name)
        if path is None:
            continue
        seen[name] = path
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # parent packages
        todo += [m for m in _imports(path, name) if m and m.split(".")[0] in ("rlvr", "stages")]
    return {str(p.relative_to(ROOT)) for p in seen.values()}


def _behaves(path: str) -> bool:
    """False for a file that holds at most a docstring (an empty package marker)."""
    body = ast.parse((ROOT / path).read_text()).body
    return any(not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
               for n in body)


def _paths(entries) -> list[str]:
    out = []
    for entry in entries or []:
        out += list(entry) if isinstance(entry, dict) else [entry]
    return [str(e) for e in out]


def _option(cmd: str, flag: str) -> str:
    words = shlex.split(cmd)
    return words[words.index(flag) + 1]


@pytest.mark.parametrize("stage", sorted(DAG))
def test_a_stage_depends_on_every_source_its_command_imports(stage):
    spec = DAG[stage]
    module = _option(spec["cmd"], "-m")
    deps = _paths(spec.get("deps"))
    sources = {f for f in imported_sources(module) if _behaves(f)}
    assert f"{module.replace('.', '/')}.py" in sources
    missing = sorted(f for f in sources
                     if not any(f == d or f.startswith(d.rstrip("/") + "/") for d in deps))
    assert missing == [], f"{stage}: add to its deps in dvc.yaml: {missing}"


def test_the_import_closure_is_what_python_loads():
    """The static closure above agrees with the interpreter for a light stage."""
    import subprocess
    import sys

    code = ("import sys, stages.curate; print('\\n'.join(sorted(getattr(m, '__file__', '') "
            "or '' for n, m in list(sys.modules.items()) if n.split('.')[0] in "
            "('rlvr', 'stages'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.split()
    loaded = {str(Path(f).resolve().relative_to(ROOT)) for f in out if f}
    assert loaded == imported_sources("stages.curate")


def test_timings_sidecars_are_neither_outs_nor_deps():
    """A clock's readings differ on every run: as outs their md5 would change dvc.lock on
    every fresh-clone run, as deps they would make the stages after them stale."""
    versioned = {d for spec in DAG.values()
                 for d in _paths(spec.get("deps")) + _paths(spec.get("outs"))}
    sidecars = {str(timings_path(_option(DAG[stage]["cmd"], "--out"))) for stage in TIMED}
    assert len(sidecars) == len(TIMED) and all(s.endswith(".timings.parquet") for s in sidecars)
    assert not sidecars & versioned
    assert not any(p.endswith(".timings.parquet") for p in versioned)


def test_dvc_itself_accepts_the_dag():
    """DVC's own schema (not just YAML): a bad plot property fails `make pipeline` at once."""
    from dvc.repo import Repo

    with Repo(str(ROOT)) as repo:
        names = {s.name for s in repo.index.stages}
    assert set(DAG) <= names
