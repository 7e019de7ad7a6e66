"""SWE-bench interop: a small local git repository built here stands in for a real checkout;
import -> export gives the instance back, and malformed instance files fail with errors
that name the instance and the field."""
from __future__ import annotations

import json
import os
import subprocess
from argparse import Namespace

import pytest

from rlvr.errors import TaskFormatError
from rlvr.tasks.patches import make_patch
from rlvr.authoring.swebench import (cmd_export_swebench, cmd_import_swebench, export_swebench,
                                 import_swebench, read_instances)

GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x",
           "GIT_AUTHOR_DATE": "2001-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2001-01-01T00:00:00Z"}

CORE = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
OLD_TEST = "from widgets.core import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n"
NEW_TEST = OLD_TEST + "\n\ndef test_add():\n    assert add(2, 3) == 5\n"
EXTRA_TEST = "from widgets.core import add\n\n\ndef test_neg():\n    assert add(-1, 1) == 0\n"


def _git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture()
def checkout(tmp_path):
    """repos/acme__widgets: one commit with a bug; returns (repos dir, base commit)."""
    repo = tmp_path / "repos" / "acme__widgets"
    files = {"widgets/__init__.py": "", "widgets/core.py": CORE, "tests/test_core.py": OLD_TEST,
             "setup.cfg": "[metadata]\nname = widgets\n", "logo.bin": "\x00\x01binary"}
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD")
    # a later commit must not leak into the imported snapshot
    (repo / "widgets/core.py").write_text(FIXED)
    _git(repo, "commit", "-qam", "fixed upstream")
    return tmp_path / "repos", base


def _instance(base: str, **changes) -> dict:
    inst = {
        "instance_id": "acme__widgets-1",
        "repo": "acme/widgets",
        "base_commit": base,
        "patch": make_patch({"widgets/core.py": CORE}, {"widgets/core.py": FIXED}),
        "test_patch": make_patch({"tests/test_core.py": OLD_TEST},
                                 {"tests/test_core.py": NEW_TEST, "tests/test_neg.py": EXTRA_TEST}),
        "problem_statement": "add(2, 3) returns -1 instead of 5.",
        "hints_text": "look at the operator",
        "created_at": "2020-01-02T03:04:05Z",
        "version": "1.0",
        "environment_setup_commit": base,
        "FAIL_TO_PASS": json.dumps(["tests/test_core.py::test_add", "tests/test_neg.py::test_neg"]),
        "PASS_TO_PASS": json.dumps(["tests/test_core.py::test_zero"]),
    }
    inst.update(changes)
    return inst


def _write(path, instances, jsonl=True):
    if jsonl:
        path.write_text("".join(json.dumps(i) + "\n" for i in instances))
    else:
        path.write_text(json.dumps(instances))
    return path


@pytest.mark.parametrize("jsonl", [True, False])
def test_import_builds_task_and_export_round_trips(tmp_path, checkout, jsonl):
    repos, base = checkout
    inst = _instance(base)
    path = _write(tmp_path / ("i.jsonl" if jsonl else "i.json"), [inst], jsonl)
    [task] = import_swebench(path, repos)
    assert task.task_id == "acme__widgets-1" and task.source == "swebench"
    assert task.family == "acme/widgets" and task.split == "heldout"
    # the buggy snapshot is the tree at base_commit: sources, tests, config; no binaries
    assert task.repo_files["widgets/core.py"] == CORE
    assert task.repo_files["tests/test_core.py"] == OLD_TEST
    assert "setup.cfg" in task.repo_files and "logo.bin" not in task.repo_files
    # hidden tests: the files test_patch touches, after it, relative to the repo root
    assert task.hidden_tests == {"tests/test_core.py": NEW_TEST, "tests/test_neg.py": EXTRA_TEST}
    assert task.reference_patch == inst["patch"]
    assert task.instruction == inst["problem_statement"]
    assert task.fail_to_pass == ("tests/test_core.py::test_add", "tests/test_neg.py::test_neg")
    assert task.pass_to_pass == ("tests/test_core.py::test_zero",)
    for key in ("instance_id", "repo", "base_commit", "version", "environment_setup_commit",
                "created_at", "hints_text"):
        assert task.provenance[key] == inst[key]
    assert export_swebench([task]) == [inst]


def test_round_trip_through_the_cli_and_parquet(tmp_path, checkout):
    repos, base = checkout
    other_fix = make_patch({"widgets/core.py": CORE},
                           {"widgets/core.py": "def add(a, b):\n    return b + a\n"})
    second = _instance(base, instance_id="acme__widgets-2", problem_statement="another report",
                       patch=other_fix, custom_field={"kept": True})
    src = _write(tmp_path / "in.jsonl", [_instance(base), second])
    out = tmp_path / "tasks.parquet"
    assert cmd_import_swebench(Namespace(file=src, repos=repos, out=out, split="train")) == 0
    back = tmp_path / "back.jsonl"
    assert cmd_export_swebench(Namespace(tasks=out, out=back)) == 0
    assert read_instances(back) == read_instances(src)


