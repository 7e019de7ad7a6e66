"""The two zygotes of the boundary prototype, each run in a sandbox of its own.

    python side.py code    # untrusted: per job, forks a child that imports the patched
                           # package from the job's tree and serves calls on two FIFOs
    python side.py tests   # trusted: pytest imported once; per job, forks a child that runs
                           # the hidden suite with the task's packages imported as proxies

Jobs arrive as JSON lines on stdin; each gets one JSON line on stdout. Neither side trusts
what the other sends beyond `rpc.Endpoint.dec`'s value grammar; the verdict is what the test
side's child reports to its parent over a pipe of their own (the code side never sees it).
"""
from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import rpc  # noqa: E402


def _quiet(out: str = os.devnull) -> None:
    """A child's stdin/stdout are the zygote's protocol channel: point fds 0 and 1 at /dev/null."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.close(null)
    sink = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(sink, 1)
    os.close(sink)
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", closefd=False)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def code_main() -> None:
    for line in sys.stdin:
        job = json.loads(line)
        _reap()
        pid = os.fork()
        if pid == 0:
            try:
                _quiet()
                faulthandler.dump_traceback_later(max(1, int(job["timeout"]) - 2), exit=False)
                signal.alarm(int(job["timeout"]))
                for p in reversed(job["paths"]):
                    sys.path.insert(0, p)
                os.chdir(job["repo"])
                r = os.open(job["t2c"], os.O_RDONLY)
                w = os.open(job["c2t"], os.O_WRONLY)
                rpc.Endpoint(r, w, "code").serve_forever()
            finally:
                os._exit(0)
        sys.stdout.write(json.dumps({"pid": pid}) + "\n")
        sys.stdout.flush()


class Finder:
    """Imports of the task's packages resolve to proxy modules of the code side."""

    def __init__(self, ep, packages):
        self.ep, self.packages = ep, set(packages)

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in self.packages:
            return None
        from importlib.machinery import ModuleSpec
        return ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        return self.ep.call("import", spec.name)

    def exec_module(self, module):
        pass


class Collector:
    def __init__(self):
        self.outcomes: dict[str, str] = {}
        self.failures: list[dict] = []

    def pytest_runtest_logreport(self, report):
        nid = report.nodeid
        if report.failed:
            self.outcomes[nid] = "error" if report.when != "call" else "failed"
            crash = getattr(report.longrepr, "reprcrash", None)
            self.failures.append({"id": nid, "when": report.when,
                                  "msg": (crash.message if crash else str(report.longrepr)[-400:])[:400],
                                  "line": crash.lineno if crash else None,
                                  "path": str(crash.path) if crash else None})
        elif report.when == "call":
            self.outcomes.setdefault(nid, report.outcome)
        elif report.skipped:
            self.outcomes.setdefault(nid, "skipped")

    def pytest_collectreport(self, report):
        if report.failed:
            self.outcomes[report.nodeid or "<collect>"] = "error"
            self.failures.append({"id": report.nodeid, "when": "collect",
                                  "msg": str(report.longrepr)[-600:], "line": None, "path": None})


def tests_main() -> None:
    import pytest  # noqa: F401  (paid once per zygote)
    import _pytest.python  # noqa: F401
    for line in sys.stdin:
        job = json.loads(line)
        _reap()
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(rfd)
            out = {"rc": -1, "outcomes": {}, "failures": []}
            try:
                _quiet("/tmp/pytest-out")
                faulthandler.dump_traceback_later(max(1, int(job["timeout"]) - 2), exit=False)
                signal.alarm(int(job["timeout"]))
                w = os.open(job["t2c"], os.O_WRONLY)
                r = os.open(job["c2t"], os.O_RDONLY)
                ep = rpc.Endpoint(r, w, "tests")
                sys.meta_path.insert(0, Finder(ep, job["packages"]))
                sys.path.insert(0, job["hidden"])
                col = Collector()
                t0 = time.monotonic()
                rc = pytest.main(job["args"], plugins=[col])
                out = {"rc": int(rc), "outcomes": col.outcomes, "failures": col.failures[:400],
                       "stats": dict(rpc.STATS), "pytest_s": time.monotonic() - t0}
                if int(rc) not in (0, 1):  # a usage or conftest error: keep pytest's own words
                    sys.stdout.flush()
                    with open("/tmp/pytest-out", errors="replace") as fh:
                        out["crash"] = fh.read()[-1500:]
            except BaseException as exc:  # noqa: BLE001
                out["crash"] = repr(exc)[:400]
            finally:
                data = json.dumps(out).encode()
                view = memoryview(data)
                while view:
                    view = view[os.write(wfd, view[:1 << 16]):]
                os._exit(0)
        os.close(wfd)
        chunks = []
        while True:
            b = os.read(rfd, 1 << 16)
            if not b:
                break
            chunks.append(b)
        os.close(rfd)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        res = b"".join(chunks)
        sys.stdout.write((res.decode() if res else json.dumps({"rc": -1, "crash": "test child died"})) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    {"code": code_main, "tests": tests_main}[sys.argv[1]]()
