"""Runs inside the sandbox: for each job, fork, run a few pytest node ids in the job's repo
directory and record how each failing test failed (crash message + the failing test line).

Stand-alone on purpose (stdlib + pytest only): it is executed by the sandbox interpreter as
`python probe_driver.py JOBS.json` and must not import rlvr. pytest and its built-in plugin
modules are imported once in the parent (a session imports the plugins lazily, which every
forked job would otherwise repeat: ~10% of a job's CPU) and the parent's heap is then frozen
out of the garbage collector (pytest collects at the end of every session, and each child
would otherwise walk — and copy-on-write — all of it: ~15%); every job runs in a forked child so
a mutant's import side effects, infinite loops (SIGALRM) or crashes stay inside that job.
Results go to `<job dir>/.probe.json`.
"""
import gc
import json
import os
import signal
import sys


class _Collect:
    def __init__(self):
        self.failures = {}

    def pytest_runtest_logreport(self, report):
        if not report.failed or report.nodeid in self.failures:
            return
        longrepr = report.longrepr
        crash = getattr(longrepr, "reprcrash", None)
        message = crash.message if crash is not None else str(longrepr)[-2000:]
        statement = ""
        entries = getattr(getattr(longrepr, "reprtraceback", None), "reprentries", None) or []
        test_file = report.nodeid.split("::", 1)[0]
        for entry in entries:
            loc = getattr(entry, "reprfileloc", None)
            if loc is not None and loc.path.replace(os.sep, "/").endswith(test_file):
                lines = [ln for ln in getattr(entry, "lines", [])
                         if not ln.startswith("E ") and ln.strip().strip("^~ ")]
                statement = lines[-1].strip() if lines else ""
        self.failures[report.nodeid] = {"when": report.when, "message": message[:2000],
                                        "statement": statement[:500]}


def _run_job(job):
    os.chdir(job["dir"])
    sys.path.insert(0, job["dir"])
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    signal.alarm(int(job["timeout"]))
    import pytest

    collect = _Collect()
    code = pytest.main(["-q", "-vv", "-p", "no:cacheprovider", "--tb=short",
                        "--rootdir", job["dir"], *job.get("args", ()), *job["tests"]],
                       plugins=[collect])
    with open(os.path.join(job["dir"], ".probe.json"), "w") as fh:
        json.dump({"exit_code": int(code), "failures": collect.failures}, fh)


def _preload():
    """Import pytest and the modules of its default plugins (nothing is registered or run:
    each job still builds its own config and session from scratch)."""
    import importlib

    import pytest  # noqa: F401

    try:
        from _pytest.config import default_plugins
    except ImportError:
        return
    for name in default_plugins:
        try:
            importlib.import_module(f"_pytest.{name}")
        except ImportError:
            pass


def main(jobs_path):
    _preload()  # shared by every forked job
    gc.freeze()

    with open(jobs_path) as fh:
        jobs = json.load(fh)
    for job in jobs:
        pid = os.fork()
        if pid == 0:
            try:
                _run_job(job)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)


if __name__ == "__main__":
    main(sys.argv[1])
