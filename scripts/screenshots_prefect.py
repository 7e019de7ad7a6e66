"""Docs helper: the README's Prefect screenshots (a flow run and the served deployment).

Not part of the project and not a project dependency: it needs Playwright
(`pip install playwright` in any Python, e.g. a separate venv) and a Chromium executable,
and runs under that Python. Everything Prefect-side is the README's "Scheduling with
Prefect" steps, run with this checkout's `.venv`:

    1. `prefect server start --host 127.0.0.1 --port PORT` with `PREFECT_UI_API_URL` set
       (a non-default port, so the UI calls its own API) and a fresh `PREFECT_HOME`;
    2. `python -m flows.pipeline --serve` (the deployment `rlvr-pipeline/rlvr-nightly`);
    3. `prefect deployment run rlvr-pipeline/rlvr-nightly --param 'targets=[...]'`;
    4. wait for that flow run to finish, then screenshot its page and the deployment's page.

The run executes real DVC stages in this checkout (`dvc repro --single-item`) with the
deployment's own `set_params`, which, like `dvc exp run -S`, leaves `params.yaml` modified
and saves a DVC experiment: run it in a scratch clone
(`git clone . /tmp/shots && ln -s "$PWD/.venv" /tmp/shots/.venv`).

    /path/to/playwright-python scripts/screenshots_prefect.py \
        --chromium /usr/bin/chromium --out-dir docs/screenshots
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEPLOYMENT = "rlvr-pipeline/rlvr-nightly"
TERMINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}
VIEWPORT = {"width": 1600, "height": 1000}


def api(base: str, path: str, body: dict | None = None):
    """GET (or POST `body`) a Prefect REST endpoint; JSON in, JSON out."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)


def wait_for(what: str, probe, timeout_s: float):
    """Poll `probe()` until it returns a truthy value (errors count as not yet)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value:
                return value
        except (urllib.error.URLError, OSError, ValueError):
            pass
        time.sleep(2)
    raise SystemExit(f"timed out after {timeout_s:.0f} s waiting for {what}")


def start(argv: list[str], env: dict, log: Path) -> subprocess.Popen:
    """A background process in its own process group (so stop() ends its children too)."""
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_deployment(env: dict, targets: list[str]) -> str:
    """The README's `prefect deployment run`; returns the new flow run's id."""
    out = subprocess.run([str(ROOT / ".venv/bin/prefect"), "deployment", "run", DEPLOYMENT,
                          "--param", f"targets={json.dumps(targets)}"],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout
    match = re.search(r"UUID:\s*([0-9a-f-]{36})", out)
    if not match:
        raise SystemExit(f"no flow run id in `prefect deployment run` output:\n{out}")
    return match.group(1)


def shoot(chromium: str, ui: str, flow_run_id: str, deployment_id: str, out_dir: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport=VIEWPORT)

        def open_page(url: str) -> None:
            page.goto(url, wait_until="networkidle")
            page.wait_for_timeout(4000)           # the run graph draws after the data loads
            page.keyboard.press("Escape")        # any welcome / what's-new dialog

        def save(name: str) -> None:
            page.wait_for_timeout(1500)
            page.screenshot(path=str(out_dir / name))
            print(out_dir / name)

        # The flow run: its graph (one task per stage) above the log, newest lines first so
        # the stages' "Finished in state Completed()" lines are in view. The sort control is
        # a custom select; the keyboard is what reliably picks its second option.
        open_page(f"{ui}/runs/flow-run/{flow_run_id}")
        sort = page.locator(".logs-sort button")
        sort.focus()
        page.keyboard.press("ArrowDown")
        page.keyboard.press("Enter")
        save("prefect-flow-run.png")
        # The deployment: its Parameters tab beside the schedule panel (the cron, in words).
        open_page(f"{ui}/deployments/deployment/{deployment_id}?tab=Parameters")
        save("prefect-deployment.png")
        browser.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chromium", required=True, help="path to a Chromium executable")
    ap.add_argument("--out-dir", type=Path, default=ROOT / "docs/screenshots")
    ap.add_argument("--port", type=int, default=4310, help="Prefect server port")
    ap.add_argument("--prefect-home", type=Path,
                    help="a fresh PREFECT_HOME, its SQLite database holding only this run "
                         "(default: a new temporary folder, outside the checkout so that "
                         "`dvc exp save` does not list it as untracked)")
    ap.add_argument("--targets", nargs="+", default=["curate", "selfcheck"],
                    help="the stages the flow run executes")
    ap.add_argument("--timeout", type=float, default=900, help="seconds for the flow run")
    args = ap.parse_args(argv)
    if args.prefect_home is None:
        args.prefect_home = Path(tempfile.mkdtemp(prefix="rlvr-prefect-shots-"))

    ui = f"http://127.0.0.1:{args.port}"
    base = f"{ui}/api"
    env = dict(os.environ, PREFECT_HOME=str(args.prefect_home), PREFECT_API_URL=base,
               PREFECT_UI_API_URL=base, PREFECT_SERVER_ANALYTICS_ENABLED="false")
    args.prefect_home.mkdir(parents=True, exist_ok=True)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    venv = ROOT / ".venv/bin"
    server = start([str(venv / "prefect"), "server", "start", "--host", "127.0.0.1",
                    "--port", str(args.port)], env, args.prefect_home / "server.log")
    served = None
    try:
        wait_for("the Prefect server", lambda: api(base, "/health") is True, 180)
        served = start([str(venv / "python"), "-m", "flows.pipeline", "--serve"], env,
                       args.prefect_home / "serve.log")
        deployment = wait_for("the served deployment",
                              lambda: api(base, f"/deployments/name/{DEPLOYMENT}"), 180)
        flow_run_id = run_deployment(env, args.targets)
        print(f"flow run {flow_run_id}: {ui}/runs/flow-run/{flow_run_id}")
        state = wait_for("the flow run to finish", lambda: (
            s if (s := api(base, f"/flow_runs/{flow_run_id}")["state_type"]) in TERMINAL
            else None), args.timeout)
        print(f"flow run {state}")
        time.sleep(3)                             # let the last log lines reach the server
        shoot(args.chromium, ui, flow_run_id, deployment["id"], args.out_dir)
        if state != "COMPLETED":
            sys.exit(f"flow run ended {state}; see {args.prefect_home}/serve.log")
    finally:
        for proc in (served, server):
            if proc is not None:
                stop(proc)


if __name__ == "__main__":
    main()
