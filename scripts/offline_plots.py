"""Write `.dvc/offline_plots.html`: the HTML template `dvc plots show` uses here
(`.dvc/config`: `plots.html_template`), with vega, vega-lite and vega-embed inline.

Why: DVC's default page loads those three scripts from a CDN, so every Vega chart of
`dvc plots show` is blank offline (only the PNGs rendered). The versions are the ones the
installed DVC renderer names (`dvc_render.vega.VegaRenderer.SCRIPTS`), fetched with
`npm pack` from the npm registry and checked against the sha512 integrity pinned below
before anything is written; the output is committed, so a clone renders offline without
npm. Rerun after a DVC upgrade that moves those versions (tests/test_offline_plots.py fails
until then):

    .venv/bin/python scripts/offline_plots.py
"""
from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / ".dvc" / "offline_plots.html"

# npm's `dist.integrity` of each tarball (`npm view <pkg>@<version> dist.integrity`)
INTEGRITY = {
    "vega@5.20.2": "sha512-qmH7aD9GGPpssVdxL1xgcdxTbQzyRUeRR16Os385ymvQhiwCYQNA6+eXUPAZDTVLfk0RXu6Jzj6kUE5jQ80EVw==",
    "vega-lite@5.2.0": "sha512-Yxcg8MvYfxHcG6BbkaKT0oVCIMIcE19UvqIsEwBmyd/7h2nzW7oRnID81T8UrY7hpDrIr6wa2JADOT2dhGNErw==",
    "vega-embed@6.18.2": "sha512-wcDyQPE4J5aiCDc3/suH5RQDvrKkjuLkhzUcbOLwEkNF8/+pp17tS0JghzEvAPNRg+5aG1/N2ydixq8Lk3dOlg==",
}

PAGE = """<!DOCTYPE html>
<html>
<head>
    {{refresh_tag}}
    <title>DVC Plot</title>
    <!-- Written by scripts/offline_plots.py: {packages}, inline (no CDN).
         vega, vega-lite and vega-embed: BSD-3-Clause, Copyright (c) the University of
         Washington Interactive Data Lab; their LICENSE files follow each script. -->
{scripts}
    <style>
        table {{
            border-spacing: 15px;
        }}
    </style>
</head>
<body>
    {{plot_divs}}
</body>
</html>"""


def renderer_packages() -> list[str]:
    """`name@version` of each script the installed DVC renderer loads, in its order."""
    from dvc_render.vega import VegaRenderer

    return re.findall(r"cdn\.jsdelivr\.net/npm/([\w-]+@[\d.]+)", VegaRenderer.SCRIPTS)


def fetch(spec: str, work: Path) -> tuple[str, str]:
    """(the minified build, its LICENSE) of `spec`, its tarball checked against INTEGRITY."""
    if spec not in INTEGRITY:
        raise SystemExit(f"offline_plots: DVC's renderer names {spec}, which INTEGRITY does "
                         "not pin: add its `npm view ... dist.integrity`")
    done = subprocess.run(["npm", "pack", spec, "--json", "--pack-destination", str(work)],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"offline_plots: npm pack {spec}: {done.stderr.strip()[-300:]}")
    tarball = work / json.loads(done.stdout)[0]["filename"]
    data = tarball.read_bytes()
    algo, _, want = INTEGRITY[spec].partition("-")
    got = base64.b64encode(hashlib.new(algo, data).digest()).decode()
    if got != want:
        raise SystemExit(f"offline_plots: {spec}: integrity {algo}-{got} != pinned {INTEGRITY[spec]}")
    name = spec.rsplit("@", 1)[0]
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        js = tar.extractfile(f"package/build/{name}.min.js").read().decode()
        licence = tar.extractfile("package/LICENSE").read().decode()
    if "</script" in js.lower() or any("{" + p + "}" in js for p in ("plot_divs", "scripts", "refresh_tag")):
        raise SystemExit(f"offline_plots: {spec}: the build holds a sequence the page cannot inline")
    return js, licence


def main() -> None:
    packages = renderer_packages()
    parts = []
    with tempfile.TemporaryDirectory() as tmp:
        for spec in packages:
            js, licence = fetch(spec, Path(tmp))
            parts.append(f'    <script type="text/javascript" data-package="{spec}">\n{js}\n    </script>\n'
                         f"    <!-- {spec} LICENSE:\n{licence.replace('--', '- -')}\n    -->")
    page = PAGE.format(packages=", ".join(packages), scripts="\n".join(parts))
    tmp_out = OUT.with_suffix(".tmp")
    tmp_out.write_text(page, encoding="utf8")
    os.replace(tmp_out, OUT)
    print(f"offline_plots: {OUT.relative_to(ROOT)} ({len(page) // 1024} KiB: {', '.join(packages)})")


if __name__ == "__main__":
    sys.exit(main())
