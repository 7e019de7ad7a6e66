"""What every stage module shares: its argument parsing conventions (`--params`,
`--details`, the `python -m stages.<name>` program name)."""
from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["parser"]


def parser(stage: str, doc: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m stages.{stage}", description=doc)
    p.add_argument("--params", type=Path, default=Path("params.yaml"))
    p.add_argument("--details", type=Path,
                   help="write every metric here and only the stage's headline numbers to "
                        "--metrics (rlvr/tracking/headline.py); the DAG passes "
                        "reports/stages/<stage>.json")
    return p
