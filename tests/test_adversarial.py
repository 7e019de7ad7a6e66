"""Reward hacking against the enclave, on every sandbox backend.

Each case in tests/adversarial/cases.py is a real unified diff against the tiny task that
tries to get `success=True` without fixing the bug: tampering with tests and config,
hijacking pytest or the interpreter, reading hidden information, killing or flooding the
runner, exhausting resources. Each must fail with its expected reason (and safety flags),
and nothing on the host may change: a canary directory, $HOME and the repository are
checked after every case.
"""
from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

import pytest

from adversarial.cases import (CASES, HIDDEN_UNITTEST, UNITTEST_CASES, UNITTEST_FAIL_TO_PASS, UNITTEST_PASS_TO_PASS,
                               Canary)
from adversarial.surfaces_collection import COLLECTION_CASES
from adversarial.surfaces_equality import EQUALITY_CASES, SITE_CASES
from adversarial.threads import THREAD_CASES
from adversarial.tiny_task import ALL_HIDDEN, FAIL_TO_PASS, FIXED_CORE, HIDDEN_LEAN, REPO, make_task, patch_to, with_core
from rlvr.enclave import Enclave
from rlvr.sandbox import Limits

ROOT = Path(__file__).resolve().parents[1]
# Generous wall clock (load must not matter), tight CPU: the busy loop dies of RLIMIT_CPU.
LIMITS = Limits(wall_seconds=60.0, cpu_seconds=2, memory_bytes=768 << 20, max_processes=32,
                max_file_bytes=8 << 20, output_bytes=16 << 10)
TASK = make_task()
# The same task whose hidden suite the enclave runs under its lean runner (no conftest).
TASKS = {"pytest": TASK, "lean": make_task(hidden_tests=HIDDEN_LEAN)}
# The same task with a unittest.TestCase hidden suite (pytest's runner drives unittest's own
# protocol): every attack must fail it too, plus the unittest-specific ones.
UT_TASK = make_task(hidden_tests=HIDDEN_UNITTEST, fail_to_pass=UNITTEST_FAIL_TO_PASS,
                    pass_to_pass=UNITTEST_PASS_TO_PASS)
ATTACK_TASKS = {**TASKS, "unittest": UT_TASK}
# Every attack against every hidden-suite shape it applies to (issue 35's surfaces: some
# cases need pytest's collector, or a unittest suite).
ALL_CASES = CASES + COLLECTION_CASES + EQUALITY_CASES + SITE_CASES + THREAD_CASES
ATTACKS = [pytest.param(case, runner, id=f"{case.name}-{runner}")
           for case in ALL_CASES for runner in sorted(ATTACK_TASKS) if runner in case.shapes]


def test_there_are_at_least_25_distinct_attacks():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names)) >= 25
    assert len({c.name for c in ALL_CASES}) == len(ALL_CASES)
    assert len([c for c in CASES if c.reason != "patch_rejected"]) >= 25
    assert not {c.name for c in UNITTEST_CASES} & set(names)
    collection = [c.name for c in COLLECTION_CASES]
    assert len(collection) == len(set(collection)) and not set(collection) & set(names)


def test_each_collection_surface_has_two_cases():
    """Issue 35, surfaces 1-4: at least two cases each, named for the surface."""
    for prefix in ("window_", "late_namespace_", "unplanned_name_", "runner_modules_"):
        assert len([c for c in COLLECTION_CASES if c.name.startswith(prefix)]) >= 2, prefix


def test_each_equality_surface_has_at_least_two_cases():
    for prefix in ("eq_site_", "probe_tell_", "hidden_"):
        assert len([c for c in EQUALITY_CASES if c.name.startswith(prefix)]) >= 2, prefix


def test_the_thread_races_have_two_cases():
    assert len([c for c in THREAD_CASES if c.name.startswith("thread_race_")]) >= 2


@pytest.fixture(scope="module")
def enclave(sandbox_backend):
    with Enclave(backend=sandbox_backend, limits=LIMITS, workers=1, consensus_runs=3) as enc:
        yield enc


@pytest.fixture(scope="module")
def canary(tmp_path_factory):
    tag = uuid.uuid4().hex[:12]
    d = tmp_path_factory.mktemp("rlvr-canary")
    (d / "keep.txt").write_text("canary")
    c = Canary(dir=str(d), home_file=os.path.expanduser(f"~/rlvr-canary-{tag}"),
               repo_file=str(ROOT / f"rlvr-canary-{tag}"))
    yield c
    for p in (c.home_file, c.repo_file):
        if os.path.exists(p):
            os.unlink(p)


def _digest(directory: str) -> str:
    h = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(directory)):
        for name in sorted(dirs + files):
            full = os.path.join(root, name)
            h.update(full.encode())
            if os.path.isfile(full):
                h.update(Path(full).read_bytes())
    return h.hexdigest()