def test_an_instance_carries_its_environment_through_import_parquet_and_export(tmp_path,
                                                                              checkout):
    """`dependencies` pins become the task's environment (the sandbox's task layer); they
    survive the Parquet pool and come back on export."""
    repos, base = checkout
    inst = _instance(base, dependencies=["Six==1.16.0"])
    src = _write(tmp_path / "in.jsonl", [inst])
    [task] = import_swebench(src, repos)
    assert task.dependencies == ("six==1.16.0",) and "dependencies" not in task.provenance["extra"]
    out = tmp_path / "tasks.parquet"
    assert cmd_import_swebench(Namespace(file=src, repos=repos, out=out, split="heldout")) == 0
    back = tmp_path / "back.jsonl"
    assert cmd_export_swebench(Namespace(tasks=out, out=back)) == 0
    assert read_instances(back)[0]["dependencies"] == ["six==1.16.0"]


def test_reference_patch_applies_to_the_imported_snapshot(tmp_path, checkout):
    from rlvr.tasks.patches import apply_patch

    repos, base = checkout
    [task] = import_swebench(_write(tmp_path / "i.jsonl", [_instance(base)]), repos)
    fixed = apply_patch(task.repo_files, task.reference_patch)
    assert fixed["widgets/core.py"] == FIXED


def test_export_of_a_non_swebench_task_is_a_complete_instance():
    from rlvr.tasks.model import Task

    task = Task(task_id="syn-x-1", family="minikit", instruction="fix it",
                repo_files={"m/core.py": CORE}, public_tests=(),
                hidden_tests={"test_core.py": NEW_TEST}, reference_patch="diff", source="synthetic",
                fail_to_pass=("test_core.py::test_add",), pass_to_pass=("test_core.py::test_zero",))
    [inst] = export_swebench([task])
    assert inst["repo"] == "minikit" and inst["instance_id"] == "syn-x-1"
    assert "+++ b/test_core.py" in inst["test_patch"]
    assert json.loads(inst["FAIL_TO_PASS"]) == ["test_core.py::test_add"]


@pytest.mark.parametrize("change, message", [
    ({"base_commit": "0" * 40}, "instance acme__widgets-1: field 'base_commit'"),
    ({"repo": "acme/missing"}, "instance acme__widgets-1: field 'repo': no local git checkout"),
    ({"FAIL_TO_PASS": "[not json"}, "instance acme__widgets-1: field 'FAIL_TO_PASS'"),
    ({"PASS_TO_PASS": json.dumps({"a": 1})}, "instance acme__widgets-1: field 'PASS_TO_PASS'"),
    ({"patch": "just words"}, "instance acme__widgets-1: field 'patch'"),
    ({"test_patch": make_patch({"tests/test_core.py": "something else\n"},
                               {"tests/test_core.py": "x\n"})},
     "instance acme__widgets-1: field 'test_patch': does not apply"),
    ({"problem_statement": ""}, "instance acme__widgets-1: field 'problem_statement'"),
    ({"dependencies": ["six>=1"]}, "instance acme__widgets-1: field 'dependencies'"),
    ({"dependencies": "six==1.16.0"}, "instance acme__widgets-1: field 'dependencies'"),
])
def test_malformed_instances_name_instance_and_field(tmp_path, checkout, change, message):
    repos, base = checkout
    path = _write(tmp_path / "i.jsonl", [_instance(base, **change)])
    with pytest.raises(TaskFormatError, match=message.replace("(", r"\(")):
        import_swebench(path, repos)


def test_missing_required_key_is_named(tmp_path, checkout):
    repos, base = checkout
    inst = _instance(base)
    del inst["test_patch"]
    with pytest.raises(TaskFormatError,
                       match="instance acme__widgets-1: missing required field 'test_patch'"):
        import_swebench(_write(tmp_path / "i.jsonl", [inst]), repos)
    inst = _instance(base)
    del inst["instance_id"]
    with pytest.raises(TaskFormatError, match="instance #1: missing required field 'instance_id'"):
        import_swebench(_write(tmp_path / "j.jsonl", [inst]), repos)


def test_bad_json_names_file_and_line(tmp_path, checkout):
    repos, base = checkout
    path = tmp_path / "i.jsonl"
    path.write_text(json.dumps(_instance(base)) + "\n{broken\n")
    with pytest.raises(TaskFormatError, match=r"i.jsonl:2: not valid JSON"):
        import_swebench(path, repos)
    bad_list = tmp_path / "i.json"
    bad_list.write_text("[{]")
    with pytest.raises(TaskFormatError, match=r"i.json: not valid JSON"):
        import_swebench(bad_list, repos)
    with pytest.raises(TaskFormatError, match="instance file not found"):
        import_swebench(tmp_path / "nope.jsonl", repos)


def test_duplicate_instance_ids_are_refused(tmp_path, checkout):
    repos, base = checkout
    path = _write(tmp_path / "i.jsonl", [_instance(base), _instance(base)])
    with pytest.raises(TaskFormatError, match="duplicate instance_id"):
        import_swebench(path, repos)
