"""Import a repository script (`bench/*.py`, `scripts/*.py`: files, not packages) as a module,
once per test session, so tests can call its functions."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def load_script(relpath: str) -> ModuleType:
    """The module of `REPO/relpath`, registered under its file stem before it runs
    (dataclasses look their module up in sys.modules)."""
    path = REPO / relpath
    name = path.stem
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
