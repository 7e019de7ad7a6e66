"""What every stage module shares: argument parsing conventions and the progress bar."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from tqdm import tqdm


def parser(stage: str, doc: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m stages.{stage}", description=doc)
    p.add_argument("--params", type=Path, default=Path("params.yaml"))
    return p


def progress(total: int, desc: str) -> tqdm:
    """A progress bar on stderr; quiet when RLVR_PROGRESS=0 (tests, CI logs)."""
    return tqdm(total=total, desc=desc, unit="task", dynamic_ncols=True,
                disable=os.environ.get("RLVR_PROGRESS", "1") == "0")
