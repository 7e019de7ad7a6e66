"""`rlvr tasks check DIR` and `rlvr tasks rejections FILE`: what an author sees of a task
(issue 12 "Diagnostics for authors"), and named errors with exit 2 for bad input."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import rlvr.cli as cli
from rlvr.artifacts import contracts
from taskkit import HIDDEN_TEST, write_task

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def record_dir(tmp_path, monkeypatch) -> Path:
    where = tmp_path / "validated"
    monkeypatch.setenv(contracts.VALIDATED_ENV, str(where))
    return where


@pytest.fixture
def params(tmp_path) -> Path:
    """The repository's params with fewer mutants (the tests need only a few states)."""
    p = yaml.safe_load((REPO / "params.yaml").read_text())
    p["curate"]["max_mutants"] = 1
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(p))
    return path


def _check(capsys, task_dir, params) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        cli.main(["tasks", "check", str(task_dir), "--params", str(params)])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_good_task_shows_every_state_and_is_accepted(tmp_path, params, capsys):
    cli.main(["tasks", "check", str(write_task(tmp_path)), "--params", str(params)])  # exit 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "task mini-clamp (family mini)"
    assert any(ln.startswith("== buggy state: ok; 1 failed, 3 passed") for ln in lines)
    # the failing hidden test with the assertion a plain pytest run reports
    assert "   failed   test_hidden.py::test_clamp_above  -- assert 0 == 10" in lines
    assert any(ln.startswith("== reference fix: ok; 4 passed") for ln in lines)
    assert any(ln.startswith("== wrong solution stub:mini/core.py:clamp") for ln in lines)
    assert any(ln.startswith("== wrong solution edits_tests:tests/test_public.py: "
                             "verifier: patch_rejected") for ln in lines)
    assert lines[-2] == "== public tests (the agent's run_tests on the buggy state): pytest exit 0"
    assert lines[-1].startswith("verdict: accepted (split train); fail_to_pass: "
                                "test_hidden.py::test_clamp_above")


def test_undetectable_bug_prints_the_passing_ids_and_reason(tmp_path, params, capsys):
    blind = HIDDEN_TEST.replace("def test_clamp_above():\n    assert clamp(50, 0, 10) == 10\n",
                                "")
    code, out, _ = _check(capsys, write_task(tmp_path, hidden={"test_hidden.py": blind}), params)
    assert code == 1
    assert "== buggy state: ok; 3 passed" in out
    assert ("verdict: rejected pristine_passes: the buggy state passes the whole hidden suite"
            in out)
    tests_line = next(ln for ln in out.splitlines() if ln.startswith("   tests: "))
    assert set(tests_line[len("   tests: "):].split(", ")) == {
        "test_hidden.py::test_clamp_inside", "test_hidden.py::test_clamp_below",
        "test_hidden.py::test_double"}


def test_leaking_instruction_prints_the_reason_and_line(tmp_path, params, capsys):
    leaky = "clamp is wrong above the range; the second branch should say `return high`."
    code, out, _ = _check(capsys, write_task(tmp_path, instruction=leaky), params)
    assert code == 1
    assert "verdict: rejected instruction_leaks: instruction contains the fix line " \
           "'return high'" in out
    assert "   error: return high" in out


def test_broken_hidden_module_is_named_with_its_import_error(tmp_path, params, capsys):
    broken = "import mini.nothere\n\ndef test_a():\n    pass\n"
    task = write_task(tmp_path, hidden={"test_hidden.py": HIDDEN_TEST, "test_broken.py": broken})
    code, out, _ = _check(capsys, task, params)
    assert code == 1
    assert "   COLLECT ERROR test_broken.py: ModuleNotFoundError: No module named 'mini.nothere'" \
        in out
    assert "verdict: rejected hidden_import_error: hidden module test_broken.py" in out


