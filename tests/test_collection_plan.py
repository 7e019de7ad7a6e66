"""The hidden suite's name plans (issue 35, surface 3) and the collection checkpoints must not
cost honest suites anything: names bound in every way Python allows are planned, modules
that bind names dynamically get no plan, and such suites verify as before on both runners."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from adversarial.tiny_task import ALL_HIDDEN, FIXED_CORE, HIDDEN_CORE_LEAN, HIDDEN_UTIL, make_task, patch_to, with_core
from rlvr.enclave import Enclave
from rlvr.sandbox import Limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rlvr" / "enclave" / "_inside"))
import runner  # noqa: E402

H = runner.HIDDEN + "/"

ALL_BINDINGS = '''\
import os, os.path as osp
from collections import OrderedDict as OD
try:
    import numpy
except ImportError as missing:
    numpy = None
for i, (a, b) in enumerate([(1, 2)]):
    pass
with open(os.devnull) as fh:
    pass
if (n := 3):
    x: int = 1
    y += 1
del x
match n:
    case {"k": kv, **rest}:
        pass
    case [first, *others]:
        pass
    case other:
        pass


def helper():
    global LATE
    LATE = 1


@pytest.mark.parametrize("v", [w := 1])
def test_a(v):
    assert v


class TestB(Base):
    attr = 1

    def test_c(self):
        pass
'''


def test_plan_holds_every_way_a_module_binds_a_name():
    plan = runner.compile_suite({"test_x.py": ALL_BINDINGS}, "PH")
    names = plan.planned[H + "test_x.py"]
    expected = {"os", "osp", "OD", "numpy", "missing", "i", "a", "b", "fh", "n", "x", "y", "kv", "rest", "first",
                "others", "other", "helper", "LATE", "w", "test_a", "TestB", "__name__", "__builtins__", "__file__"}
    assert expected <= names
    assert "attr" not in names and "test_c" not in names
    # A base the plan cannot see may add names when subclassed: no class plan.
    assert plan.planned_classes[(H + "test_x.py", "TestB")] is None


def test_dynamic_modules_and_classes_get_no_plan():
    src = {
        "test_dyn.py": "globals()['test_made'] = lambda: None\n",
        "test_star.py": "from os.path import *\n",
        "test_cls.py": "import unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n        pass\n\n"
                       "@dec\nclass U:\n    pass\n",
    }
    plan = runner.compile_suite(src, "PH")
    assert plan.planned[H + "test_dyn.py"] is None and plan.planned[H + "test_star.py"] is None
    assert plan.planned_classes[(H + "test_cls.py", "T")] >= {"test_a", "_classSetupFailed", "_class_cleanups"}
    assert plan.planned_classes[(H + "test_cls.py", "U")] is None


def test_class_plans_hold_what_type_and_mangling_bind():
    """What Python binds in a class dict without a statement naming it: `__hash__ = None`
    beside an `__eq__`, private names mangled (toolz's upstream suite has both: before
    they were planned its unmodified source failed tamper_integrity)."""
    src = {"test_eq.py": "class TestKey:\n    def __eq__(self, other):\n        return True\n\n"
                         "    def __helper(self):\n        return 1\n\n    def test_a(self):\n"
                         "        assert self._TestKey__helper() == 1\n\n\n"
                         "class _Hidden:\n    __slot = 2\n"}
    plan = runner.compile_suite(src, "PH")
    assert {"__eq__", "__hash__", "__helper", "_TestKey__helper", "test_a"} <= plan.planned_classes[(H + "test_eq.py", "TestKey")]
    assert "_Hidden__slot" in plan.planned_classes[(H + "test_eq.py", "_Hidden")]
    assert vars(type("TestKey", (), {"__eq__": lambda s, o: True}))["__hash__"] is None  # what type() adds
    assert "__warningregistry__" in plan.planned[H + "test_eq.py"]


def test_checkpoints_follow_imports_that_may_run_the_code_under_test():
    src = "import os\nimport pytest\nfrom mathpkg import clamp\nfrom . import helpers\ntry:\n    import numpy\nexcept ImportError:\n    pass\n"
    tree = __import__("ast").parse(src)
    body = runner._with_steps(tree.body, lambda event, *args: __import__("ast").Call(
        func=__import__("ast").Name("STEP", __import__("ast").Load()), args=list(args), keywords=[]))
    steps_after = [type(stmt).__name__ for i, stmt in enumerate(body[:-1])
                   if isinstance(body[i + 1], __import__("ast").Expr)]
    assert steps_after == ["ImportFrom", "ImportFrom"]  # mathpkg and the relative one, not os/pytest
    assert isinstance(body[-1].body[-1], __import__("ast").Expr)  # numpy, inside the try


# An honest suite that binds names dynamically, imports the package in several ways and
# subclasses a helper class: the reference still passes, with no flag, on both runners.
DYNAMIC_UTIL = HIDDEN_UTIL + '''

import mathpkg
from mathpkg import util as _util


def _make(n):
    def test():
        assert _util.spread([n, 0]) == n
    return test


for _n in (1, 2):
    globals()[f"helper_{_n}"] = _make(_n)


class _Base:
    value = 3


class TestDerived(_Base):
    def test_value(self):
        assert mathpkg.spread([self.value, 0]) == 3
'''

# A planned module (no dynamic names) whose class dict holds what type() and name mangling
# bind without a statement naming it.
KEYED = '''import mathpkg


class TestKeyed:
    def __eq__(self, other):  # type() adds __hash__ = None beside it
        return isinstance(other, TestKeyed)

    def __spread(self, xs):  # stored mangled: _TestKeyed__spread
        return mathpkg.spread(xs)

    def test_private_helper(self):
        assert self.__spread([4, 1]) == 3
'''

LIMITS = Limits(wall_seconds=60.0, cpu_seconds=5, memory_bytes=768 << 20, max_processes=32,
                max_file_bytes=8 << 20, output_bytes=16 << 10)


@pytest.fixture(scope="module")
def enclave(sandbox_backend):
    with Enclave(backend=sandbox_backend, limits=LIMITS, workers=1, consensus_runs=1) as enc:
        yield enc


@pytest.mark.parametrize("shape", ["pytest", "lean"])
def test_honest_dynamic_suite_still_verifies(enclave, shape):
    hidden = {"test_util.py": DYNAMIC_UTIL, "test_keyed.py": KEYED,
              "test_core.py": HIDDEN_CORE_LEAN if shape == "lean" else make_task().hidden_tests["test_core.py"]}
    if shape == "pytest":
        hidden["conftest.py"] = make_task().hidden_tests["conftest.py"]
    task = make_task(hidden_tests=hidden)
    run = enclave.run_suite(task, patch_to(with_core(FIXED_CORE)), seed=3)
    assert {t: run.outcomes.get(t) for t in ALL_HIDDEN} == {t: "passed" for t in ALL_HIDDEN}, run.outcomes
    assert run.outcomes.get("test_util.py::TestDerived::test_value") == "passed"
    assert run.outcomes.get("test_keyed.py::TestKeyed::test_private_helper") == "passed"
    assert run.safety_flags == []
