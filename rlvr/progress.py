"""The one progress bar: stages and library loops (rollout, verification, curation) show
progress the same way, and tests / CI logs silence all of it with RLVR_PROGRESS=0."""
from __future__ import annotations

import os

from tqdm import tqdm


def progress(total: int, desc: str, unit: str = "task") -> tqdm:
    """A progress bar on stderr over `total` units; disabled when RLVR_PROGRESS=0."""
    return tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True,
                disable=os.environ.get("RLVR_PROGRESS", "1") == "0")
