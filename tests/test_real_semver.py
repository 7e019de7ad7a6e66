"""python-semver 3.0.4 of the real-library corpus through the enclave: issue 12's four
problems on the library they were found on, its code and upstream tests unchanged.

The library (data/real/corpus.toml, fetched by scripts/fetch_corpus.py) has each shape that
once gave a wrong verdict:

1. a ``src/`` layout (``pythonpath = src tests`` in its .pytest.ini), while the pipeline
   venv has its own, newer semver: the hidden tests must import the repository's copy;
2. ``semver._deprecated.deprecated`` reads its caller through
   ``inspect.currentframe().f_back`` (frame introspection was refused outright);
3. ``Version.__eq__`` accepts a dict and builds ``Version(**d)`` from it, so the equality
   guard's probe (a perturbed copy of the dict) raises ``TypeError`` (once flagged
   ``eq_override``, failing a correct fix);
4. an autouse fixture in tests/conftest.py fills ``doctest_namespace`` (``-p no:doctest``
   made every test an error);

and ``addopts = --cov=semver ...`` (pytest-cov is in no task environment: a usage error).

The injected bug is one mutated line of ``Version.compare``: a release sorts *below* its own
prereleases (``if not rc1: return -1``); the reference fix is the shipped code. Every
upstream test module is a hidden test under the pytest runner (with the upstream conftest
and its helper modules); the lean runner gets three upstream modules that need no conftest.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rlvr.enclave import Enclave
from rlvr.sandbox import Limits
from rlvr.tasks.model import Task
from rlvr.tasks.patches import make_patch
from scriptkit import load_script

ROOT = Path(__file__).resolve().parents[1]
SEMVER = ROOT / "data" / "real" / ".cache" / "src" / "semver-3.0.4"
pytestmark = pytest.mark.skipif(not SEMVER.is_dir(), reason="corpus not fetched (python scripts/fetch_corpus.py)")

LIMITS = Limits(wall_seconds=60.0, cpu_seconds=4, memory_bytes=768 << 20, max_processes=32,
                max_file_bytes=8 << 20, output_bytes=16 << 10)

CONFIG_FILES = (".pytest.ini", "pyproject.toml", "setup.cfg")
HELPERS = ("conftest.py", "coerce.py", "semverwithvprefix.py")  # conftest imports the other two
LEAN_MODULES = ("test_compare.py", "test_deprecated_functions.py", "test_max-min.py")
PUBLIC = "tests/test_compare.py"

FIXED_LINE = "        if not rc1:\n            return 1\n"
BUGGY_LINE = "        if not rc1:\n            return -1\n"
# What the mutation breaks, in both runners' ids (pytest's node ids).
BUG_TESTS = frozenset({
    "test_compare.py::test_should_compare_version_dictionaries",
    "test_compare.py::test_should_compare_version_info_objects",
    "test_compare.py::test_should_follow_specification_comparison",
    "test_compare.py::test_should_get_greater[1.0.0-1.0.0-rc.1]",
    "test_compare.py::test_should_ignore_builds_on_compare[1.0.0+build.1-1.0.0-alpha.1+build.1-1]",
    "test_compare.py::test_should_ignore_builds_on_compare[1.0.0+build.1-1.0.0-alpha.1-1]",
})
DICT_TEST = "test_compare.py::test_should_compare_version_dictionaries"  # `assert v1 == v3`, v3 a dict
FIXTURE_TEST = "test_semver.py::test_should_versioninfo_to_dict"  # conftest's `version` fixture


def _upstream(rel: str) -> str:
    return (SEMVER / rel).read_text(encoding="utf-8")


def _states() -> tuple[dict[str, str], dict[str, str]]:
    """(buggy, fixed) repository snapshots: the package under src/, the project's config
    files, and the public test tree (the public module and what its conftest imports)."""
    fixed = {p.relative_to(SEMVER).as_posix(): p.read_text(encoding="utf-8")
             for p in (SEMVER / "src" / "semver").iterdir() if p.is_file()}
    fixed.update({name: _upstream(name) for name in CONFIG_FILES})
    fixed.update({f"tests/{name}": _upstream(f"tests/{name}") for name in HELPERS})
    fixed[PUBLIC] = _upstream(PUBLIC)
    source = fixed["src/semver/version.py"]
    assert source.count(FIXED_LINE) == 1
    return {**fixed, "src/semver/version.py": source.replace(FIXED_LINE, BUGGY_LINE)}, fixed


def _task(runner: str) -> Task:
    buggy, fixed = _states()
    if runner == "pytest":
        names = sorted(p.name for p in (SEMVER / "tests").glob("*.py"))  # every module, helpers too
    else:
        names = list(LEAN_MODULES)
    hidden = {name: _upstream(f"tests/{name}") for name in names}
    return Task(task_id=f"semver-prerelease-order-{runner}", family="real-semver",
                instruction="A release compares lower than its own prereleases (1.0.0 < 1.0.0-rc.1).",
                repo_files=buggy, public_tests=(PUBLIC,), hidden_tests=hidden,
                reference_patch=make_patch(buggy, fixed), fail_to_pass=tuple(sorted(BUG_TESTS)))


TASKS = {runner: _task(runner) for runner in ("lean", "pytest")} if SEMVER.is_dir() else {}


@pytest.fixture(scope="module")
def enclave(sandbox_backend):
    with Enclave(backend=sandbox_backend, limits=LIMITS, workers=1, consensus_runs=2) as enc:
        yield enc


def _graded(task: Task, collected) -> Task:
    """The task as curation leaves it: FAIL_TO_PASS the bug's tests, PASS_TO_PASS the rest."""
    return task.with_(pass_to_pass=tuple(sorted(set(collected) - BUG_TESTS)))


