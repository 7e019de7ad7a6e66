"""What every stage module shares: argument parsing conventions and the progress bar (the
library's, `rlvr.progress`, re-exported so stages and library loops look the same)."""
from __future__ import annotations

import argparse
from pathlib import Path

from rlvr.progress import progress

__all__ = ["parser", "progress"]


def parser(stage: str, doc: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m stages.{stage}", description=doc)
    p.add_argument("--params", type=Path, default=Path("params.yaml"))
    return p
