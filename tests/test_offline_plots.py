"""`dvc plots show` renders offline (issue 39 item 6): the project's DVC config points DVC at
a page template with vega, vega-lite and vega-embed inline, the very versions DVC's renderer
would load from its CDN. The rendering itself, in headless Chromium with the network cut:
scripts/plots_screenshot.sh (docs/plots_offline.png)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from offline_plots import OUT, renderer_packages  # noqa: E402


def test_dvc_config_names_the_offline_template_and_it_inlines_dvcs_versions():
    from dvc.repo import Repo

    with Repo(str(ROOT)) as repo:
        assert (Path(repo.dvc_dir) / repo.config["plots"]["html_template"]) == OUT
    page = OUT.read_text(encoding="utf8")
    assert "{plot_divs}" in page
    assert not re.search(r"<script[^>]*\bsrc=", page)           # nothing loaded from anywhere
    assert re.findall(r'data-package="([^"]+)"', page) == renderer_packages()


def test_dvc_plots_show_writes_a_page_that_loads_nothing(tmp_path):
    dvc = Path(sys.executable).with_name("dvc")
    done = subprocess.run([str(dvc), "plots", "show", "-o", str(tmp_path / "out")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "out" / "index.html").read_text(encoding="utf8")
    assert "cdn.jsdelivr.net" not in page and not re.search(r"<script[^>]*\bsrc=", page)
    assert page.count("vegaEmbed(") >= 3       # the Vega charts (yields, curves, pass@k)
    assert "<img" in page                      # and the PNGs beside them
