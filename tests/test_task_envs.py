"""Per-task Python environments (rlvr.sandbox.envs): tested code sees the runner layer (pytest
and its closure) plus the task's pinned dependencies, built offline from a wheelhouse — the
same files on bwrap and docker — and nothing of the pipeline's venv."""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import textwrap
import zipfile
from pathlib import Path

import pytest
from agentkit import count_task, price_task

from rlvr.enclave.core import Enclave
from rlvr.errors import ConfigError, SandboxUnavailable, TaskFormatError
from rlvr.sandbox import Limits, Mount, get_sandbox
from rlvr.sandbox import envs
from rlvr.authoring.authored import load_task_dir
from rlvr.tasks.model import Task
from rlvr.tasks.pool import load_tasks, save_tasks
from rlvr.tasks.project_config import read_project_dir
from scriptkit import load_script

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
        for path, data in files.items():  # fixed timestamps: same inputs, same wheel bytes
            zf.writestr(zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0)), data)
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


def test_both_backends_give_the_same_distributions(sandbox_backend, demo_env):
    """Parity: tested code sees exactly the runner layer's distributions (same names and
    versions on bwrap and docker) plus, with a task layer, the task's pins."""
    sandbox = get_sandbox(sandbox_backend)
    code = ("import importlib.metadata as md, json; print(json.dumps(sorted("
            "f\"{d.metadata['Name'].lower().replace('_', '-')}=={d.version}\" for d in md.distributions())))")
    runner = sorted(f"{n}=={v}" for n, v in envs.runner_versions().items())
    for task_env, extra in ((None, []), (demo_env, [f"{DEP}==1.0"])):
        r = sandbox.run([sandbox.python, "-c", code], cwd="/tmp", env=ENV, task_env=task_env,
                        limits=Limits(wall_seconds=60))
        assert r.exit_code == 0, r.stderr[-2000:]
        assert json.loads(r.stdout) == sorted(runner + extra)


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


# ---- the real-library corpus (scripts/fetch_corpus.py, data/real/corpus.toml) -----------------
REPO = Path(__file__).resolve().parents[1]


fc = load_script("scripts/fetch_corpus.py")


def _tiny_sdist(tmp: Path, *, licence: bool = True, evil: bool = False) -> Path:
    """A real .tar.gz laid out like an sdist: one top directory, package, tests, licence."""
    import io
    import tarfile

    members = {
        "tinylib-0.1/tinylib/__init__.py": "def twice(x):\n    return 2 * x\n",
        "tinylib-0.1/tests/test_tiny.py": "from tinylib import twice\n\ndef test_twice():\n    assert twice(2) == 4\n",
    }
    if licence:
        members["tinylib-0.1/LICENSE"] = "MIT License\n"
    if evil:
        members["../escaped.txt"] = "outside\n"
    out = tmp / "tinylib-0.1.tar.gz"
    with tarfile.open(out, "w:gz") as tf:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return out


def _lock(tmp: Path, sdist: Path, sha: str | None = None) -> Path:
    sha = sha or hashlib.sha256(sdist.read_bytes()).hexdigest()
    path = tmp / "corpus.toml"
    path.write_text(textwrap.dedent(f"""\
        format = 1
        [[library]]
        name = "tinylib"
        version = "0.1"
        licence = "MIT"
        licence_files = ["LICENSE"]
        tests = ["tests"]
        layout = "flat"
        dependencies = []
        sdist = {{ url = "https://example.invalid/{sdist.name}", sha256 = "{sha}" }}
    """))
    return path


def _local_download(source: Path):
    calls = []

    def download(url: str, dest: Path) -> None:
        calls.append(url)
        dest.write_bytes(source.read_bytes())

    download.calls = calls
    return download


