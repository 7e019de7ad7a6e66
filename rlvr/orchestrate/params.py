"""`dvc exp run -S` style param overrides, applied by DVC's own code."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from rlvr.errors import ConfigError


def apply_param_overrides(root: Path, overrides: Iterable[str]) -> dict[str, list[str]]:
    """`dvc exp run -S` overrides (`[FILE:]KEY=VALUE`, Hydra syntax; FILE defaults to
    params.yaml) written into the params files by DVC's own code for `-S`."""
    from dvc.exceptions import DvcException
    from dvc.utils.cli_parse import to_path_overrides
    from dvc.utils.hydra import apply_overrides

    by_file = to_path_overrides(list(overrides))
    for rel, items in by_file.items():
        path = root / rel
        if not path.is_file():
            raise ConfigError(f"{path}: params file of override(s) {items} not found")
        try:
            apply_overrides(str(path), items)
        except DvcException as exc:
            raise ConfigError(f"{path}: bad param override(s) {items}: {exc}") from None
    return by_file
