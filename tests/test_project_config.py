"""rlvr.tasks.project_config: a project's pytest config, read in pytest's precedence, with the
addopts that would break a sandboxed run dropped (and why)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from rlvr.errors import ConfigError
from rlvr.tasks.project_config import read_project_config, read_project_dir, split_addopts

# As humanize / python-slugify style projects ship it.
SETUP_CFG_COV = """\
[metadata]
name = "demo"

[tool:pytest]
addopts = --cov demo --cov-report=term-missing -ra --strict-markers
testpaths = tests
markers =
    slow: takes long
    network: needs the internet
"""

PYPROJECT_SRC = """\
[project]
name = "demo"

[tool.pytest.ini_options]
addopts = "-n auto --reruns 2 --import-mode=importlib"
testpaths = ["tests"]
markers = ["slow: slow tests"]
"""


def test_setup_cfg_cov_addopts_dropped_with_reasons():
    cfg = read_project_config({"setup.cfg": SETUP_CFG_COV, "demo/__init__.py": ""}, plugins=())
    assert cfg.config_file == "setup.cfg"
    assert cfg.addopts == ("-ra", "--strict-markers")
    assert [d.option for d in cfg.dropped] == [("--cov", "demo"), ("--cov-report=term-missing",)]
    assert all("pytest-cov" in d.reason for d in cfg.dropped)
    assert cfg.testpaths == ("tests",)
    assert cfg.markers == ("slow: takes long", "network: needs the internet")
    assert cfg.import_paths == () and not cfg.src_layout
    assert cfg.pytest_overrides() == ["-o", "addopts=-ra --strict-markers"]


def test_plugin_in_env_keeps_its_options():
    cfg = read_project_config({"setup.cfg": SETUP_CFG_COV, "demo/__init__.py": ""},
                              plugins=("pytest_cov",))
    assert cfg.addopts[:3] == ("--cov", "demo", "--cov-report=term-missing")
    assert cfg.dropped == () and cfg.pytest_overrides() == []


def test_pyproject_src_layout_and_xdist():
    files = {"pyproject.toml": PYPROJECT_SRC, "src/demo/__init__.py": "", "tests/test_a.py": ""}
    cfg = read_project_config(files, plugins=())
    assert cfg.config_file == "pyproject.toml"
    assert cfg.addopts == ("--import-mode=importlib",)
    assert [d.option for d in cfg.dropped] == [("-n", "auto"), ("--reruns", "2")]
    assert cfg.src_layout and cfg.import_paths == ("src",)
    assert cfg.pytest_overrides() == ["-o", "addopts=--import-mode=importlib", "-o", "pythonpath=src"]
    assert cfg.job_fields()["pythonpath"] == ["src"]


def test_precedence_follows_pytest():
    """pytest.ini wins over everything, even empty; pyproject.toml without a pytest table and
    setup.cfg without [tool:pytest] do not count."""
    files = {"pytest.ini": "[pytest]\naddopts = -q\n", "setup.cfg": SETUP_CFG_COV, "m.py": ""}
    assert read_project_config(files).config_file == "pytest.ini"
    files = {"pyproject.toml": "[project]\nname='x'\n", "tox.ini": "[pytest]\naddopts = -x\n",
             "setup.cfg": SETUP_CFG_COV, "m.py": ""}
    cfg = read_project_config(files)
    assert cfg.config_file == "tox.ini" and cfg.addopts == ("-x",)
    assert read_project_config({"setup.cfg": "[metadata]\nname = x\n", "m.py": ""}).config_file == ""


def test_config_pythonpath_kept_in_order_and_src_not_duplicated():
    files = {"pytest.ini": "[pytest]\npythonpath = src lib/./extra\n", "src/pkg/__init__.py": ""}
    cfg = read_project_config(files)
    assert cfg.import_paths == ("src", "lib/extra") and not cfg.src_layout


def test_cache_and_debugger_options_dropped_even_without_plugins():
    kept, dropped = split_addopts(["--lf", "-x", "--pdb", "--basetemp", "/tmp/x", "-p", "xdist",
                                   "-p", "no:warnings", "--timeout=5", "-n4"], ["pytest-timeout"])
    assert kept == ["-x", "-p", "no:warnings", "--timeout=5"]
    assert [d.option for d in dropped] == [("--lf",), ("--pdb",), ("--basetemp", "/tmp/x"),
                                           ("-p", "xdist"), ("-n4",)]
    assert "cache provider" in dropped[0].reason and "pytest-xdist" in dropped[3].reason


@pytest.mark.parametrize("files, field", [
    ({"pytest.ini": "[pytest]\npythonpath = ../outside\n"}, "pythonpath"),
    ({"pytest.ini": "[pytest]\npythonpath = /abs\n"}, "pythonpath"),
    ({"pytest.ini": "[pytest]\naddopts = '--unterminated\n"}, "addopts"),
])
def test_bad_values_name_file_and_field(files, field):
    with pytest.raises(ConfigError, match=rf"pytest.ini: field '{field}'"):
        read_project_config(files)


def test_unparseable_file_is_a_named_error():
    with pytest.raises(ConfigError, match="pyproject.toml: pytest cannot read"):
        read_project_config({"pyproject.toml": "[tool.pytest.ini_options\naddopts = 1\n"})


def test_overrides_make_a_cov_project_runnable(tmp_path):
    """The point of it all: pytest on a setup.cfg with `--cov` and no pytest-cov exits 4
    (usage error); with the overrides the same suite runs and passes."""
    (tmp_path / "setup.cfg").write_text(SETUP_CFG_COV)
    (tmp_path / "src" / "demo").mkdir(parents=True)
    (tmp_path / "src" / "demo" / "__init__.py").write_text("def one():\n    return 1\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_one.py").write_text("import demo\n\ndef test_one():\n    assert demo.one() == 1\n")
    env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "/usr/bin:/bin"}
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    broken = subprocess.run(base, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert broken.returncode == 4, broken.stdout + broken.stderr
    cfg = read_project_dir(tmp_path, plugins=())
    fixed = subprocess.run(base + cfg.pytest_overrides(), cwd=tmp_path, env=env,
                           capture_output=True, text=True)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "1 passed" in fixed.stdout


def test_for_task_counts_the_task_env_plugins():
    """A plugin the task declares keeps its options; the runner layer's pytest-timeout too."""
    from rlvr.tasks.model import Task
    from rlvr.tasks.project_config import for_task, run_tests_args

    files = {"setup.cfg": "[tool:pytest]\naddopts = --cov=demo --timeout=5 -ra\n", "demo.py": ""}
    task = Task("t", "f", "i", files, (), {"test_x.py": ""}, "", dependencies=())
    assert for_task(task).addopts == ("--timeout=5", "-ra")
    assert run_tests_args(task) == ["-o", "addopts=--timeout=5 -ra"]
    with_cov = task.with_(dependencies=("pytest-cov==5.0.0",))
    assert for_task(with_cov).addopts == ("--cov=demo", "--timeout=5", "-ra")
    assert run_tests_args(with_cov) == []
