"""Build small tasks and seed families inside tests, in their documented on-disk formats: a
hand-authored task directory (`write_task`) and a seed family for synthesis (`write_family`,
the tiny `minikit` library with its tests)."""
from __future__ import annotations

from pathlib import Path

import yaml

from rlvr.tasks.patches import make_patch

BUGGY_CORE = '''\
def clamp(x, low, high):
    """Limit x to [low, high]."""
    if x < low:
        return low
    if x > high:
        return low
    return x


def double(x):
    return 2 * x
'''

FIXED_CORE = BUGGY_CORE.replace("    if x > high:\n        return low",
                                "    if x > high:\n        return high")

PUBLIC_TEST = '''\
from mini.core import clamp


def test_clamp_below():
    assert clamp(-5, 0, 10) == 0
'''

HIDDEN_TEST = '''\
from mini.core import clamp, double


def test_clamp_above():
    assert clamp(50, 0, 10) == 10


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_clamp_below():
    assert clamp(-5, 0, 10) == 0


def test_double():
    assert double(4) == 8
'''

INSTRUCTION = ("clamp(50, 0, 10) returns 0, but a value above the range should be limited "
               "to the upper bound (expected 10).")


def write_task(root: Path, name: str = "mini-clamp", *, buggy: str = BUGGY_CORE,
               fixed: str = FIXED_CORE, hidden: dict[str, str] | None = None,
               public: str = PUBLIC_TEST, instruction: str = INSTRUCTION,
               family: str = "mini", reference: str | None = None) -> Path:
    """Write one task directory under `root` and return it."""
    task = root / name
    files = {"mini/__init__.py": "", "mini/core.py": buggy, "tests/test_public.py": public}
    for rel, text in files.items():
        (task / "repo" / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / "repo" / rel).write_text(text)
    for rel, text in (hidden or {"test_hidden.py": HIDDEN_TEST}).items():
        (task / "hidden_tests" / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / "hidden_tests" / rel).write_text(text)
    if reference is None:
        reference = make_patch({"mini/core.py": buggy}, {"mini/core.py": fixed})
    (task / "reference.patch").write_text(reference)
    (task / "task.yaml").write_text(yaml.safe_dump(
        {"family": family, "instruction": instruction}, sort_keys=True))
    return task


MINIKIT_CORE_PATH = "minikit/core.py"
MINIKIT_CORE = '''\
"""Tiny seed family for the synthesis tests."""


def clamp(x, low, high):
    """Limit x to [low, high]."""
    if x < low:
        return low
    if x > high:
        return high
    return x


def total(values, start=0):
    result = start
    for v in values:
        result += v  # running sum
    return result


def window(items, size):
    """Consecutive slices of `size` items (Ünïcode in a docstring is fine)."""
    out = []
    for i in range(len(items) - size + 1):
        out.append(items[i:i + size])
    return out


def both_positive(a, b):
    return a > 0 and b > 0


def describe(name, count):
    label = "item" if count == 1 else "items"
    return f"{count} {label} in {name}"


def span(values):
    return clamp(max(values) - min(values), 0, 100)


class Counter:
    def __init__(self):
        self.n = 0

    def bump(self, by=1):
        if by <= 0:
            raise ValueError("by must be positive")
        self.n += by
        return self.n
'''

MINIKIT_TESTS = '''\
import pytest

from minikit.core import Counter, both_positive, clamp, describe, span, total, window


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_clamp_below():
    assert clamp(-3, 0, 10) == 0


def test_clamp_above():
    assert clamp(42, 0, 10) == 10


def test_total():
    assert total([1, 2, 3]) == 6


def test_total_start():
    assert total([1], start=10) == 11


def test_window():
    assert window([1, 2, 3], 2) == [[1, 2], [2, 3]]


def test_both_positive():
    assert both_positive(1, 2)
    assert not both_positive(1, -1)


def test_describe():
    assert describe("box", 1) == "1 item in box"
    assert describe("box", 3) == "3 items in box"


def test_span():
    assert span([3, 9, 4]) == 6


def test_counter_bumps():
    c = Counter()
    assert c.bump() == 1
    assert c.bump(2) == 3


def test_counter_rejects_zero():
    with pytest.raises(ValueError):
        Counter().bump(0)
'''

MINIKIT_FILES = {"minikit/__init__.py": "", MINIKIT_CORE_PATH: MINIKIT_CORE,
                 "README.md": "minikit\n"}
MINIKIT_TEST_FILES = {"test_core.py": MINIKIT_TESTS}


def write_family(root, name: str = "minikit", *, package: str = "minikit", extra: str = ""):
    """The tiny family on disk in the seed-repo layout: `package` renames the library
    package, `extra` is appended to its core module."""
    fam = root / name
    files = {**MINIKIT_FILES, MINIKIT_CORE_PATH: MINIKIT_CORE + extra}
    for rel, text in files.items():
        rel = rel.replace("minikit/", f"{package}/")
        (fam / rel).parent.mkdir(parents=True, exist_ok=True)
        (fam / rel).write_text(text)
    (fam / "tests").mkdir(parents=True, exist_ok=True)
    for rel, text in MINIKIT_TEST_FILES.items():
        (fam / "tests" / rel).write_text(text.replace("from minikit.", f"from {package}."))
    return fam