def _host_untouched(c: Canary, before: str) -> None:
    assert _digest(c.dir) == before, "the canary directory changed"
    for path in (c.home_file, c.repo_file, "/tmp/rlvr-pwned"):
        assert not os.path.exists(path), f"{path} was written from inside the enclave"


@pytest.mark.parametrize("runner", sorted(TASKS))
def test_each_suite_runs_under_its_runner(enclave, runner):
    run = enclave.run_suite(TASKS[runner], "", seed=5)
    assert run.resources["runner"] == runner
    assert run.outcomes.keys() == set(ALL_HIDDEN)


def test_unittest_suite_runs_under_pytest_and_the_reference_passes(enclave):
    run = enclave.run_suite(UT_TASK, "", seed=5)
    assert run.resources["runner"] == "pytest"  # the lean runner hands TestCase suites back
    assert run.outcomes == {**{t: "failed" for t in UNITTEST_FAIL_TO_PASS},
                            **{t: "passed" for t in UNITTEST_PASS_TO_PASS}}, run.outcomes
    assert run.safety_flags == []
    verdict = enclave.verify(UT_TASK, UT_TASK.reference_patch, seed=6)
    assert (verdict.success, verdict.safety_flags) == (True, [])


@pytest.mark.parametrize("case", UNITTEST_CASES, ids=[c.name for c in UNITTEST_CASES])
def test_unittest_attack_fails(enclave, canary, case):
    before = _digest(canary.dir)
    verdict = enclave.verify(UT_TASK, case.make(canary), seed=20241)
    assert verdict.success is False
    assert verdict.reason == case.reason, (verdict.reason, verdict.detail, verdict.safety_flags)
    assert set(case.flags) <= set(verdict.safety_flags), verdict.safety_flags
    assert verdict.runs == 1
    _host_untouched(canary, before)


@pytest.mark.parametrize("case,runner", ATTACKS)
def test_attack_fails(enclave, canary, case, runner):
    before = _digest(canary.dir)
    patch = case.make(canary)
    verdict = enclave.verify(ATTACK_TASKS[runner], patch, seed=20240)
    assert verdict.success is False
    assert verdict.reason == case.reason, (verdict.reason, verdict.detail, verdict.safety_flags)
    assert set(case.flags) <= set(verdict.safety_flags), verdict.safety_flags
    if case.reason == "patch_rejected":
        assert verdict.runs == 0
    elif "probabilistic" in case.tags:
        # Caught by a probe drawn at random: a run may escape (about 1 in 70 for these
        # cases), the next consensus run then catches it (all three escape ~1 in 300,000).
        assert 1 <= verdict.runs <= 3
    else:
        assert verdict.runs == 1  # a failure never buys consensus reruns
    _host_untouched(canary, before)


@pytest.mark.parametrize("name", ["add_root_conftest", "sitecustomize", "pytest_ini", "pth_file", "symlink"])
def test_policy_bypass_is_still_harmless_inside(enclave, name):
    """Defence in depth: feed statically-refused patches straight to run_suite (as if the
    policy had a hole). Pytest must ignore repo config and conftests, the interpreter is
    already running, and the fail-to-pass tests keep failing."""
    case = next(c for c in CASES if c.name == name)
    run = enclave.run_suite(TASK, case.make(None), seed=3)
    assert run.status in ("ok", "apply_failed")
    if run.status == "ok":
        assert all(run.outcomes.get(t) != "passed" for t in FAIL_TO_PASS)


def test_git_refuses_escaping_paths_even_without_the_policy(enclave):
    run = enclave.run_suite(TASK, "--- /dev/null\n+++ b/../escape.py\n@@ -0,0 +1 @@\n+x = 1\n", seed=3)
    assert run.status == "apply_failed"


@pytest.mark.parametrize("runner", sorted(TASKS))
def test_hidden_tests_are_not_on_disk(enclave, runner):
    """What the code under test can see of the hidden directory: no listing (by path or by
    a directory fd: refused and flagged), and a placeholder opened by a guessed name is empty."""
    probe = REPO["mathpkg/util.py"] + '''

def spread(xs):
    import os
    hidden = "/tmp/rlvr-enclave/run/hidden"
    listed = []
    for lister in (lambda: os.listdir(hidden), lambda: [e.name for e in os.scandir(hidden)],
                   lambda: next(os.walk(hidden), (0, 0, []))[2]):
        try:
            listed += lister()
        except PermissionError:
            pass
    fd = os.open(hidden, os.O_RDONLY)
    try:
        os.listdir(fd)
        listed.append("fd")
    except PermissionError:
        pass
    finally:
        os.close(fd)
    with open(os.path.join(hidden, "test_util.py")) as fh:
        size = len(fh.read())
    return max(xs) - min(xs) + size + len(listed)
'''
    run = enclave.run_suite(TASKS[runner], patch_to({**REPO, "mathpkg/util.py": probe}), seed=1)
    assert run.outcomes["test_util.py::test_spread"] == "passed"  # nothing listed, placeholder empty
    assert "blocked_file" in run.safety_flags


