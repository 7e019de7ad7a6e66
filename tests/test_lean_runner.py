"""The enclave's lean runner: which suites it takes (static plan), and that on those it gives
pytest's own test ids and outcomes, test id by test id (the runner is chosen per task, so
curation and verification must never see a difference). Anything it did not foresee at run
time falls back to pytest inside the same request."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from rlvr.enclave import Enclave
from rlvr.sandbox import Limits
from rlvr.tasks.model import Task
from rlvr.tasks.patches import make_patch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "rlvr" / "enclave" / "_inside"))
import lean  # noqa: E402
import runner  # noqa: E402

PKG = {
    "zoo/__init__.py": "from zoo.core import double, parse\n",
    "zoo/core.py": "def double(x):\n    return 2 * x\n\n\ndef parse(s):\n    return int(s)\n",
}
# Every construct the lean runner takes, and ids pytest builds in non-obvious ways.
ZOO = '''\
import sys

import pytest

from zoo import double, parse

test_data = [1, 2, 3]  # not callable: pytest ignores it


class Box:
    def __init__(self, v):
        self.v = v


def helper():
    return 1


def test_plain():
    assert double(2) == 4


def test_fails():
    assert double(2) == 5


@pytest.mark.parametrize("x", [0, 1, -1, 2.5, "a", "h\\u00e9", None, True, b"by", "x" * 120])
def test_values(x):
    assert double(x) == x * 2


@pytest.mark.parametrize("x,want", [(1, 2), (2, 4), (3, 7)])
@pytest.mark.parametrize("scale", [1, 1])
def test_stacked(scale, x, want):
    assert double(x) * scale == want * scale


@pytest.mark.parametrize("box", [Box(1), Box(2)])
def test_objects(box):
    assert double(box.v) == 2 * box.v


@pytest.mark.parametrize("v", [1, 2, 3], ids=["one", None, "three"])
def test_ids_list(v):
    assert double(v) > 0


@pytest.mark.parametrize("v", [10, 20], ids=lambda v: f"v{v // 10}")
def test_ids_callable(v):
    assert double(v) == 2 * v


@pytest.mark.parametrize("s,want", [
    pytest.param("1", 1, id="one"),
    pytest.param("x", 0, marks=pytest.mark.skip(reason="bad")),
    pytest.param("7", 7, marks=pytest.mark.skipif(False, reason="never")),
    ("3", 3),
])
def test_params(s, want):
    assert parse(s) == want


@pytest.mark.skip(reason="off")
def test_skipped():
    raise AssertionError


@pytest.mark.skipif(True, reason="on")
def test_skipif_true():
    raise AssertionError


@pytest.mark.skipif(sys.version_info < (3, 0), reason="old")
def test_skipif_false():
    assert parse("5") == 5


@pytest.mark.slow
def test_custom_mark():
    assert double(0) == 0


def test_skip_in_body():
    pytest.skip("later")


def test_xfail_in_body():
    pytest.xfail("known")


def test_raises():
    with pytest.raises(ValueError):
        parse("nope")


def test_raises_missing():
    with pytest.raises(ValueError):
        parse("12")


def test_approx():
    assert double(0.1) == pytest.approx(0.2)


def test_system_exit():
    raise SystemExit(0)


def test_returns_value():
    return 3


class TestGroup:
    def test_method(self):
        assert double(3) == 6

    def test_method_fails(self):
        assert double(3) == 7

    @pytest.mark.parametrize("n", [4, 5])
    def test_method_param(self, n):
        assert double(n) == 2 * n

    def helper(self):
        return 2
'''
BROKEN_IMPORT = "import zoo.missing\n\n\ndef test_never():\n    assert True\n"


def _task(hidden: dict[str, str], task_id: str = "lean-zoo") -> Task:
    return Task(task_id=task_id, family="zoo", instruction="-", repo_files=dict(PKG),
                public_tests=(), hidden_tests=hidden, reference_patch="")


@pytest.fixture(scope="module")
def enclaves(sandbox_backend):
    limits = Limits(wall_seconds=60.0, cpu_seconds=20)
    with Enclave(backend=sandbox_backend, limits=limits, consensus_runs=1) as lean_enc, \
            Enclave(backend=sandbox_backend, limits=limits, consensus_runs=1, lean_runner=False) as pytest_enc:
        yield lean_enc, pytest_enc


def _both(enclaves, task: Task, patch: str = "", seed: int = 3):
    lean_enc, pytest_enc = enclaves
    return lean_enc.run_suite(task, patch, seed=seed), pytest_enc.run_suite(task, patch, seed=seed)


# ---- static plan --------------------------------------------------------------------------
def test_the_zoo_is_planned():
    plan, reason = lean.static_plan({"test_zoo.py": ZOO, "tests/test_x.py": "def test_a():\n    pass\n",
                                     "helpers.py": "def f():\n    pass\n", "data.txt": "x"})
    assert reason == ""
    assert plan["test_zoo.py"]["classes"] == {"TestGroup": {"test_method", "test_method_fails", "test_method_param"}}
    assert {"test_plain", "test_params", "test_returns_value"} <= plan["test_zoo.py"]["funcs"]
    assert plan["tests/test_x.py"] == {"funcs": {"test_a"}, "classes": {}}


@pytest.mark.parametrize("source, needle", [
    ("import pytest\n\n@pytest.fixture\ndef big():\n    return 1\n\ndef test_a(big):\n    pass\n", "fixture"),
    ("import pytest\n\n@pytest.fixture(autouse=True)\ndef env():\n    pass\n\ndef test_a():\n    pass\n", "fixture"),
    ("def test_a(tmp_path):\n    pass\n", "fixtures"),
    ("import pytest\n\n@pytest.mark.usefixtures('x')\ndef test_a():\n    pass\n", "usefixtures"),
    ("import pytest\n\n@pytest.mark.xfail\ndef test_a():\n    pass\n", "xfail"),
    ("import pytest\npytestmark = pytest.mark.slow\n\ndef test_a():\n    pass\n", "pytestmark"),
    ("def setup_module():\n    pass\n\ndef test_a():\n    pass\n", "setup_module"),
    ("class TestA:\n    def setup_method(self):\n        pass\n\n    def test_a(self):\n        pass\n", "setup_method"),
    ("class TestA:\n    def __init__(self):\n        pass\n\n    def test_a(self):\n        pass\n", "__init__"),
    ("class Base:\n    pass\n\nclass TestA(Base):\n    def test_a(self):\n        pass\n", "bases"),
    ("from zoo import *\n\ndef test_a():\n    pass\n", "'*'"),
    ("from helpers import test_shared\n", "test_shared"),
    ("async def test_a():\n    pass\n", "async"),
    ("def test_a():\n    yield 1\n", "generator"),
    ("import functools\n\n@functools.lru_cache\ndef test_a():\n    pass\n", "decorator"),
    ("import pytest\n\n@pytest.mark.parametrize('x', [1], indirect=True)\ndef test_a(x):\n    pass\n", "parametrize form"),
    ("import pytest\nNAMES = 'x'\n\n@pytest.mark.parametrize(NAMES, [1])\ndef test_a(x):\n    pass\n", "literal"),
    ("def test_a(x=1):\n    pass\n", "signature"),
    ("class TestA:\n    __test__ = False\n\n    def test_a(self):\n        pass\n", "__test__"),
    ("import unittest\n\nclass Checks(unittest.TestCase):\n    def test_a(self):\n        pass\n", "TestCase"),
])
def test_what_only_pytest_runs_is_left_to_pytest(source, needle):
    plan, reason = lean.static_plan({"test_a.py": source})
    assert plan is None
    assert needle in reason


def test_a_conftest_anywhere_leaves_the_suite_to_pytest():
    plan, reason = lean.static_plan({"test_a.py": "def test_a():\n    pass\n", "sub/conftest.py": ""})
    assert plan is None and "conftest" in reason


# ---- same ids, same outcomes --------------------------------------------------------------
def test_lean_matches_pytest_on_the_zoo(enclaves):
    task = _task({"test_zoo.py": ZOO, "test_broken.py": BROKEN_IMPORT})
    for seed in (3, 4):
        lean_run, pytest_run = _both(enclaves, task, seed=seed)
        assert (lean_run.resources["runner"], pytest_run.resources["runner"]) == ("lean", "pytest")
        assert lean_run.status == pytest_run.status == "ok"
        assert lean_run.outcomes == pytest_run.outcomes
        assert lean_run.order == pytest_run.order  # same seeded shuffle of the same ids
        assert lean_run.safety_flags == pytest_run.safety_flags == []
    outcomes = lean_run.outcomes
    assert outcomes["test_zoo.py::test_fails"] == "failed"
    assert outcomes["test_zoo.py::test_params[one]"] == "passed"
    assert outcomes["test_zoo.py::test_xfail_in_body"] == "skipped"
    assert outcomes["test_zoo.py::TestGroup::test_method_param[5]"] == "passed"
    assert not any(k.startswith("test_broken.py") for k in outcomes)  # import failed: no items
    assert len(outcomes) > 40


def test_lean_matches_pytest_with_a_patch_and_a_selection(enclaves):
    task = _task({"test_zoo.py": ZOO})
    patch = make_patch(PKG, {**PKG, "zoo/core.py": PKG["zoo/core.py"].replace("2 * x", "x + x + 1")})
    lean_run, pytest_run = _both(enclaves, task, patch)
    assert lean_run.outcomes == pytest_run.outcomes
    assert lean_run.outcomes["test_zoo.py::test_plain"] == "failed"
    lean_enc, pytest_enc = enclaves
    chosen = ["test_zoo.py::test_plain", "test_zoo.py::TestGroup::test_method", "test_zoo.py::test_objects[box0]"]
    a = lean_enc.run_suite(task, "", seed=1, tests=chosen)
    b = pytest_enc.run_suite(task, "", seed=1, tests=chosen)
    assert a.outcomes == b.outcomes and set(a.outcomes) == set(chosen)


@pytest.mark.parametrize("name, extra, expect_id", [
    ("alias", "test_alias = test_plain\n", "test_zoo.py::test_alias"),  # a second name for a test
    ("empty", "@pytest.mark.parametrize('x', [])\ndef test_empty(x):\n    pass\n", "test_zoo.py::test_empty[NOTSET]"),
    ("string-skipif", "@pytest.mark.skipif('sys.platform == \"none\"', reason='s')\ndef test_string_cond():\n    pass\n",
     "test_zoo.py::test_string_cond"),
    ("dynamic", "globals()['test_dynamic'] = lambda: None\n", None),
])
def test_the_unforeseen_falls_back_to_pytest(enclaves, name, extra, expect_id):
    task = _task({"test_zoo.py": ZOO + "\n\n" + extra}, task_id=f"lean-fallback-{name}")
    lean_run, pytest_run = _both(enclaves, task)
    assert lean_run.resources["runner"] == "pytest"
    assert lean_run.outcomes == pytest_run.outcomes
    if expect_id is not None:
        assert expect_id in lean_run.outcomes
    lean_enc, _ = enclaves
    assert lean_enc.run_suite(task, "", seed=9).resources["runner"] == "pytest"  # remembered


def test_lean_matches_pytest_on_every_seed_family(enclaves):
    from rlvr.authoring.synth.seeds import discover

    families, _skipped = discover(ROOT / "data" / "seed_repos")
    assert len(families) >= 8
    for fam in families:
        task = Task(task_id=f"lean-{fam.name}", family=fam.name, instruction="-",
                    repo_files=dict(fam.repo_files), public_tests=(),
                    hidden_tests=dict(fam.tests), reference_patch="")
        assert lean.static_plan(task.hidden_tests)[0] is not None, fam.name
        lean_run, pytest_run = _both(enclaves, task)
        assert lean_run.resources["runner"] == "lean", fam.name
        assert lean_run.outcomes == pytest_run.outcomes, fam.name
        assert lean_run.outcomes and set(lean_run.outcomes.values()) == {"passed"}, fam.name


def test_lean_matches_pytest_on_buggy_states(enclaves):
    """Failing, erroring and crashing code under test (the runs curation decides on): two
    sampled mutants per family, each as a patch over the pristine family."""
    from rlvr.authoring.synth.candidates import single_candidates
    from rlvr.authoring.synth.seeds import discover

    families, _skipped = discover(ROOT / "data" / "seed_repos")
    compared = failing = 0
    for fam in families:
        task = Task(task_id=f"lean-{fam.name}", family=fam.name, instruction="-",
                    repo_files=dict(fam.repo_files), public_tests=(),
                    hidden_tests=dict(fam.tests), reference_patch="")
        candidates = single_candidates(fam, per_operator=1, seed=11)[:: 5][:2]
        for cand in candidates:
            patch = make_patch(fam.repo_files, cand.state(fam))
            lean_run, pytest_run = _both(enclaves, task, patch, seed=compared)
            assert lean_run.resources["runner"] == "lean"
            assert (lean_run.status, lean_run.outcomes) == (pytest_run.status, pytest_run.outcomes), \
                (fam.name, cand.operator, cand.params)
            compared += 1
            failing += any(o != "passed" for o in lean_run.outcomes.values())
    assert compared >= 12 and failing >= compared // 2


def test_a_testcase_the_static_plan_missed_is_handed_back_at_run_time(enclaves):
    """An imported TestCase subclass (no `TestCase` in the test module's text) is collected
    by pytest under any name: the lean runner finds it at run time and falls back."""
    hidden = {"helpers.py": "import unittest\n\n\nclass Checks(unittest.TestCase):\n"
                            "    def test_inherited(self):\n        self.assertTrue(True)\n",
              "test_a.py": "from helpers import Checks\n\n\ndef test_plain():\n    assert Checks\n"}
    assert lean.static_plan(hidden)[0] is not None
    lean_run, pytest_run = _both(enclaves, _task(hidden, "lean-imported-testcase"), seed=3)
    assert lean_run.resources["runner"] == "pytest"
    assert lean_run.outcomes == pytest_run.outcomes == {"test_a.py::Checks::test_inherited": "passed",
                                                        "test_a.py::test_plain": "passed"}
    assert lean_run.safety_flags == pytest_run.safety_flags == []


# ---- the runner's pure parts: project import roots, unittest instrumentation ---------------

def test_project_job_keeps_import_roots_inside_the_repo():
    job = runner.project_job({"pythonpath": ["src", "src/", "../up", "/abs", ".", "lib/../pkgs", 3],
                              "markers": ["slow: a slow test", "two\nlines", 5, " "]})
    assert job == {"pythonpath": ["src", "pkgs"], "markers": ["slow: a slow test"]}
    assert runner.project_job(None) == runner.project_job({}) == {"pythonpath": [], "markers": []}


def test_unittest_methods_get_sentinels_and_their_equality_asserts_the_guard():
    """Sentinels go into test*/runTest methods of any class (TestCases need no Test prefix,
    bases may live in helper modules), never into other methods or module helpers; the
    assertEqual family gets the equality guard's event like `assert ==`."""
    hidden = {
        "helpers.py": "class Base:\n    def test_inherited(self):\n        pass\n\n    def helper(self):\n"
                      "        pass\n\n\ndef test_not_collected():\n    pass\n",
        "test_u.py": "import unittest\n\n\nclass Checks(unittest.TestCase):\n    def test_eq(self):\n"
                     "        self.assertEqual(1, 1)\n        self.assertNotEqual(1, 2, 'msg')\n"
                     "        self.assertEqual(*[1, 1])\n        [self.assertEqual(i, i) for i in range(2)]\n\n"
                     "    def runTest(self):\n        pass\n\n    def setUp(self):\n        pass\n",
    }
    suite = runner.compile_suite(hidden, "rlvr-test-placeholder")
    assert suite.errors == {}
    assert sorted(suite.test_codes.values()) == ["runTest", "test_eq", "test_inherited"]
    tree = runner._Instrument("rlvr-test-placeholder", True).visit(ast.parse(hidden["test_u.py"]))
    events = [node.args[0].value for node in ast.walk(tree) if isinstance(node, ast.Call)
              and isinstance(node.func, ast.Constant) and node.func.value == "rlvr-test-placeholder"]
    assert events.count(runner.EQ_EVENT) == 3  # not the starred call
    assert events.count(runner.PASS_EVENT) == 2  # test_eq and runTest, not setUp
