"""Static PNGs beside the CSVs that `dvc plots` renders.

Why: `dvc plots show` draws CSV plots with Vega-Lite loaded from a CDN, which an offline
machine cannot reach (the chart stays blank); PNG plots are embedded as images and render
anywhere, in DVC's HTML, the MLflow UI and a Markdown viewer alike. Every PNG here is
written atomically and without the matplotlib version in its metadata, so the same rows give
the same bytes.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from rlvr.artifacts.io import atomic_path


def pyplot():
    """matplotlib's pyplot on the non-interactive Agg backend (no display on these machines)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path: Path | str, dpi: int = 110) -> None:
    """Write `fig` to `path` atomically, byte-stable (no Software tag), and close it."""
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", dpi=dpi, metadata={"Software": None})
    pyplot().close(fig)


def read_csv_rows(path: Path | str) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _number(text: str | None) -> float | None:
    try:
        value = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def curves_png(rows: Sequence[Mapping[str, Any]], path: Path | str, *, x: str = "step",
               title: str = "") -> list[str]:
    """One small panel per measured column of `rows` (dicts as read from a curves CSV; empty
    cells = not measured at that step) against `x`; the columns drawn. A column never
    measured gets no panel; with none at all the PNG says so."""
    columns = [c for c in (rows[0] if rows else {}) if c != x]
    series = {c: [(float(r[x]), v) for r in rows if (v := _number(r.get(c))) is not None]
              for c in columns}
    series = {c: pts for c, pts in series.items() if pts}
    plt = pyplot()
    n = max(1, len(series))
    cols = min(n, 4)
    lines = (n + cols - 1) // cols
    fig, axes = plt.subplots(lines, cols, figsize=(3.4 * cols, 2.6 * lines), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax, (name, pts) in zip(flat, series.items()):
        ax.plot([p for p, _ in pts], [v for _, v in pts], marker="o" if len(pts) < 30 else None,
                markersize=3)
        ax.set_title(name, fontsize=8)
        ax.set_xlabel(x, fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in flat[len(series):]:
        ax.axis("off")
    if not series:
        flat[0].text(0.5, 0.5, "no measured values", ha="center", va="center")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_png(fig, path)
    return list(series)


def heatmap_png(rows: Sequence[Mapping[str, Any]], path: Path | str, *, row: str, col: str,
                value: str, title: str = "") -> None:
    """`value` for every (`row`, `col`) pair as an annotated grid (e.g. synthesis yield per
    family x operator); an empty cell is a pair with no row."""
    rows_ = sorted({str(r[row]) for r in rows})
    cols_ = sorted({str(r[col]) for r in rows})
    grid = [[math.nan] * len(cols_) for _ in rows_]
    for r in rows:
        v = _number(str(r[value]))
        if v is not None:
            grid[rows_.index(str(r[row]))][cols_.index(str(r[col]))] = v
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(1.0 + 0.62 * max(1, len(cols_)),
                                    1.2 + 0.36 * max(1, len(rows_))))
    image = ax.imshow(grid or [[math.nan]], vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(cols_)), cols_, rotation=45, ha="right", fontsize=7)
    ax.set_yticks(range(len(rows_)), rows_, fontsize=7)
    for i, line in enumerate(grid):
        for j, v in enumerate(line):
            if not math.isnan(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if v < 0.5 else "black")
    fig.colorbar(image, ax=ax, fraction=0.03)
    ax.set_title(title or f"{value} by {row} x {col}", fontsize=9)
    fig.tight_layout()
    save_png(fig, path)
