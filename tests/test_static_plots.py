"""rlvr.artifacts.plots: the PNGs that render where DVC's Vega charts cannot (offline)."""
from __future__ import annotations

from PIL import Image

from rlvr.artifacts.plots import curves_png, heatmap_png, read_csv_rows
from rlvr.train.curves import write_loss_csv


def test_curves_png_draws_measured_columns_only_and_is_byte_stable(tmp_path):
    rows = [{"step": 1, "train/loss": 2.0}, {"step": 2, "train/loss": 1.5, "val/loss": 1.7},
            {"step": 3, "train/loss": 1.2}]
    csv_path, png = tmp_path / "curves.csv", tmp_path / "curves.png"
    write_loss_csv(csv_path, rows, columns=("step", "train/loss", "val/loss", "eval/never"),
                   png=png, title="sft")
    assert Image.open(png).format == "PNG"
    drawn = curves_png(read_csv_rows(csv_path), tmp_path / "again.png", title="sft")
    assert drawn == ["train_loss", "val_loss"]          # eval_never: no value, no panel
    assert (tmp_path / "again.png").read_bytes() == png.read_bytes()


def test_curves_png_with_nothing_measured_still_writes_an_image(tmp_path):
    assert curves_png([{"step": "1", "x": ""}], tmp_path / "empty.png") == []
    assert Image.open(tmp_path / "empty.png").size[0] > 0


def test_heatmap_png_grid_of_families_by_operators(tmp_path):
    rows = [{"family": "a", "operator": "swap", "yield": 0.5},
            {"family": "b", "operator": "flip", "yield": 1.0},
            {"family": "b", "operator": "swap", "yield": "0.25"}]
    heatmap_png(rows, tmp_path / "h.png", row="family", col="operator", value="yield")
    heatmap_png(list(reversed(rows)), tmp_path / "h2.png", row="family", col="operator",
                value="yield")
    assert (tmp_path / "h.png").read_bytes() == (tmp_path / "h2.png").read_bytes()
    assert not list(tmp_path.glob(".*"))                 # no temp file left beside them
