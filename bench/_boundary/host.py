"""Host end of the boundary prototype: two sandboxed zygotes (code side, test side) per
hidden suite, one pair of forked children per verdict, talking over two FIFOs.

Isolation: each zygote is its own `rlvr.sandbox` server (bwrap: own namespaces, a fresh
unprivileged uid each when run as root, no network, rlimits). The code side mounts the
verdict's tree and the FIFO directory only; it never has the hidden tests. The test side
mounts the hidden suite and the FIFO directory; it never imports the patched code. The patch
is applied here with `git apply` (as the enclave's child does, with --check first)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from rlvr.sandbox import Limits, Mount
from rlvr.sandbox.channel import ReplyLines, server_limits

HERE = Path(__file__).resolve().parent
INI = "[pytest]\npython_files = test_*.py *_test.py\npython_classes = Test\npython_functions = test\n"


def top_packages(repo_files: dict[str, str], pythonpath: list[str]) -> list[str]:
    """Import names the task's tree provides (packages and top-level modules on its paths)."""
    roots = [p.rstrip("/") + "/" for p in pythonpath if p not in (".", "")] + [""]
    names = set()
    for path in repo_files:
        for root in roots:
            if not path.startswith(root):
                continue
            rest = path[len(root):].split("/")
            if len(rest) >= 2 and rest[-1] == "__init__.py" and len(rest) == 2:
                names.add(rest[0])
            elif len(rest) == 1 and rest[0].endswith(".py") and rest[0] not in ("setup.py", "conftest.py"):
                names.add(rest[0][:-3])
            break
    return sorted(names)


class Boundary:
    def __init__(self, sandbox, hidden: dict[str, str], project: dict, packages: list[str],
                 task_env: Path | None, timeout: int = 120, limits: Limits | None = None, eq: str = "strict"):
        self.sandbox, self.project, self.packages, self.timeout = sandbox, project, packages, timeout
        self.base = Path(tempfile.mkdtemp(prefix="rlvr-bnd-"))
        for d in ("code", "pipes", "hidden"):
            (self.base / d).mkdir()
            os.chmod(self.base / d, 0o755)
        for rel, text in hidden.items():
            (self.base / "hidden" / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.base / "hidden" / rel).write_text(text)
        (self.base / "hidden" / "pytest.ini").write_text(INI + "".join(
            ("markers =\n" if i == 0 else "") + f"    {m}\n" for i, m in enumerate(project["markers"])))
        limits = limits or Limits(wall_seconds=timeout, cpu_seconds=timeout, memory_bytes=1 << 30,
                                  max_processes=64, max_file_bytes=16 << 20, output_bytes=64 << 10)
        env = {"PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONHASHSEED": "0", "RLVR_BOUNDARY_EQ": eq}
        lib = Mount(HERE, "/opt/bnd")
        pipes = Mount(self.base / "pipes", "/pipes", writable=True)
        self.code = sandbox.serve([sandbox.python, "-s", "/opt/bnd/side.py", "code"],
                                  mounts=[lib, Mount(self.base / "code", "/runs"), pipes], cwd="/runs",
                                  env=env, limits=server_limits(limits), task_env=task_env)
        self.tests = sandbox.serve([sandbox.python, "-s", "/opt/bnd/side.py", "tests"],
                                   mounts=[lib, Mount(self.base / "hidden", "/hidden"), pipes], cwd="/hidden",
                                   env=env, limits=server_limits(limits), task_env=task_env)
        self.code_lines = ReplyLines(self.code, name="bnd-code")
        self.test_lines = ReplyLines(self.tests, name="bnd-tests")
        self.n = 0

    def run(self, repo_files: dict[str, str], patch: str) -> dict:
        """One verdict: {"passed": bool, "outcomes": {...}, "failures": [...], "wall_s": ...}."""
        t0 = time.monotonic()
        self.n += 1
        tree = self.base / "code" / f"v{self.n}"
        for rel, text in repo_files.items():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            (tree / rel).write_text(text)
        if patch.strip():
            for args in (["apply", "--check"], ["apply"]):
                if subprocess.run(["git", *args, "-"], input=patch.encode(), cwd=tree,
                                  capture_output=True).returncode:
                    shutil.rmtree(tree, ignore_errors=True)
                    return {"passed": False, "status": "apply_failed", "outcomes": {}, "failures": [],
                            "wall_s": time.monotonic() - t0}
        pipes = self.base / "pipes" / f"v{self.n}"
        pipes.mkdir()
        os.chmod(pipes, 0o777)
        for name in ("t2c", "c2t"):
            os.mkfifo(pipes / name, 0o666)
            os.chmod(pipes / name, 0o666)
        run_root = f"/runs/v{self.n}"
        paths = [f"{run_root}/{p}" for p in self.project["pythonpath"]] + [run_root]
        fifo = {"t2c": f"/pipes/v{self.n}/t2c", "c2t": f"/pipes/v{self.n}/c2t"}
        self.code.stdin.write((json.dumps({"repo": run_root, "paths": paths, "timeout": self.timeout, **fifo})
                               + "\n").encode())
        self.code.stdin.flush()
        json.loads(self.code_lines.get(30))
        args = ["/hidden", "-q", "--tb=short", "-p", "no:cacheprovider", "-c", "/hidden/pytest.ini",
                "--rootdir", "/hidden", "--basetemp", f"/tmp/pt-v{self.n}", "-W", "ignore::DeprecationWarning",
                "--continue-on-collection-errors"]
        self.tests.stdin.write((json.dumps({"hidden": "/hidden", "packages": self.packages, "args": args,
                                            "timeout": self.timeout, **fifo}) + "\n").encode())
        self.tests.stdin.flush()
        try:
            res = json.loads(self.test_lines.get(self.timeout + 30))
        except TimeoutError:
            res = {"rc": -1, "crash": "host timeout"}
        shutil.rmtree(tree, ignore_errors=True)
        shutil.rmtree(pipes, ignore_errors=True)
        outcomes = res.get("outcomes", {})
        res["passed"] = res.get("rc") == 0 and any(o == "passed" for o in outcomes.values())
        res["status"] = "ok" if res.get("rc", -1) in (0, 1) else f"rc={res.get('rc')} {res.get('crash', '')}"
        res["wall_s"] = time.monotonic() - t0
        return res

    def close(self) -> None:
        for h in (self.code, self.tests):
            try:
                h.close()
            except Exception:  # noqa: BLE001
                pass
        shutil.rmtree(self.base, ignore_errors=True)
