"""A tiny but complete task: a 2-module package with one bug, public tests, a hidden suite
(with a hidden conftest fixture and parametrized tests), its FAIL_TO_PASS / PASS_TO_PASS
ids and the reference patch. Shared by test_enclave.py and test_adversarial.py."""
from __future__ import annotations

from rlvr.tasks.patches import make_patch
from rlvr.tasks.model import Task

CORE = '''\
"""Small numeric helpers."""


def clamp(x, lo, hi):
    """x limited to the closed interval [lo, hi]."""
    if x < lo:
        return lo
    if x > hi:
        return lo
    return x


def mean(xs):
    return sum(xs) / len(xs)
'''

UTIL = '''\
def spread(xs):
    return max(xs) - min(xs)
'''

INIT = '''\
from mathpkg.core import clamp, mean
from mathpkg.util import spread

__all__ = ["clamp", "mean", "spread"]
'''

PUBLIC = '''\
from mathpkg import clamp


def test_inside():
    assert clamp(5, 0, 10) == 5
'''

HIDDEN_CORE = '''\
import pytest

from mathpkg import clamp, mean


@pytest.mark.parametrize("x,lo,hi,want", [(5, 0, 10, 5), (-1, 0, 10, 0), (11, 0, 10, 10), (100, -5, 5, 5)])
def test_clamp(x, lo, hi, want):
    assert clamp(x, lo, hi) == want


def test_clamp_fixture(big):
    assert clamp(big + 5, 0, big) == big


def test_mean():
    assert mean([1, 2, 3]) == 2


def test_mean_empty():
    with pytest.raises(ZeroDivisionError):
        mean([])


class TestUpper:
    def test_upper_bound(self):
        result = clamp(7, 1, 3)
        assert result == 3
'''

HIDDEN_UTIL = '''\
from mathpkg import spread


def test_spread():
    assert spread([3, 1, 4, 1, 5]) == 4
'''

HIDDEN_CONFTEST = '''\
import pytest


@pytest.fixture
def big():
    return 10
'''

# The same suite (same test ids) without the conftest fixture: plain enough for the
# enclave's lean runner, so that every attack is tried against both runners.
HIDDEN_CORE_LEAN = HIDDEN_CORE.replace(
    "def test_clamp_fixture(big):\n",
    "BIG = 10\n\n\ndef test_clamp_fixture():\n    big = BIG\n",
)

FAIL_TO_PASS = (
    "test_core.py::test_clamp[11-0-10-10]",
    "test_core.py::test_clamp[100--5-5-5]",
    "test_core.py::test_clamp_fixture",
    "test_core.py::TestUpper::test_upper_bound",
)
PASS_TO_PASS = (
    "test_core.py::test_clamp[5-0-10-5]",
    "test_core.py::test_clamp[-1-0-10-0]",
    "test_core.py::test_mean",
    "test_core.py::test_mean_empty",
    "test_util.py::test_spread",
)
ALL_HIDDEN = FAIL_TO_PASS + PASS_TO_PASS

REPO = {
    "mathpkg/__init__.py": INIT,
    "mathpkg/core.py": CORE,
    "mathpkg/util.py": UTIL,
    "tests/test_public.py": PUBLIC,
}
HIDDEN = {"test_core.py": HIDDEN_CORE, "test_util.py": HIDDEN_UTIL, "conftest.py": HIDDEN_CONFTEST}
HIDDEN_LEAN = {"test_core.py": HIDDEN_CORE_LEAN, "test_util.py": HIDDEN_UTIL}
FIXED_CORE = CORE.replace("    if x > hi:\n        return lo", "    if x > hi:\n        return hi")


def with_core(core: str, extra: dict[str, str | None] | None = None) -> dict[str, str]:
    """The source tree with mathpkg/core.py replaced (and optional extra files)."""
    files = dict(REPO)
    files["mathpkg/core.py"] = core
    for path, text in (extra or {}).items():
        if text is None:
            files.pop(path, None)
        else:
            files[path] = text
    return files


def patch_to(files: dict[str, str]) -> str:
    return make_patch(REPO, files)


def make_task(**changes) -> Task:
    task = Task(
        task_id="tiny-clamp",
        family="tiny",
        instruction="clamp() returns the lower bound for values above the upper bound.",
        repo_files=dict(REPO),
        public_tests=("tests/test_public.py",),
        hidden_tests=dict(HIDDEN),
        reference_patch=patch_to(with_core(FIXED_CORE)),
        fail_to_pass=FAIL_TO_PASS,
        pass_to_pass=PASS_TO_PASS,
    )
    return task.with_(**changes) if changes else task
