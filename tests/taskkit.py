"""Build small hand-authored task directories inside tests (the documented on-disk format)."""
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

FIXED_CORE = BUGGY_CORE.replace("    if x > high:\n        return low", "    if x > high:\n        return high")

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