def test_fetch_verifies_unpacks_keeps_licence_then_works_offline(tmp_path):
    sdist = _tiny_sdist(tmp_path)
    lock = fc.load_lock(_lock(tmp_path, sdist))
    download = _local_download(sdist)
    out = fc.fetch(lock, tmp_path / "cache", download=download)
    src = out["tinylib"]
    assert (src / "LICENSE").read_text() == "MIT License\n"
    assert (src / "tinylib" / "__init__.py").is_file() and (src / "tests" / "test_tiny.py").is_file()
    assert len(download.calls) == 1
    again = fc.fetch(lock, tmp_path / "cache", offline=True, download=download)
    assert again == out and len(download.calls) == 1  # cached file re-verified, not re-fetched


def test_hash_mismatch_is_a_named_error_and_leaves_nothing(tmp_path):
    sdist = _tiny_sdist(tmp_path)
    lock = fc.load_lock(_lock(tmp_path, sdist, sha="0" * 64))
    with pytest.raises(fc.HashMismatch, match="tinylib-0.1.tar.gz: sha256 .* does not match the pinned 0000"):
        fc.fetch(lock, tmp_path / "cache", download=_local_download(sdist))
    assert list((tmp_path / "cache" / "sdists").iterdir()) == []
    assert not (tmp_path / "cache" / "src").exists()


def test_missing_licence_and_path_escape_are_refused(tmp_path):
    no_licence = _tiny_sdist(tmp_path, licence=False)
    with pytest.raises(fc.CorpusLockError, match="licence file LICENSE is not in"):
        fc.fetch(fc.load_lock(_lock(tmp_path, no_licence)), tmp_path / "c1",
                 download=_local_download(no_licence))
    evil = _tiny_sdist(tmp_path, evil=True)
    with pytest.raises(fc.RlvrError, match="cannot unpack"):
        fc.fetch(fc.load_lock(_lock(tmp_path, evil)), tmp_path / "c2", download=_local_download(evil))
    assert not (tmp_path / "c2" / "escaped.txt").exists() and not (tmp_path / "escaped.txt").exists()


def test_bad_lock_entries_name_the_field(tmp_path, capsys):
    sdist = _tiny_sdist(tmp_path)
    path = _lock(tmp_path, sdist)
    path.write_text(path.read_text().replace("dependencies = []", 'dependencies = ["six==1.17.0"]'))
    with pytest.raises(fc.CorpusLockError, match="library 'tinylib': dependency six==1.17.0 has no"):
        fc.load_lock(path)
    path.write_text(path.read_text().replace('layout = "flat"', 'layout = "weird"'))
    with pytest.raises(SystemExit) as exc:
        fc.main(["--lock", str(path), "--cache", str(tmp_path / "cache")])
    assert exc.value.code == 2 and "field 'layout'" in capsys.readouterr().err


def test_committed_lock_pins_at_least_five_libraries_with_licences():
    lock = fc.load_lock()
    assert len(lock.libraries) >= 5
    assert len({lib.name for lib in lock.libraries}) == len(lock.libraries)
    for lib in lock.libraries:
        assert lib.licence and lib.licence_files and lib.tests, lib.name
        assert lib.sdist.url.startswith("https://files.pythonhosted.org/"), lib.name
    assert any(lib.layout == "src" for lib in lock.libraries)
    assert any(lib.dependencies for lib in lock.libraries)


SLUGIFY = REPO / "data" / "real" / ".cache" / "src" / "python-slugify-9.2.0"


@pytest.mark.skipif(not SLUGIFY.is_dir(), reason="corpus not fetched (python scripts/fetch_corpus.py)")
def test_real_library_suite_runs_unchanged_with_its_declared_env(sandbox_backend, tmp_path):
    """python-slugify's own suite (its pyproject config, filterwarnings=error, its imports of
    text_unidecode) runs as shipped: it passes with its declared dependency layer and cannot
    even be collected without it (the pipeline venv does not stand in)."""
    lib = next(lib for lib in fc.load_lock().libraries if lib.name == "python-slugify")
    wheelhouse = REPO / "data" / "real" / ".cache" / "wheelhouse"
    env = envs.task_env(lib.dependencies, wheelhouse=wheelhouse, root=tmp_path / "envs")
    cfg = read_project_dir(SLUGIFY, plugins=[*envs.runner_versions(), "text-unidecode"])
    assert cfg.config_file == "pyproject.toml" and cfg.testpaths == ("tests",)
    sandbox = get_sandbox(sandbox_backend)
    argv = [sandbox.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--color=no",
            *cfg.pytest_overrides()]
    kwargs = dict(mounts=[Mount(SLUGIFY, "/work")], cwd="/work",
                  env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONHASHSEED": "0"},
                  limits=Limits(wall_seconds=120, cpu_seconds=120))
    ran = sandbox.run(argv, task_env=env, **kwargs)
    assert ran.exit_code == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    assert " passed" in ran.stdout and "failed" not in ran.stdout
    bare = sandbox.run(argv, **kwargs)
    assert bare.exit_code != 0 and "text_unidecode" in bare.stdout