def _failing(run) -> set[str]:
    return {t for t, o in run.outcomes.items() if o != "passed"}


def test_the_unchanged_library_has_every_shape_of_the_issue():
    """What the tests below rely on is really in the shipped sdist, not in a lookalike."""
    fetch_corpus = load_script("scripts/fetch_corpus.py")
    lib = next(lib for lib in fetch_corpus.load_lock().libraries if lib.name == "semver")
    assert (lib.version, lib.layout, lib.licence, lib.dependencies) == ("3.0.4", "src", "BSD-3-Clause", ())
    assert "pythonpath = src tests" in _upstream(".pytest.ini")
    assert "--cov=semver" in _upstream(".pytest.ini")
    assert "inspect.currentframe()).f_back" in _upstream("src/semver/_deprecated.py")
    assert "elif isinstance(other, dict):\n            other = cls(**other)" in _upstream("src/semver/version.py")
    assert "def add_semver(doctest_namespace):" in _upstream("tests/conftest.py")
    assert not (SEMVER / "semver").exists()  # src layout: nothing importable at the root


def test_project_config_drops_only_the_cov_options():
    """The one reading the enclave and the agent's run_tests share: .pytest.ini's import
    path, and its addopts without the three pytest-cov options (each dropped with a reason)."""
    from rlvr.tasks.project_config import for_task, run_tests_args

    cfg = for_task(TASKS["pytest"])
    assert cfg.config_file == ".pytest.ini"
    assert cfg.import_paths == ("src", "tests") and not cfg.src_layout
    assert [d.option for d in cfg.dropped] == [("--no-cov-on-fail",), ("--cov=semver",), ("--cov-report=term-missing",)]
    assert all("pytest-cov" in d.reason for d in cfg.dropped)
    assert cfg.addopts == ("--import-mode=importlib", "--doctest-glob=*.rst", "--doctest-modules",
                           "--doctest-report", "ndiff")
    assert run_tests_args(TASKS["pytest"]) == [
        "-o", "addopts=--import-mode=importlib '--doctest-glob=*.rst' --doctest-modules --doctest-report ndiff"]


@pytest.mark.parametrize("runner", ["lean", "pytest"])
def test_reference_passes_every_upstream_test_with_no_flag(enclave, runner):
    task = TASKS[runner]
    fixed = enclave.run_suite(task, task.reference_patch, seed=71)
    assert fixed.resources["runner"] == runner
    assert len(fixed.outcomes) > (300 if runner == "pytest" else 80), len(fixed.outcomes)
    assert _failing(fixed) == set(), sorted(_failing(fixed))
    assert fixed.safety_flags == []
    verdict = enclave.verify(_graded(task, fixed.outcomes), task.reference_patch, seed=72)
    assert (verdict.success, verdict.reason, verdict.safety_flags) == (True, "none", [])


@pytest.mark.parametrize("runner", ["lean", "pytest"])
def test_buggy_state_fails_exactly_the_tests_of_the_repository_copy(enclave, runner):
    """Problem 1 (src layout): the only tests that fail are those the mutated line of the
    repository's src/semver breaks. Had the hidden tests imported any other semver (the
    pipeline venv has one; the runner layer must have none), nothing would fail."""
    task = TASKS[runner]
    buggy = enclave.run_suite(task, "", seed=73)
    assert buggy.resources["runner"] == runner
    assert _failing(buggy) == BUG_TESTS, sorted(_failing(buggy))
    assert buggy.safety_flags == []
    verdict = enclave.verify(_graded(task, buggy.outcomes), "", seed=74)
    assert (verdict.success, verdict.reason) == (False, "tests_failed")
    spec = importlib.util.find_spec("semver")
    if spec is not None:  # the counterfactual: the host's copy has no such bug
        import semver as host_semver

        assert not Path(spec.origin).is_relative_to(SEMVER)
        assert host_semver.Version.parse("1.0.0").compare("1.0.0-rc.1") == 1


