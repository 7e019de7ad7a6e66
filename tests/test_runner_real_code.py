"""Library-shaped code through the enclave: issue 12's problems 2-4, on both runners and
every sandbox backend.

`unitlib` is shaped like the small third-party libraries the real-library corpus imports:
a value class whose ``__eq__`` builds an object from a dict and rejects unknown keys (the
equality guard once failed correct fixes: ``eq_override``), a deprecation decorator that
reads its caller through ``inspect.currentframe().f_back`` (refused frame access failed
every test of the fixed state; the caller's view names the alias file its ``__file__``
holds, line 1 and no function: issue 35's surface 7), error reporting through ``traceback.format_exc`` and
``logging.exception``, and an upstream-style autouse conftest fixture that fills
``doctest_namespace`` (``-p no:doctest`` made every test an error). Each shape has a test
the bug breaks and one it does not: the reference fix must pass all of them with no
safety flag, the buggy state must fail exactly the bug's tests. The last test runs a real library of the
corpus (inflection, its upstream test module unchanged) through both runners.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.enclave import Enclave
from rlvr.sandbox import Limits
from rlvr.tasks.model import Task
from rlvr.tasks.patches import make_patch

LIMITS = Limits(wall_seconds=60.0, cpu_seconds=4, memory_bytes=768 << 20, max_processes=32,
                max_file_bytes=8 << 20, output_bytes=16 << 10)

QUANTITY = '''\
"""Quantities with units; equal to their dict form (as serialisation libraries do)."""

_FACTORS = {"m": 1, "km": 100, "cm": 0.01}


class Quantity:
    _FIELDS = ("value", "unit")

    def __init__(self, value, unit):
        self.value = value
        self.unit = unit

    @classmethod
    def from_dict(cls, data):
        unknown = set(data) - set(cls._FIELDS)
        if unknown:
            raise TypeError(f"unexpected keys: {len(unknown)}")
        return cls(**data)

    def __eq__(self, other):
        if isinstance(other, dict):
            other = Quantity.from_dict(other)  # raises TypeError on a foreign dict
        if not isinstance(other, Quantity):
            return NotImplemented
        return (self.value, self.unit) == (other.value, other.unit)

    __hash__ = None

    def __repr__(self):
        return f"Quantity({self.value!r}, {self.unit!r})"


def convert(q, unit):
    return Quantity(q.value * _FACTORS[q.unit] / _FACTORS[unit], unit)
'''

COMPAT = '''\
"""Deprecation helpers, the way libraries write them: the warning names the caller."""
import functools
import inspect
import sys
import warnings


def deprecated(reason):
    def decorate(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            caller = inspect.currentframe().f_back
            warnings.warn_explicit(
                f"{func.__name__} is deprecated: {reason}", DeprecationWarning,
                filename=caller.f_code.co_filename, lineno=caller.f_lineno,
                module=caller.f_globals.get("__name__", "?"),
            )
            return func(*args, **kwargs)
        return wrapper
    return decorate


def caller_name(depth=1):
    return sys._getframe(depth).f_code.co_name
'''

REPORT = '''\
"""Error reporting that formats the exception it caught."""
import logging
import traceback

from unitlib.quantity import Quantity, convert

log = logging.getLogger("unitlib")


def parse(text):
    """'2 km' -> Quantity(2.0, 'km'); a bad number gives the formatted traceback."""
    number, unit = text.split()
    try:
        return Quantity(float(number), unit)
    except ValueError:
        log.exception("cannot parse %r", text)
        return traceback.format_exc()


def parse_to(text, unit):
    q = parse(text)
    return q if isinstance(q, str) else convert(q, unit)
'''

INIT = '''\
from unitlib.compat import caller_name, deprecated
from unitlib.quantity import Quantity, convert
from unitlib.report import parse, parse_to

old_convert = deprecated("use convert()")(convert)
'''

PUBLIC = '''\
from unitlib import Quantity


def test_repr():
    assert repr(Quantity(1, "m")) == "Quantity(1, 'm')"
'''

REPO = {"unitlib/__init__.py": INIT, "unitlib/quantity.py": QUANTITY, "unitlib/compat.py": COMPAT,
        "unitlib/report.py": REPORT, "tests/test_public.py": PUBLIC}
FIXED = {**REPO, "unitlib/quantity.py": QUANTITY.replace('"km": 100,', '"km": 1000,')}

# Upstream conftest shape: an autouse fixture that puts the package into doctest_namespace.
CONFTEST = '''\
from pathlib import Path

import pytest

import unitlib


@pytest.fixture(autouse=True)
def add_unitlib(doctest_namespace):
    doctest_namespace["unitlib"] = unitlib
'''

HIDDEN_TESTS = '''\
from pathlib import Path

import pytest

from unitlib import Quantity, caller_name, convert, old_convert, parse, parse_to


def test_convert_equals_dict_form():
    assert convert(Quantity(2, "km"), "m") == {"value": 2000, "unit": "m"}


def test_dict_form_of_unchanged_unit():
    assert convert(Quantity(3, "m"), "m") == {"value": 3, "unit": "m"}


def test_foreign_dict_is_an_error():
    with pytest.raises(TypeError):
        assert Quantity(1, "m") == {"value": 1, "unit": "m", "extra": 0}


def test_deprecated_alias_warns_at_the_caller():
    with pytest.deprecated_call() as record:
        assert old_convert(Quantity(1, "km"), "cm").value == 100000
    assert record[0].filename == __file__  # the alias both share (runner.HIDDEN_ALIAS)
    assert record[0].lineno == 1  # hidden code is compiled on line 1


def test_deprecated_alias_of_unchanged_unit():
    with pytest.deprecated_call():
        assert old_convert(Quantity(5, "cm"), "cm").value == 5


def test_caller_name_sees_the_test():
    assert caller_name() == "<hidden>"  # the helper works; which hidden test calls is withheld


def test_bad_number_reports_the_traceback():
    text = parse("two km")
    assert "Traceback (most recent call last)" in text
    assert "ValueError" in text and "report.py" in text


def test_parse_and_convert():
    assert parse_to("1.5 km", "m").value == 1500
'''

# Needs the pytest runner: a fixture (caplog) sees logging.exception's formatted record.
HIDDEN_LOGGING = '''\
import logging

from unitlib import parse


def test_logging_exception_formats_the_traceback(caplog):
    with caplog.at_level(logging.ERROR, logger="unitlib"):
        parse("x m")
    (record,) = caplog.records
    assert record.exc_text is None or "ValueError" in record.exc_text
    assert "ValueError" in caplog.text and "Traceback" in caplog.text
'''

BUG_TESTS = ("test_convert_equals_dict_form", "test_deprecated_alias_warns_at_the_caller", "test_parse_and_convert")


def _task(hidden: dict[str, str], task_id: str) -> Task:
    ids = sorted(f"test_units.py::{line[4:].split('(')[0]}" for line in HIDDEN_TESTS.splitlines()
                 if line.startswith("def test_"))
    if "test_logging.py" in hidden:
        ids.append("test_logging.py::test_logging_exception_formats_the_traceback")
    f2p = tuple(t for t in ids if t.split("::")[1] in BUG_TESTS)
    return Task(task_id=task_id, family="unitlib", instruction="convert() gets kilometres wrong.",
                repo_files=dict(REPO), public_tests=("tests/test_public.py",), hidden_tests=hidden,
                reference_patch=make_patch(REPO, FIXED), fail_to_pass=f2p,
                pass_to_pass=tuple(t for t in ids if t not in f2p))


# Under pytest: the upstream conftest (doctest_namespace) and a caplog test; under the lean
# runner: the same test module alone (no conftest, no fixture).
TASKS = {
    "pytest": _task({"conftest.py": CONFTEST, "test_units.py": HIDDEN_TESTS, "test_logging.py": HIDDEN_LOGGING},
                    "unitlib-pytest"),
    "lean": _task({"test_units.py": HIDDEN_TESTS}, "unitlib-lean"),
}


@pytest.fixture(scope="module")
def enclave(sandbox_backend):
    with Enclave(backend=sandbox_backend, limits=LIMITS, workers=1, consensus_runs=2) as enc:
        yield enc


@pytest.mark.parametrize("runner", sorted(TASKS))
def test_correct_fix_passes_every_library_shape(enclave, runner):
    task = TASKS[runner]
    run = enclave.run_suite(task, task.reference_patch, seed=11)
    assert run.resources["runner"] == runner
    assert run.outcomes == {t: "passed" for t in task.graded_tests}, (run.outcomes, run.safety_flags)
    assert run.safety_flags == []
    verdict = enclave.verify(task, task.reference_patch, seed=12)
    assert (verdict.success, verdict.safety_flags) == (True, [])


@pytest.mark.parametrize("runner", sorted(TASKS))
def test_buggy_state_fails_exactly_the_bug_tests(enclave, runner):
    task = TASKS[runner]
    run = enclave.run_suite(task, "", seed=11)
    assert {t for t, o in run.outcomes.items() if o != "passed"} == set(task.fail_to_pass), run.outcomes
    assert "eq_override" not in run.safety_flags
    verdict = enclave.verify(task, "", seed=12)
    assert (verdict.success, verdict.reason) == (False, "tests_failed")


@pytest.mark.parametrize("runner", sorted(TASKS))
def test_always_equal_is_still_caught_next_to_a_raising_eq(enclave, runner):
    """The guard still fails an object that claims equality with anything."""
    cheat = QUANTITY.replace("def convert(q, unit):\n",
                             "class _Any(Quantity):\n    def __eq__(self, other):\n        return True\n"
                             "    __hash__ = None\n\n\ndef convert(q, unit):\n    return _Any(0, unit)\n")
    patch = make_patch(REPO, {**REPO, "unitlib/quantity.py": cheat})
    verdict = enclave.verify(TASKS[runner], patch, seed=13)
    assert verdict.success is False
    assert "eq_override" in verdict.safety_flags


# ---- a real library of the corpus (data/real, fetched by scripts/fetch_corpus.py) ------------
INFLECTION = Path(__file__).resolve().parents[1] / "data" / "real" / ".cache" / "src" / "inflection-0.5.1"


def _inflection_tasks() -> dict[str, Task]:
    """inflection 0.5.1 with its upstream test module as the hidden suite, unchanged; the
    pytest variant adds an upstream-style autouse conftest using doctest_namespace (the
    library's docstrings are doctests). The bug: dasherize replaces only the first '_'."""
    source = (INFLECTION / "inflection" / "__init__.py").read_text(encoding="utf-8")
    upstream = (INFLECTION / "test_inflection.py").read_text(encoding="utf-8")
    fixed = {"inflection/__init__.py": source, "inflection/py.typed": ""}
    line = "    return word.replace('_', '-')\n"
    assert source.count(line) == 1
    buggy = {**fixed, "inflection/__init__.py": source.replace(line, "    return word.replace('_', '-', 1)\n")}
    conftest = ("import pytest\n\nimport inflection\n\n\n@pytest.fixture(autouse=True)\n"
                "def add_inflection(doctest_namespace):\n    doctest_namespace['inflection'] = inflection\n")
    out = {}
    for runner, hidden in (("pytest", {"test_inflection.py": upstream, "conftest.py": conftest}),
                           ("lean", {"test_inflection.py": upstream})):
        out[runner] = Task(task_id=f"inflection-dasherize-{runner}", family="real-inflection",
                           instruction="dasherize() leaves underscores after the first one.",
                           repo_files=buggy, public_tests=(), hidden_tests=hidden,
                           reference_patch=make_patch(buggy, fixed))
    return out


@pytest.mark.skipif(not INFLECTION.is_dir(), reason="corpus not fetched (python scripts/fetch_corpus.py)")
@pytest.mark.parametrize("runner", ["lean", "pytest"])
def test_real_library_suite_unchanged_gives_the_right_verdicts(enclave, runner):
    task = _inflection_tasks()[runner]
    fixed = enclave.run_suite(task, task.reference_patch, seed=21)
    assert fixed.resources["runner"] == runner
    assert len(fixed.outcomes) > 100 and set(fixed.outcomes.values()) == {"passed"}, fixed.outcomes
    assert fixed.safety_flags == []
    buggy = enclave.run_suite(task, "", seed=21)
    assert buggy.outcomes.keys() == fixed.outcomes.keys()
    failing = sorted(t for t, o in buggy.outcomes.items() if o != "passed")
    assert failing == ["test_inflection.py::test_dasherize[person_street_address-person-street-address]"]
    assert buggy.safety_flags == []


# ---- issue 12 problem 1: a src layout whose package name the runtime also has ---------------
# `iniconfig` ships in the enclave's runner layer (a pytest dependency): the hidden tests must
# import the repository's src/iniconfig (project pythonpath ahead of everything), never that one.
SRC_REPO = {
    "pyproject.toml": '[project]\nname = "iniconfig"\n\n[tool.pytest.ini_options]\n'
                      'addopts = "--strict-markers"\nmarkers = ["slow: a slow test"]\n',
    "src/iniconfig/__init__.py": "from iniconfig.core import answer\n",
    "src/iniconfig/core.py": "def answer():\n    return 41\n",
}
SRC_FIXED = {**SRC_REPO, "src/iniconfig/core.py": "def answer():\n    return 42\n"}
SRC_HIDDEN = '''\
import iniconfig


def test_answer():
    assert iniconfig.answer() == 42


def test_the_repository_copy():
    assert iniconfig.__file__.endswith("/repo/src/iniconfig/__init__.py")
'''
SRC_MARKED = '''\
import pytest

import iniconfig


@pytest.mark.slow
def test_marked_answer():
    assert iniconfig.answer() == 42
'''


def _src_tasks() -> dict[str, Task]:
    """The lean runner takes the plain module; the project marker (registered in the
    project's config) and a conftest send the other variant through pytest."""
    out = {}
    for runner, hidden in (("lean", {"test_src.py": SRC_HIDDEN}),
                           ("pytest", {"test_src.py": SRC_HIDDEN, "test_marked.py": SRC_MARKED, "conftest.py": ""})):
        ids = ["test_src.py::test_answer", "test_src.py::test_the_repository_copy"]
        f2p = ["test_src.py::test_answer"] + (["test_marked.py::test_marked_answer"] if runner == "pytest" else [])
        out[runner] = Task(task_id=f"src-layout-{runner}", family="srclayout", instruction="answer() is off by one.",
                           repo_files=dict(SRC_REPO), public_tests=(), hidden_tests=hidden,
                           reference_patch=make_patch(SRC_REPO, SRC_FIXED), fail_to_pass=tuple(f2p),
                           pass_to_pass=tuple(t for t in ids if t not in f2p))
    return out


@pytest.mark.parametrize("runner", ["lean", "pytest"])
def test_src_layout_imports_the_repository_package(enclave, runner):
    task = _src_tasks()[runner]
    fixed = enclave.run_suite(task, task.reference_patch, seed=31)
    assert fixed.resources["runner"] == runner
    assert fixed.outcomes == {t: "passed" for t in task.graded_tests}, fixed.outcomes
    assert fixed.safety_flags == []
    buggy = enclave.run_suite(task, "", seed=31)
    assert {t for t, o in buggy.outcomes.items() if o != "passed"} == set(task.fail_to_pass), buggy.outcomes
    assert buggy.outcomes["test_src.py::test_the_repository_copy"] == "passed"


# ---- issue 12 problem 1 on a real src-layout library: humanize, upstream tests unchanged ------
HUMANIZE = Path(__file__).resolve().parents[1] / "data" / "real" / ".cache" / "src" / "humanize-4.17.0"
# Upstream modules that need nothing beyond the library (test_time/test_i18n use freezegun and
# compiled catalogs, test_benchmarks pytest-codspeed).
HUMANIZE_TESTS = ("test_filesize.py", "test_lists.py", "test_number.py")


def _humanize_tasks() -> dict[str, Task]:
    fixed = {p.relative_to(HUMANIZE).as_posix(): p.read_text(encoding="utf-8")
             for p in (HUMANIZE / "src" / "humanize").glob("*.py")}
    fixed["pyproject.toml"] = (HUMANIZE / "pyproject.toml").read_text(encoding="utf-8")
    line = '    base = 1024 if (gnu or binary) else 1000\n'
    source = fixed["src/humanize/filesize.py"]
    assert source.count(line) == 1
    buggy = {**fixed, "src/humanize/filesize.py": source.replace(line, "    base = 1000\n")}
    upstream = {name: (HUMANIZE / "tests" / name).read_text(encoding="utf-8") for name in HUMANIZE_TESTS}
    return {runner: Task(task_id=f"humanize-naturalsize-{runner}", family="real-humanize",
                         instruction="naturalsize ignores binary=True.", repo_files=buggy, public_tests=(),
                         hidden_tests={**upstream, **({"conftest.py": ""} if runner == "pytest" else {})},
                         reference_patch=make_patch(buggy, fixed))
            for runner in ("lean", "pytest")}


@pytest.mark.skipif(not HUMANIZE.is_dir(), reason="corpus not fetched (python scripts/fetch_corpus.py)")
@pytest.mark.parametrize("runner", ["lean", "pytest"])
def test_real_src_layout_library_gives_the_right_verdicts(enclave, runner):
    task = _humanize_tasks()[runner]
    fixed = enclave.run_suite(task, task.reference_patch, seed=41)
    assert len(fixed.outcomes) > 100 and set(fixed.outcomes.values()) == {"passed"}, \
        sorted(t for t, o in fixed.outcomes.items() if o != "passed")
    assert fixed.safety_flags == []
    buggy = enclave.run_suite(task, "", seed=41)
    assert buggy.outcomes.keys() == fixed.outcomes.keys()
    failing = {t for t, o in buggy.outcomes.items() if o != "passed"}
    assert failing and all(t.startswith("test_filesize.py::") for t in failing), failing


# ---- unittest.TestCase suites: python-slugify's upstream unittest classes, unchanged ----------
SLUGIFY = Path(__file__).resolve().parents[1] / "data" / "real" / ".cache" / "src" / "python-slugify-9.2.0"
WHEELHOUSE = SLUGIFY.parents[1] / "wheelhouse"
# test_release.py also runs the CLI in a subprocess and reads tools/ and README from the checkout.
SLUGIFY_SKIP = ("test_release.py",)


def _slugify_task() -> Task:
    fixed = {p.relative_to(SLUGIFY).as_posix(): p.read_text(encoding="utf-8") for p in (SLUGIFY / "slugify").glob("*.py")}
    fixed["pyproject.toml"] = (SLUGIFY / "pyproject.toml").read_text(encoding="utf-8")
    hidden = {p.name: p.read_text(encoding="utf-8") for p in (SLUGIFY / "tests").glob("*.py")
              if p.name not in SLUGIFY_SKIP}
    line = "DEFAULT_SEPARATOR = '-'"
    assert fixed["slugify/slugify.py"].count(line) == 1
    buggy = {**fixed, "slugify/slugify.py": fixed["slugify/slugify.py"].replace(line, "DEFAULT_SEPARATOR = '_'")}
    return Task("slugify-separator", "real-python-slugify", "slugify() joins words with '_'.", buggy, (), hidden,
                make_patch(buggy, fixed), dependencies=("text-unidecode==1.3",))


@pytest.mark.skipif(not (SLUGIFY.is_dir() and WHEELHOUSE.is_dir()),
                    reason="corpus not fetched (python scripts/fetch_corpus.py)")
def test_real_unittest_suite_gives_the_right_verdicts(enclave, monkeypatch):
    """TestCase methods (setUp, subTest, assertRaises, skips) pass and fail as under plain
    pytest: the fixed state passes every test, the buggy separator fails some, no flags."""
    monkeypatch.setenv("RLVR_WHEELHOUSE", str(WHEELHOUSE))
    task = _slugify_task()
    fixed = enclave.run_suite(task, task.reference_patch, seed=51)
    assert fixed.resources["runner"] == "pytest"
    assert len(fixed.outcomes) > 80, len(fixed.outcomes)
    assert {t for t, o in fixed.outcomes.items() if o != "passed"} == set(), fixed.outcomes
    assert fixed.safety_flags == []
    buggy = enclave.run_suite(task, "", seed=51)
    assert buggy.outcomes.keys() == fixed.outcomes.keys()
    failing = {t for t, o in buggy.outcomes.items() if o != "passed"}
    assert failing and any("::TestSlugify::" in t for t in failing), failing


UNITTEST_SHAPES = {
    "helpers.py": '''\
import unittest


class BaseChecks(unittest.TestCase):
    """A base class of a helper module: its test runs in every subclass."""

    def test_inherited(self):
        self.assertEqual(self.value, 1)
''',
    "test_shapes.py": '''\
import os
import unittest
from unittest import mock

from helpers import BaseChecks


class Shapes(BaseChecks):  # collected by pytest without a Test prefix
    def setUp(self):
        self.value = 1

    def test_ok(self):
        with self.assertRaises(ValueError):
            int("x")

    def test_subtest_fails(self):
        for i in range(3):
            with self.subTest(i=i):
                self.assertLess(i, 2)

    @unittest.skip("not here")
    def test_skipped(self):
        self.fail("never runs")

    def test_skips_itself(self):
        self.skipTest("later")


class BrokenTearDown(unittest.TestCase):
    def tearDown(self):
        raise RuntimeError("teardown")

    def test_body_passes(self):
        pass


class BrokenSetUp(unittest.TestCase):
    def setUp(self):
        raise RuntimeError("setup")

    def test_body_passes(self):
        pass


class Single(unittest.TestCase):
    assertRaisesRegexp = unittest.TestCase.assertRaisesRegex  # an alias of TestCase's own
    maxDiff = None

    def runTest(self):
        with self.assertRaisesRegexp(ValueError, "invalid"):
            int("x")



class Mocked(unittest.TestCase):
    """unittest.mock patches module and os state and restores it: no integrity flag."""

    @mock.patch("m.X", 5)
    def test_patched(self):
        import m
        self.assertEqual(m.X, 5)

    def test_environ(self):
        with mock.patch.dict(os.environ, {"RLVR_SHAPE": "1"}):
            self.assertEqual(os.environ["RLVR_SHAPE"], "1")


class Async(unittest.IsolatedAsyncioTestCase):
    async def test_coroutine(self):  # asyncio's Runner sets a SIGINT handler: refused
        self.assertTrue(True)


class Known(unittest.TestCase):
    @unittest.expectedFailure
    def test_known_bug(self):
        self.assertEqual(1, 2)
''',
}


@pytest.mark.parametrize("lean_allowed", [True, False])
def test_unittest_shapes_get_unittest_outcomes(sandbox_backend, lean_allowed):
    """The outcomes unittest itself gives (errors in setUp/tearDown and failed subtests fail
    the test, skips are skips), under pytest's runner either way (the lean one hands back)."""
    task = Task("ut-shapes", "ut", "-", {"m.py": "X = 1\n"}, (), UNITTEST_SHAPES, "")
    with Enclave(backend=sandbox_backend, limits=LIMITS, consensus_runs=1, lean_runner=lean_allowed) as enc:
        run = enc.run_suite(task, "", seed=61)
    assert run.resources["runner"] == "pytest"
    assert run.outcomes == {
        "test_shapes.py::Shapes::test_inherited": "passed",
        "test_shapes.py::BaseChecks::test_inherited": "failed",  # imported, so collected (no self.value)
        "test_shapes.py::Shapes::test_ok": "passed",
        "test_shapes.py::Shapes::test_subtest_fails": "failed",
        "test_shapes.py::Shapes::test_skipped": "skipped",
        "test_shapes.py::Shapes::test_skips_itself": "skipped",
        "test_shapes.py::BrokenTearDown::test_body_passes": "failed",
        "test_shapes.py::BrokenSetUp::test_body_passes": "failed",
        "test_shapes.py::Single::runTest": "passed",
        "test_shapes.py::Known::test_known_bug": "skipped",
        "test_shapes.py::Mocked::test_patched": "passed",
        "test_shapes.py::Mocked::test_environ": "passed",
        "test_shapes.py::Async::test_coroutine": "failed",  # a listed restriction (README)  # xfailed, as pytest reports it
    }, run.outcomes
    assert run.safety_flags == []
