"""Docs helper: the README's MLflow screenshots, from a store `make pipeline` wrote.

Like scripts/screenshots_prefect.py (whose server helpers it uses): not part of the project
and not a project dependency; it needs Playwright and a Chromium executable and runs under
that Python, while the MLflow UI runs with this checkout's `.venv`. Three pictures:

- `mlflow-runs.png`: the experiment's runs, the full pipeline run expanded into its nested
  stage runs with their logged input datasets;
- `mlflow-compare.png`: two pipeline runs compared (their `gate` stage runs: the params that
  differ and the decision metrics), e.g. `make pipeline` and a later `dvc exp run -S
  gate.tolerance=...`;
- `mlflow-registry.png`: the registered policy model, its versions' tags and the `champion`
  alias the gate moves.

    /path/to/playwright-python scripts/screenshots_mlflow.py --chromium /usr/bin/chromium \\
        --store /path/to/clone/mlflow.db --out-dir docs/screenshots
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from screenshots_prefect import ROOT, VIEWPORT, api, start, stop, wait_for  # noqa: E402

EXPERIMENT = "rlvr"
MODEL = "rlvr-policy"


def runs(base: str, experiment_id: str) -> list[dict]:
    """Every run of the experiment, newest first, as {id, name, parent, params}."""
    out = api(base, "/api/2.0/mlflow/runs/search",
              {"experiment_ids": [experiment_id], "max_results": 1000,
               "order_by": ["attributes.start_time DESC"]})
    rows = []
    for r in out.get("runs", []):
        tags = {t["key"]: t["value"] for t in r["data"].get("tags", [])}
        rows.append({"id": r["info"]["run_id"], "name": r["info"].get("run_name", ""),
                     "parent": tags.get("mlflow.parentRunId")})
    return rows


def pick(rows: list[dict]) -> tuple[str, list[str]]:
    """(name of the newest `make pipeline` parent run, the `gate` runs of the two newest
    parents that have one)."""
    parents = [r for r in rows if r["parent"] is None]
    full = next((r["name"] for r in parents if r["name"].startswith("pipeline make-")), None)
    if full is None:
        raise SystemExit("no `make pipeline` parent run in this store")
    gates = []
    for parent in parents:
        gate = next((r["id"] for r in rows if r["parent"] == parent["id"]
                     and r["name"] == "gate"), None)
        if gate:
            gates.append(gate)
        if len(gates) == 2:
            break
    if len(gates) < 2:
        raise SystemExit("fewer than two pipeline runs with a gate stage in this store")
    return full, gates


def shoot(chromium: str, ui: str, experiment_id: str, full_run: str, gates: list[str],
          out_dir: Path) -> None:
    from playwright.sync_api import sync_playwright

    out_dir.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport=VIEWPORT)

        def click(selector, wait_ms: int = 1500) -> None:
            try:
                (page.locator(selector) if isinstance(selector, str) else selector) \
                    .first.click(timeout=4000)
                page.wait_for_timeout(wait_ms)
            except Exception:  # noqa: BLE001 - a popup that is not there needs no closing
                pass

        page.goto(f"{ui}/#/experiments/{experiment_id}")
        page.wait_for_timeout(6000)
        click("text=Got it")
        click("text=Model training")        # MLflow 3 opens on its GenAI view
        click("[aria-label=Close]")         # the assistant panel
        row = page.locator("[role=row]", has_text=full_run)
        click(row.locator("button"), 3000)  # expand the parent into its stage runs
        page.screenshot(path=str(out_dir / "mlflow-runs.png"))
        compare = urllib.parse.quote(json.dumps(gates))
        page.goto(f"{ui}/#/compare-runs?runs={compare}&experiments="
                  f"{urllib.parse.quote(json.dumps([experiment_id]))}")
        page.wait_for_timeout(5000)
        page.screenshot(path=str(out_dir / "mlflow-compare.png"))
        page.goto(f"{ui}/#/models/{MODEL}")
        page.wait_for_timeout(5000)
        page.screenshot(path=str(out_dir / "mlflow-registry.png"))
        browser.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chromium", required=True, help="a Chromium/Chrome executable")
    ap.add_argument("--store", type=Path, required=True, help="the pipeline's mlflow.db")
    ap.add_argument("--out-dir", type=Path, default=ROOT / "docs" / "screenshots")
    ap.add_argument("--port", type=int, default=5055)
    ap.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args(argv)
    ui = f"http://127.0.0.1:{args.port}"
    log = Path(tempfile.mkdtemp(prefix="rlvr-mlflow-shots-")) / "mlflow.log"
    server = start([str(ROOT / ".venv" / "bin" / "mlflow"), "ui", "--backend-store-uri",
                    f"sqlite:///{args.store.resolve()}", "--host", "127.0.0.1",
                    "--port", str(args.port)], dict(os.environ), log)
    try:
        wait_for("the MLflow UI", lambda: api(ui, "/api/2.0/mlflow/experiments/get-by-name?"
                                              f"experiment_name={EXPERIMENT}"), args.timeout)
        exp = api(ui, f"/api/2.0/mlflow/experiments/get-by-name?experiment_name={EXPERIMENT}")
        experiment_id = exp["experiment"]["experiment_id"]
        full_run, gates = pick(runs(ui, experiment_id))
        shoot(args.chromium, ui, experiment_id, full_run, gates, args.out_dir)
    finally:
        stop(server)
    for name in ("mlflow-runs.png", "mlflow-compare.png", "mlflow-registry.png"):
        print(args.out_dir / name)


if __name__ == "__main__":
    main()
