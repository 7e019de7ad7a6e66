"""Per-task Python environments (rlvr.sandbox.envs): tested code sees the runner layer (pytest
and its closure) plus the task's pinned dependencies, built offline from a wheelhouse — the
same files on bwrap and docker — and nothing of the pipeline's venv."""
from __future__ import annotations

import base64
import hashlib
import json
import textwrap
import zipfile
from pathlib import Path

import pytest

from rlvr.enclave.core import Enclave
from rlvr.errors import ConfigError, SandboxUnavailable, TaskFormatError
from rlvr.sandbox import Limits, get_sandbox
from rlvr.sandbox import envs
from rlvr.tasks.authored import load_task_dir
from rlvr.tasks.model import Task

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
DEP = "rlvr-demo-dep"
DEP_MODULE = "rlvr_demo_dep"


def build_wheel(wheelhouse: Path, name: str = DEP, version: str = "1.0",
                body: str = "ANSWER = 42\n") -> Path:
    """A real (minimal, pure-Python) wheel, written by hand so no build backend is needed."""
    module = name.replace("-", "_")
    dist_info = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": body.encode(),
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: rlvr-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheelhouse.mkdir(parents=True, exist_ok=True)
    out = wheelhouse / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return out


@pytest.fixture(scope="module")
def demo_env(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("envs")
    build_wheel(root / "wheels")
    return envs.task_env([f"{DEP}==1.0"], wheelhouse=root / "wheels", root=root / "cache")


# ---- declaring dependencies ------------------------------------------------------------------
def test_pins_are_canonical_sorted_and_runner_pins_dropped():
    pytest_version = envs.runner_versions()["pytest"]
    assert envs.parse_dependencies(["Zeta_Lib==2.0", "alpha.lib==1.0", f"pytest=={pytest_version}"],
                                   "t.yaml") == ("alpha-lib==1.0", "zeta-lib==2.0")
    assert envs.parse_dependencies(None, "t.yaml") == ()


@pytest.mark.parametrize("value, message", [
    (["attrs>=23"], "not an exact pin"),
    (["attrs"], "not an exact pin"),
    ("attrs==23.1.0", "must be a list"),
    (["attrs==23.1.0", "Attrs==23.2.0"], "pinned twice"),
    (["pytest==7.0.0"], "clashes with the enclave runner"),
])
def test_bad_pins_are_named_errors(value, message):
    with pytest.raises(ConfigError, match=rf"t.yaml: field 'dependencies'.*{message}"):
        envs.parse_dependencies(value, "t.yaml")


def test_authored_task_declares_dependencies(tmp_path):
    from taskkit import write_task

    task_dir = write_task(tmp_path)
    meta = task_dir / "task.yaml"
    meta.write_text(meta.read_text() + f"dependencies: [{DEP}==1.0]\n")
    task = load_task_dir(task_dir)
    assert task.dependencies == (f"{DEP}==1.0",)
    assert Task.from_row(task.to_row()).dependencies == task.dependencies
    meta.write_text(meta.read_text().replace(f"{DEP}==1.0", f"{DEP}>=1"))
    with pytest.raises(TaskFormatError, match="task.yaml: field 'dependencies'"):
        load_task_dir(task_dir)


# ---- building ---------------------------------------------------------------------------------
def test_task_env_is_content_keyed_and_offline(tmp_path, demo_env):
    wheels, cache = tmp_path / "wheels", tmp_path / "cache"
    build_wheel(wheels)
    first = envs.task_env([f"{DEP}==1.0"], wheelhouse=wheels, root=cache)
    assert first.name == demo_env.name  # same pins, same wheel bytes: same key anywhere
    assert (first / DEP_MODULE / "__init__.py").read_text() == "ANSWER = 42\n"
    assert json.loads((first / "rlvr-env.json").read_text()) == {"pins": [f"{DEP}==1.0"]}
    assert envs.task_env([f"{DEP}==1.0"], wheelhouse=wheels, root=cache) == first
    build_wheel(wheels, body="ANSWER = 43\n")  # other wheel bytes: another environment
    assert envs.task_env([f"{DEP}==1.0"], wheelhouse=wheels, root=cache) != first
    assert envs.task_env([], wheelhouse=wheels, root=cache) is None


def test_missing_wheel_is_refused_not_downloaded(tmp_path):
    with pytest.raises(SandboxUnavailable, match="could not install it offline"):
        envs.task_env([f"{DEP}==9.9"], wheelhouse=tmp_path / "empty", root=tmp_path / "cache")
    assert not any(p.name.startswith("task-") for p in (tmp_path / "cache").iterdir())


def test_runner_env_holds_only_the_runner_distributions():
    runner = envs.runner_env()
    site = next(runner.glob("lib/python3*/site-packages"))
    dists = {envs.canonical_name(p.name.split("-")[0]) for p in site.glob("*.dist-info")}
    assert dists == set(envs.runner_versions())
    assert "pytest" in dists and "numpy" not in dists and "torch" not in dists
    assert (site / envs.PTH_NAME).read_text() == envs.PTH_LINE


# ---- what tested code sees, on both backends --------------------------------------------------
PROBE = """
import importlib, json, sys
seen = {}
for name in ("pytest", "numpy", "torch", "yaml", "rlvr", %r):
    try:
        importlib.import_module(name)
        seen[name] = True
    except ImportError:
        seen[name] = False
print(json.dumps(seen))
""" % DEP_MODULE


def _probe(sandbox, **kwargs) -> dict:
    r = sandbox.run([sandbox.python, "-c", PROBE], cwd="/tmp", env=ENV,
                    limits=Limits(wall_seconds=60), **kwargs)
    assert r.exit_code == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_pipeline_venv_is_invisible_and_declared_dep_imports(sandbox_backend, demo_env):
    sandbox = get_sandbox(sandbox_backend)
    assert _probe(sandbox) == {"pytest": True, "numpy": False, "torch": False, "yaml": False,
                               "rlvr": False, DEP_MODULE: False}
    assert _probe(sandbox, task_env=demo_env) == {"pytest": True, "numpy": False, "torch": False,
                                                  "yaml": False, "rlvr": False, DEP_MODULE: True}


HIDDEN = textwrap.dedent(f"""
    import {DEP_MODULE}
    from core import answer

    def test_answer():
        assert answer() == {DEP_MODULE}.ANSWER
""")


def _dep_task(deps: tuple[str, ...]) -> Task:
    return Task(
        task_id="dep-task", family="dep", instruction="fix answer",
        repo_files={"core.py": "def answer():\n    return 41\n"}, public_tests=(),
        hidden_tests={"test_core.py": HIDDEN},
        reference_patch=("--- a/core.py\n+++ b/core.py\n@@ -1,2 +1,2 @@\n def answer():\n"
                         "-    return 41\n+    return 42\n"),
        fail_to_pass=("test_core.py::test_answer",), dependencies=deps,
    )


def test_enclave_gives_a_task_its_declared_environment(sandbox_backend, demo_env, monkeypatch):
    """The same hidden test imports the declared dependency: it passes the reference with the
    task's environment, and cannot even import without it. One enclave serves both tasks
    (the worker restarts its server for the other environment)."""
    monkeypatch.setattr(envs, "task_env", lambda pins, **_: demo_env if pins else None)
    with_dep, without = _dep_task((f"{DEP}==1.0",)), _dep_task(())
    with Enclave(backend=sandbox_backend, limits=Limits(wall_seconds=30), consensus_runs=1) as enc:
        good = enc.verify(with_dep, with_dep.reference_patch, seed=1)
        assert good.success, good.detail
        assert not enc.verify(with_dep, "", seed=1).success  # the bug is still caught
        run = enc.run_suite(without, without.reference_patch, seed=1)
        assert run.outcomes.get("test_core.py::test_answer") != "passed"
        assert enc.verify(with_dep, with_dep.reference_patch, seed=2).success
