"""The library's floors: import-linter's contracts (pyproject.toml [tool.importlinter]) hold on
rlvr, and they would catch what they exist for — an upward import and an import circle hidden
inside a function — on a fixture package. Function-local rlvr imports left in the library each
say why they are local, and never that they dodge a circle."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).with_name("lint-imports")
CONTRACTS = """
[tool.importlinter]
root_packages = ["fixture"]

[[tool.importlinter.contracts]]
id = "layers"
name = "fixture imports only downward"
type = "layers"
containers = ["fixture"]
layers = ["high", "low"]

[[tool.importlinter.contracts]]
id = "acyclic"
name = "no circle"
type = "acyclic_siblings"
ancestors = ["fixture"]
"""


def lint(config: Path, cwd: Path, *contracts: str) -> subprocess.CompletedProcess:
    args = [str(LINT), "--no-cache", "--no-logo", str(config)]
    for contract in contracts:
        args += ["--contract", contract]
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def fixture(tmp_path: Path, modules: dict[str, str]) -> Path:
    pkg = tmp_path / "fixture"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, body in modules.items():
        (pkg / f"{name}.py").write_text(textwrap.dedent(body))
    config = tmp_path / "contracts.toml"
    config.write_text(CONTRACTS)
    return config


def test_the_library_keeps_its_contracts():
    out = lint(ROOT / "pyproject.toml", ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "BROKEN" not in out.stdout


def test_an_upward_import_breaks_the_layers(tmp_path):
    config = fixture(tmp_path, {"low": "from fixture import high\n", "high": "X = 1\n"})
    out = lint(config, tmp_path, "layers")
    assert out.returncode == 1, out.stdout
    assert "fixture imports only downward BROKEN" in out.stdout
    assert "fixture.low -> fixture.high" in out.stdout


def test_a_circle_behind_a_function_local_import_is_found(tmp_path):
    config = fixture(tmp_path, {
        "low": """\
            def late():
                from fixture import high
                return high.X
            """,
        "high": "from fixture import low\nX = 1\n"})
    assert lint(config, tmp_path, "layers").returncode == 1  # low -> high, though inside a def
    out = lint(config, tmp_path, "acyclic")
    assert out.returncode == 1, out.stdout
    assert "no circle BROKEN" in out.stdout


def test_the_same_package_without_the_upward_import_passes(tmp_path):
    config = fixture(tmp_path, {"low": "X = 1\n", "high": "from fixture import low\n"})
    out = lint(config, tmp_path)
    assert out.returncode == 0, out.stdout


NOT_A_REASON = re.compile(r"noqa(: *[A-Z0-9, ]+)?|type: *ignore(\[[^]]*\])?")


def local_rlvr_imports(path: Path):
    """(line, the comment that explains it) for each rlvr import inside a function body."""
    lines = path.read_text().splitlines()
    tree = ast.parse("\n".join(lines))
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            if not any(n == "rlvr" or n.startswith("rlvr.") for n in names):
                continue
            same = lines[node.lineno - 1].partition("#")[2]
            above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
            reason = same or (above[1:] if above.startswith("#") else "")
            yield node.lineno, NOT_A_REASON.sub("", reason).strip()


LIBRARY = sorted(p for p in (ROOT / "rlvr").rglob("*.py")
                 if "_inside" not in p.parts and "_sandbox" not in p.parts)


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_function_local_import_says_why(path):
    unexplained = [line for line, reason in local_rlvr_imports(path) if not reason]
    assert unexplained == [], f"{path.name}: say why these imports are local: lines {unexplained}"
    dodges = [line for line, reason in local_rlvr_imports(path)
              if "circ" in reason.lower() or "cycle" in reason.lower()]
    assert dodges == [], f"{path.name}: a circle is broken, not dodged: lines {dodges}"