def test_family_dependencies_are_inherited(tmp_path):
    from taskkit import write_task

    task_dir = write_task(tmp_path, "one")
    family = load_task_dir(task_dir).family
    (tmp_path / "families.yaml").write_text(f"{family}:\n  dependencies: [six==1.17.0]\n")
    meta = task_dir / "task.yaml"
    meta.write_text(meta.read_text() + f"dependencies: [{DEP}==1.0]\n")
    assert load_task_dir(task_dir).dependencies == (f"{DEP}==1.0", "six==1.17.0")
    (tmp_path / "families.yaml").write_text(f"{family}:\n  dependencies: [{DEP}==2.0]\n")
    with pytest.raises(TaskFormatError, match="pinned twice"):
        load_task_dir(task_dir)
    (tmp_path / "families.yaml").write_text(f"{family}:\n  deps: []\n")
    with pytest.raises(TaskFormatError, match="families.yaml: family .* unknown field 'deps'"):
        load_task_dir(task_dir)


HUMANIZE = REPO / "data" / "real" / ".cache" / "src" / "humanize-4.17.0"


@pytest.mark.skipif(not HUMANIZE.is_dir(), reason="corpus not fetched (python scripts/fetch_corpus.py)")
def test_src_layout_library_imports_its_own_copy(tmp_path):
    """humanize: a src layout, native-TOML [tool.pytest] config with --doctest-modules, and
    a suite that needs freezegun (-> python-dateutil -> six). With the project's reading and
    its declared layer, its time and number tests pass unchanged in the sandbox; without the
    reading, src/humanize is not importable (and no other copy stands in)."""
    lib = next(lib for lib in fc.load_lock().libraries if lib.name == "humanize")
    env = envs.task_env(lib.dependencies, wheelhouse=REPO / "data" / "real" / ".cache" / "wheelhouse",
                        root=tmp_path / "envs")
    cfg = read_project_dir(HUMANIZE, plugins=[*envs.runner_versions(), "freezegun"])
    assert cfg.config_file == "pyproject.toml" and cfg.src_layout and cfg.import_paths == ("src",)
    assert cfg.addopts == ("--doctest-modules",) and cfg.testpaths == ("src", "tests")
    sandbox = get_sandbox("bwrap")
    argv = [sandbox.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *cfg.pytest_overrides(),
            "tests/test_time.py", "tests/test_number.py", "-k", "not benchmark"]
    kwargs = dict(mounts=[Mount(HUMANIZE, "/work")], cwd="/work", task_env=env,
                  env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONHASHSEED": "0"},
                  limits=Limits(wall_seconds=120, cpu_seconds=120))
    ran = sandbox.run(argv, **kwargs)
    assert ran.exit_code == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    # without the project reading, nothing named humanize is importable at all
    bare = sandbox.run([a for a in argv if a not in cfg.pytest_overrides()], **kwargs)
    assert bare.exit_code != 0 and "No module named 'humanize'" in bare.stdout


def test_task_dependencies_survive_the_task_parquet(tmp_path):
    task = dataclasses.replace(count_task(), dependencies=("six==1.16.0",))
    save_tasks(tmp_path / "t.parquet", [task, price_task("plain")])
    loaded = {t.task_id: t for t in load_tasks(tmp_path / "t.parquet")}
    assert loaded["mini-count"].dependencies == ("six==1.16.0",)
    assert loaded["plain"].dependencies == ()