def test_public_tests_the_agent_cannot_run_are_shown(tmp_path, params, capsys):
    no_tests = "def helper():\n    return 1\n"
    code, out, _ = _check(capsys, write_task(tmp_path, public=no_tests), params)
    assert code == 1
    assert ("== public tests (the agent's run_tests on the buggy state): NOT RUNNABLE: "
            "no tests collected (pytest exit 5)") in out
    assert "verdict: rejected public_tests_unrunnable: " in out
    assert "   tests: tests/test_public.py" in out


def test_malformed_task_is_a_named_error(tmp_path, params, capsys):
    task = write_task(tmp_path)
    (task / "task.yaml").write_text("family: mini\ninstruction: [unclosed\n")
    code, out, err = _check(capsys, task, params)
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {task / 'task.yaml'}: not valid YAML")
    (task / "task.yaml").write_text("instruction: fix it\n")
    code, _, err = _check(capsys, task, params)
    assert code == 2 and err == f"error: {task / 'task.yaml'}: field 'family' is required " \
                                "(non-empty text)\n"


def test_missing_task_dir_is_a_named_error(tmp_path, params, capsys):
    code, _, err = _check(capsys, tmp_path / "absent", params)
    assert code == 2 and err == f"error: {tmp_path / 'absent'}: task directory not found\n"
    code, _, err = _check(capsys, params, params)
    assert code == 2 and err == f"error: {params}: is a file, expected a task directory\n"


def test_rejection_log_is_printed_readably(tmp_path, capsys):
    from rlvr.authoring.curation import Rejection
    from rlvr.tasks.pool import rejections_path, save_pool

    out_file = tmp_path / "tasks.parquet"
    save_pool(out_file, [], [
        Rejection("t1", "mini", "authored", "reference_fails",
                  "1 hidden test(s) fail in every one of 5 runs of the reference fix", {},
                  ("test_hidden.py::test_clamp_above",), ("eq_override",), "assert 11 == 10"),
        Rejection("t2", "mini", "authored", "hidden_import_error",
                  "hidden module test_broken.py collected no tests", {}, ("test_broken.py",),
                  (), "ModuleNotFoundError: No module named 'mini.nothere'"),
    ])
    cli.main(["tasks", "rejections", str(rejections_path(out_file))])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "2 rejection(s): hidden_import_error=1, reference_fails=1"
    assert lines[1].split("\t")[:3] == ["t1", "mini", "reference_fails"]
    assert lines[2:5] == ["   tests: test_hidden.py::test_clamp_above", "   flags: eq_override",
                          "   error: assert 11 == 10"]
    assert lines[5].split("\t")[:3] == ["t2", "mini", "hidden_import_error"]


@pytest.mark.parametrize("content", [b"not parquet at all", b"PAR1\x00\x01garbled"])
def test_garbled_rejection_file_is_a_named_error(tmp_path, capsys, content):
    bad = tmp_path / "x.rejections.parquet"
    bad.write_bytes(content)
    with pytest.raises(SystemExit) as exc:
        cli.main(["tasks", "rejections", str(bad)])
    assert exc.value.code == 2
    assert capsys.readouterr().err.startswith(f"error: {bad}: not a readable Parquet file")


def test_missing_rejection_file_is_a_named_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["tasks", "rejections", str(tmp_path / "absent.parquet")])
    assert exc.value.code == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'absent.parquet'}: artifact not found\n"


def test_diagnose_imports_a_src_layout_package(bwrap_sandbox):
    import dataclasses

    from agentkit import COUNT_FIXED, count_task

    from rlvr.authoring.diagnostics import diagnose

    task = count_task()
    src = {("src/" + p if p.startswith("mini/") else p): t for p, t in task.repo_files.items()}
    task = dataclasses.replace(task, repo_files=src)
    buggy = diagnose(task, task.source_files, bwrap_sandbox)
    assert not buggy.collect_errors, buggy.collect_errors
    assert "failed" in {o for o, _ in buggy.tests.values()}   # the bug, not an ImportError
    fixed = diagnose(task, {**task.source_files, "src/mini/core.py": COUNT_FIXED}, bwrap_sandbox)
    assert {o for o, _ in fixed.tests.values()} == {"passed"}