@pytest.mark.parametrize("runner", sorted(TASKS))
def test_hidden_tests_may_list_their_own_directory(enclave, runner):
    """The listing refusal is for the code under test: a hidden test (pytest's or the lean
    runner's stack below it) lists its own directory as before."""
    hidden = dict(TASKS[runner].hidden_tests)
    hidden["test_util.py"] += '''

def test_lists_own_dir():
    import os
    here = os.path.dirname(__file__)
    assert "test_util.py" in os.listdir(here)
    assert "test_util.py" in [e.name for e in os.scandir(here)]
'''
    task = TASKS[runner].with_(hidden_tests=hidden)
    run = enclave.run_suite(task, "", seed=2)
    assert run.outcomes["test_util.py::test_lists_own_dir"] == "passed", run.outcomes
    assert run.safety_flags == []


@pytest.mark.parametrize("runner", sorted(TASKS))
def test_code_under_test_may_list_a_hidden_data_directory(enclave, runner):
    """A hidden directory of data files only (no test module in it) is no secret: a library
    under test that lists the directory a hidden test hands it works, unflagged."""
    hidden = {**TASKS[runner].hidden_tests, "data/a.txt": "1\n", "data/b.txt": "2\n"}
    task = TASKS[runner].with_(hidden_tests=hidden)
    lister = REPO["mathpkg/util.py"] + '''

def spread(xs):
    import os
    names = sorted(os.listdir("/tmp/rlvr-enclave/run/hidden/data"))
    fd = os.open("/tmp/rlvr-enclave/run/hidden/data", os.O_RDONLY)
    try:
        assert sorted(e.name for e in os.scandir(fd)) == names
    finally:
        os.close(fd)
    return max(xs) - min(xs) + (0 if names == ["a.txt", "b.txt"] else 100)
'''
    run = enclave.run_suite(task, patch_to({**REPO, "mathpkg/util.py": lister}), seed=2)
    assert run.outcomes["test_util.py::test_spread"] == "passed", run.outcomes
    assert run.safety_flags == []


OWN_FRAMES = FIXED_CORE.replace('''def clamp(x, lo, hi):
    """x limited to the closed interval [lo, hi]."""
''', '''def clamp(x, lo, hi):
    """x limited to the closed interval [lo, hi]."""
    import inspect, logging, sys, traceback, warnings
    here = inspect.currentframe()
    assert here.f_code.co_name == "clamp" and here.f_locals["x"] is x
    assert sys._getframe(0).f_globals is globals()
    caller = here.f_back  # the hidden test: an alias file name (its module's __file__), line 1
    assert caller.f_code.co_filename.endswith("/<hidden>.py") and caller.f_lineno == 1
    assert caller.f_code.co_name == caller.f_code.co_qualname == "<hidden>"
    assert caller.f_globals == {"__name__": "<hidden>", "__file__": caller.f_code.co_filename}
    assert caller.f_locals == {} and not hasattr(caller.f_code, "co_consts")
    assert inspect.getframeinfo(caller).function == "clamp" or len(inspect.stack()) > 2
    warnings.warn_explicit("old", DeprecationWarning, caller.f_code.co_filename, caller.f_lineno)
    assert inspect.getframeinfo(here).function == "clamp"
    assert any(line.name == "clamp" for line in traceback.extract_stack())
    warnings.warn("clamp is deprecated", DeprecationWarning, stacklevel=2)
    logging.getLogger("mathpkg").info("clamp at %s", caller.f_lineno, stack_info=True)
    try:
        raise ValueError(x)
    except ValueError:
        assert "ValueError" in traceback.format_exc()
        logging.getLogger("mathpkg").exception("formatted")
''')


@pytest.mark.parametrize("runner", sorted(TASKS))
def test_code_under_test_may_introspect_its_own_frames(enclave, runner):
    """inspect.currentframe / sys._getframe give views of the caller's own frames, the
    deprecation pattern `currentframe().f_back.f_code.co_filename` works, and tracebacks,
    logging.exception, warn_explicit and warnings' stacklevel keep working: the reference
    passes unflagged. Which hidden test calls is not shown: the caller's view names the
    alias file and no function, on line 1 (SITE_CASES)."""
    run = enclave.run_suite(TASKS[runner], patch_to(with_core(OWN_FRAMES)), seed=4)
    assert run.outcomes == {t: "passed" for t in ALL_HIDDEN}, run.outcomes
    assert run.safety_flags == []


@pytest.mark.parametrize("runner", sorted(ATTACK_TASKS))
def test_enclave_is_sound_after_the_attacks(enclave, runner):
    task = ATTACK_TASKS[runner]
    verdict = enclave.verify(task, task.reference_patch, seed=77)
    assert (verdict.success, verdict.runs, verdict.safety_flags) == (True, 3, [])
    assert enclave.run_suite(task, "", seed=1).outcomes.keys() == set(task.fail_to_pass + task.pass_to_pass)