@pytest.mark.parametrize("runner", ["lean", "pytest"])
def test_deprecated_functions_read_their_callers_frame(enclave, runner):
    """Problem 2: every function behind `deprecated` (inspect.currentframe().f_back, then
    inspect.getfile of the caller's code) warns as upstream expects, on both states: the
    bug is elsewhere, and frame access fails none of them."""
    task = TASKS[runner]
    for patch in (task.reference_patch, ""):
        run = enclave.run_suite(task, patch, seed=75)
        deprecated = {t: o for t, o in run.outcomes.items() if t.startswith("test_deprecated_functions.py::")}
        assert len(deprecated) == 21, sorted(deprecated)
        assert set(deprecated.values()) == {"passed"}, deprecated
        assert run.safety_flags == []


@pytest.mark.parametrize("runner", ["lean", "pytest"])
def test_version_equal_to_a_dict_is_no_eq_override(enclave, runner):
    """Problem 3: `assert v1 == v3` (v3 a dict; Version(**probe) raises TypeError on the
    guard's perturbed copy) passes on the reference and fails on the bug as a plain
    failure: the guard's probe raising is not a claim of equality."""
    task = TASKS[runner]
    fixed = enclave.run_suite(task, task.reference_patch, seed=77)
    assert fixed.outcomes[DICT_TEST] == "passed"
    assert "eq_override" not in fixed.safety_flags
    buggy = enclave.run_suite(task, "", seed=77)
    assert buggy.outcomes[DICT_TEST] == "failed"
    assert "eq_override" not in buggy.safety_flags


def test_upstream_conftest_doctest_namespace_fixture_runs(enclave):
    """Problem 4: the autouse `add_semver(doctest_namespace)` fixture of the upstream
    conftest runs before every test (no test errors) and the conftest's own `version`
    fixture reaches the tests that ask for it."""
    task = TASKS["pytest"]
    assert "conftest.py" in task.hidden_tests
    for patch, seed in ((task.reference_patch, 79), ("", 80)):
        run = enclave.run_suite(task, patch, seed=seed)
        assert run.resources["runner"] == "pytest"
        assert "error" not in run.outcomes.values(), sorted(t for t, o in run.outcomes.items() if o == "error")
        assert run.outcomes[FIXTURE_TEST] == "passed"


def test_public_tests_run_in_the_agents_sandbox_despite_cov_addopts(sandbox_backend):
    """Curation's check: the agent's run_tests on the buggy state runs the public module
    (pytest exit 1: tests failed), not a usage error (exit 4) from `--cov`."""
    from rlvr.sandbox import get_sandbox
    from rlvr.authoring.diagnostics import public_tests_run

    public = public_tests_run(TASKS["pytest"], get_sandbox(sandbox_backend), LIMITS)
    assert (public.runnable, public.exit_code) == (True, 1), public


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_agent_run_tests_sees_the_bug_and_its_fix(tmp_path, sandbox_backend, warm):
    """The agent's run_tests with the project's config (import path src + tests, the
    upstream conftest, the addopts the environment can honour): the buggy public module
    fails on the bug's tests; after the reference edit it passes."""
    from rlvr.agent.executor import ToolExecutor
    from rlvr.agent.tools import ToolCall
    from rlvr.agent.workspace import Workspace
    from rlvr.sandbox import get_sandbox

    task = TASKS["pytest"]
    with Workspace.create(task, tmp_path) as ws, \
            ToolExecutor(ws, get_sandbox(sandbox_backend), timeout_s=60.0, observation_cap=20000,
                         warm=warm) as ex:
        before = ex.execute(ToolCall("run_tests", {})).observation
        assert "[pytest exit code 1]" in before, before
        assert "6 failed" in before and "test_should_compare_version_dictionaries" in before, before
        edited = ex.execute(ToolCall("edit", {"path": "src/semver/version.py", "old": BUGGY_LINE,
                                              "new": FIXED_LINE}))
        assert edited.status == "ok", edited.observation
        after = ex.execute(ToolCall("run_tests", {})).observation
        assert "[pytest exit code 0]" in after and "failed" not in after, after
        assert ex.runs["warm" if warm else "cold"] == 2
