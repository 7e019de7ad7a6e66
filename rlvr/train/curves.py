"""Training curves for DVC plots: the `log` callback that keeps every step's metrics
(`LossCurves`) and the CSV (and PNG) they are written to (`write_loss_csv`), for the SFT and
GRPO stages alike."""
from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Callable, Sequence

from rlvr.artifacts.io import write_text
from rlvr.artifacts.plots import curves_png

LogFn = Callable[[int, dict[str, float]], None]


def write_loss_csv(path: Path | str, rows: Sequence[dict[str, Any]],
                   columns: Sequence[str] = ("step", "train/loss", "val/loss"),
                   png: Path | str | None = None, title: str = "") -> None:
    """A DVC plots CSV of loss curves (one row per logged step; empty cell = not measured at
    that step), written atomically, and optionally the same curves as a PNG (renders offline,
    `rlvr.artifacts.plots`). `rows`: dicts with a `step` key, e.g. collected from the `log`
    callback with `LossCurves`."""
    by_step: dict[int, dict[str, Any]] = {}
    for r in rows:
        by_step.setdefault(int(r["step"]), {}).update(r)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([c.replace("/", "_") for c in columns])
    for step in sorted(by_step):
        r = by_step[step]
        w.writerow([step if c == "step" else
                    ("" if r.get(c) is None else f"{float(r[c]):.6g}") for c in columns])
    write_text(path, buf.getvalue())
    if png is not None:
        curves_png(list(csv.DictReader(io.StringIO(buf.getvalue()))), png, title=title)


class LossCurves:
    """A `log` callback that remembers every step's metrics (and forwards them to `then`),
    for `write_loss_csv` at the end."""

    def __init__(self, then: LogFn | None = None):
        self.rows: list[dict[str, Any]] = []
        self.then = then

    def __call__(self, step: int, metrics: dict[str, float]) -> None:
        self.rows.append({"step": step, **metrics})
        if self.then is not None:
            self.then(step, metrics)
