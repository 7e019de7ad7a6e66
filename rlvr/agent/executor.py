"""Execute one validated tool call against an episode's workspace.

`view`, `search` and `edit` are host-side file operations through `Workspace` (which refuses
escapes, symlinks, binaries and read-only paths). `run_tests` is the only tool that runs
repository (= policy-written) code, and it runs it inside the sandbox: the repo mounted
writable at /work, the pristine public tests mounted read-only on top, `.git` hidden, no
network, resource limits and the tool timeout. Its pytest loads `_sandbox/rlvr_locate.py`,
which appends the source lines failing tests ran and passing tests did not (file:line, the
address the line-addressed `edit` takes). With `warm=True` the same pytest command runs in a
child forked by one sandboxed fork-server per workspace (`rlvr.agent.warm_tests`: same
mounts, per-run uid and rlimits, the cold path's observation byte for byte); the cold path is
the fallback and the reference, and both are formatted by `_test_observation`.

Every observation is capped at `observation_cap` characters with an explicit
"[... truncated N chars]" marker (head and tail kept: pytest puts the summary last).
A sandbox that fails to run at all is an `infra_error` result, never a task failure.
"""
from __future__ import annotations

import logging
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rlvr.agent.fixes import FixError, apply_fix
from rlvr.agent.hunks import HunkError, apply_hunk
from rlvr.agent.observations import SuspiciousLine, suspicious_lines
from rlvr.agent.tools import ToolCall
from rlvr.agent.warm_tests import (WarmServerError, WarmTestServer, WarmUnavailable,
                                   shadowed_module)
from rlvr.agent.workspace import Workspace, WorkspaceError
from rlvr.errors import RlvrError
from rlvr.sandbox import envs
from rlvr.sandbox.base import Limits, Mount, RunResult, Sandbox
from rlvr.tasks.project_config import run_tests_args

_log = logging.getLogger(__name__)
TOOL_STATUSES = ("ok", "error", "timeout", "infra_error", "submitted", "invalid", "none")

# run_tests loads the fault-localisation plugin (`_sandbox/rlvr_locate.py`) from a read-only
# mount: it runs beside the policy's code in the policy's sandbox, never on the host.
TOOLS_DIR = Path(__file__).resolve().parent / "_sandbox"
TOOLS_TARGET = "/opt/rlvr-agent"
LOCATE_PLUGIN = "rlvr_locate"

MAX_LISTING = 300
MAX_MATCHES = 50
MAX_LINE_CHARS = 240
SANDBOX_ENV = {
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONHASHSEED": "0",
    "PYTHONUNBUFFERED": "1",
    # third-party pytest plugins of the interpreter's environment are not the repo's
    # business, and importing them costs ~1.5 s per run
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "PATH": "/usr/local/bin:/usr/bin:/bin",
}


@dataclass(frozen=True)
class ToolResult:
    """What one tool call produced. `observation` is already capped; `raw_chars` is its
    length before the cap."""

    observation: str
    status: str
    raw_chars: int
    truncated: bool
    latency_s: float
    detail: str = ""


_PYTEST_DURATION = re.compile(
    r"^(.*\b(?:passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?|no tests ran)"
    r"\b.*?) in \d+(?:\.\d+)?s(?: \(\d+:\d\d:\d\d\))?(.*)$", re.M)
_ADDRESS = re.compile(r"\b0x[0-9a-f]{6,}\b")
# pytest shortens a long repr to head + "..." + tail (`_pytest._io.saferepr`), which can cut
# an address anywhere: "<Matrix object at 0x7f..." / "...x7ffb5c42ec80>" / "...42ec80>".
_ADDRESS_HEAD = re.compile(r"\b0x[0-9a-f]*(?=\.\.\.)")
_ADDRESS_TAIL = re.compile(r"(?<=\.\.\.)(x?)[0-9a-f]+(?=>)")


def normalize_test_output(text: str) -> str:
    """Drop what varies between identical runs — pytest's wall time in its summary line and
    object addresses in reprs, whole or cut by pytest's ellipsis — so the same rollout seeds
    give the same transcripts (and warm and cold runs the same observation). An address is no
    stable fact even under the sandbox's fixed layout (`rlvr.sandbox.bwrap`): it depends on
    the allocation history (a warm child inherits its server's heap, a cold process starts
    fresh), and docker keeps ASLR."""
    text = _PYTEST_DURATION.sub(r"\1\2", text)
    text = _ADDRESS_TAIL.sub(r"\1…", _ADDRESS_HEAD.sub("0x…", text))
    return _ADDRESS.sub("0x…", text)


def cap_text(text: str, cap: int) -> tuple[str, bool]:
    """`text` cut to `cap` characters (head + tail) with an explicit marker in between."""
    if cap <= 0 or len(text) <= cap:
        return text, False
    dropped = len(text) - cap
    head = cap // 2
    tail = cap - head
    return (f"{text[:head]}\n[... truncated {dropped} chars]\n{text[len(text) - tail:]}"
            if tail else f"{text[:head]}\n[... truncated {dropped} chars]"), True


def edit_line(text: str, line: int, old: str, new: str) -> tuple[str, str]:
    """`text` with `old` replaced by `new` inside line `line` (1-based, as `view` numbers it),
    and '' — or the unchanged text and an error that shows the line, so the next attempt can
    quote from it."""
    lines = text.split("\n")
    n = len(lines) - (1 if lines and lines[-1] == "" else 0)
    if line > n:
        return text, f"line {line} is out of range (1-{n})"
    current = lines[line - 1]
    count = current.count(old)
    if count != 1:
        return text, (f"`old` occurs {count} times in line {line} (it must occur exactly once); "
                      f"line {line} is: {current.strip()}")
    lines[line - 1] = current.replace(old, new, 1)
    return "\n".join(lines), ""


def fix_line(text: str, line: int, fix: str, nth: int) -> tuple[str, str]:
    """`text` with line `line` rewritten by the named `fix` (rlvr.agent.fixes), and '' — or
    the unchanged text and an error that shows the line."""
    lines = text.split("\n")
    n = len(lines) - (1 if lines and lines[-1] == "" else 0)
    if line > n:
        return text, f"line {line} is out of range (1-{n})"
    try:
        lines[line - 1] = apply_fix(lines[line - 1], fix, nth)
    except FixError as exc:
        return text, f"line {line}: {exc}"
    return "\n".join(lines), ""




class ToolExecutor:
    def __init__(self, workspace: Workspace, sandbox: Sandbox | None, *, timeout_s: float,
                 observation_cap: int, limits: Limits = Limits(), warm: bool = False):
        self.ws = workspace
        self.sandbox = sandbox
        self.timeout_s = timeout_s
        self.observation_cap = observation_cap
        # the budget is CPU time, so a slow suite fits whatever runs beside it; a busy loop
        # is cut at the budget (SIGXCPU), a process that waits at sandbox.base.WAIT_FACTOR x it
        self.limits = limits.cpu_budget(timeout_s)
        # `warm`: run_tests through one sandboxed pytest fork-server for this workspace
        # (rlvr.agent.warm_tests), same observation as the cold path; the cold path stays
        # the fallback (no privilege separation, a server that cannot start, a shadowed
        # pre-imported module) and the reference.
        self.warm = warm
        self.warm_server: WarmTestServer | None = None
        self.warm_off = ""  # why this executor stopped trying the warm path
        self.runs = {"warm": 0, "cold": 0}
        # the suspicious lines of the last run_tests as the agent saw it (capped): what an
        # edit addressed by `suspect` rank refers to
        self.suspects: list[SuspiciousLine] = []
        self._test_setup: tuple[list[str], Path | None] | None = None  # see _task_test_setup

    def close(self) -> None:
        """Stop the warm server (if any). Idempotent; the episode calls it when it ends."""
        server, self.warm_server = self.warm_server, None
        if server is not None:
            server.close()

    def __enter__(self) -> "ToolExecutor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def execute(self, call: ToolCall) -> ToolResult:
        started = time.perf_counter()
        handler = getattr(self, f"_tool_{call.name}")
        try:
            text, status, detail = handler(**call.args)
        except (WorkspaceError, HunkError) as exc:
            text, status, detail = f"error: {exc}", "error", ""
        capped, truncated = cap_text(text, self.observation_cap)
        if call.name == "run_tests" and status != "error":
            self.suspects = suspicious_lines(capped)
        return ToolResult(capped, status, len(text), truncated,
                          time.perf_counter() - started, detail)

    # ---- tools ---------------------------------------------------------------------------
    def _tool_view(self, path: str, start: int | None = None, end: int | None = None):
        target = self.ws.resolve(path, kind="any")
        if target.is_dir():
            files = self.ws.iter_files(path, limit=MAX_LISTING + 1)
            more = len(files) > MAX_LISTING
            listing = "\n".join(files[:MAX_LISTING]) + ("\n[... more files]" if more else "")
            return f"{path}/ ({len(files)}{'+' if more else ''} files)\n{listing}", "ok", ""
        lines = self.ws.read_text(path).split("\n")
        if lines and lines[-1] == "":
            lines = lines[:-1]
        n = len(lines)
        first = start or 1
        last = min(end or n, n)
        if first > max(n, 1) or (end is not None and end < first):
            return f"error: {path}: lines {first}-{end or n} out of range (1-{n})", "error", ""
        body = "\n".join(f"{i:>4}| {lines[i - 1]}" for i in range(first, last + 1))
        return f"{path} (lines {first}-{last} of {n})\n{body}", "ok", ""

    def _tool_search(self, pattern: str, path: str = "."):
        matches: list[str] = []
        total = 0
        for rel in self.ws.iter_files(path):
            try:
                text = self.ws.read_text(rel)
            except WorkspaceError:
                continue
            for no, line in enumerate(text.split("\n"), 1):
                if pattern in line:
                    total += 1
                    if len(matches) < MAX_MATCHES:
                        shown = (line if len(line) <= MAX_LINE_CHARS
                                 else line[:MAX_LINE_CHARS] + "...")
                        matches.append(f"{rel}:{no}: {shown}")
        if not total:
            return f"no matches for {pattern!r}", "ok", ""
        more = f"\n[... {total - len(matches)} more matches]" if total > len(matches) else ""
        return f"{total} match{'es' if total != 1 else ''}\n" + "\n".join(matches) + more, "ok", ""

    def _tool_edit(self, path: str | None = None, old: str | None = None,
                   new: str | None = None, hunk: str | None = None, line: int | None = None,
                   suspect: int | None = None, fix: str | None = None, nth: int = 1):
        if suspect is not None:
            if not self.suspects:
                return ("error: no suspicious lines to address: the last run_tests listed "
                        "none (run the tests first)"), "error", ""
            if suspect > len(self.suspects):
                return (f"error: suspect {suspect}: the last run_tests listed "
                        f"{len(self.suspects)} suspicious lines (1-{len(self.suspects)})"), \
                    "error", ""
            path, line = self.suspects[suspect - 1].path, self.suspects[suspect - 1].line
        reason = self.ws.is_protected(path)
        if reason:
            return f"error: {reason}", "error", ""
        text = self.ws.read_text(path)
        if hunk is not None:
            updated = apply_hunk(text, hunk)
        elif fix is not None:
            updated, error = fix_line(text, line, fix, nth)
            if error:
                return f"error: {path}: {error}", "error", ""
        elif line is not None:
            updated, error = edit_line(text, line, old, new)
            if error:
                return f"error: {path}: {error}", "error", ""
        else:
            count = text.count(old)
            if count != 1:
                return (f"error: {path}: `old` occurs {count} times (it must occur exactly "
                        "once; copy it exactly or include more context)"), "error", ""
            updated = text.replace(old, new, 1)
        if updated == text:
            return f"error: {path}: the edit changes nothing", "error", ""
        self.ws.write_text(path, updated)
        return (f"edited {path}" + (f" line {line}" if suspect is not None else "")), "ok", ""

    def _tool_run_tests(self, path: str | None = None):
        if self.sandbox is None:
            return "error: no sandbox to run tests in", "infra_error", "no sandbox configured"
        public = list(self.ws.task.public_tests)
        if path is None:
            targets = public
        else:
            file_part = path.split("::", 1)[0]
            norm = PurePosixPath(file_part).as_posix().removeprefix("./")
            if norm not in public:
                return (f"error: {path} is not a public test (public tests: "
                        f"{', '.join(public)})"), "error", ""
            targets = [norm + path[len(file_part):]]
        try:
            project_args, task_env = self._task_test_setup()
        except RlvrError as exc:
            return (f"error: the test sandbox failed ({type(exc).__name__}); this is not your "
                    "fault"), "infra_error", f"{type(exc).__name__}: {exc}"
        args = ["-q", "--tb=short", "--no-header", "--color=no", "-p", "no:cacheprovider",
                "-p", LOCATE_PLUGIN, *project_args, *targets]
        mounts = self._mounts()
        env = {**SANDBOX_ENV, "PYTHONPATH": TOOLS_TARGET}
        result = None
        if self.warm and not self.warm_off:
            try:
                result = self._run_warm(args, mounts, env, task_env)
            except WarmServerError as exc:
                return ("error: the test sandbox failed (WarmServerError); this is not your "
                        "fault"), "infra_error", f"WarmServerError: {exc}"
        if result is None:
            try:
                result = self.sandbox.run([self.sandbox.python, "-m", "pytest", *args],
                                          mounts=mounts, cwd="/work", env=env,
                                          limits=self.limits,
                                          task_env=task_env)
            except Exception as exc:  # noqa: BLE001 - any sandbox failure is infrastructure
                return (f"error: the test sandbox failed ({type(exc).__name__}); this is not "
                        "your fault"), "infra_error", f"{type(exc).__name__}: {exc}"
            self.runs["cold"] += 1
        return self._test_observation(result)

    def _task_test_setup(self) -> tuple[list[str], Path | None]:
        """The project's pytest arguments and the task's dependency layer for run_tests.

        The project's own pytest config is read as the enclave reads it (addopts needing
        plugins the task's environment lacks are dropped, a src layout is importable). Both
        are functions of the task alone (its pristine files and pins), yet cost ~3 ms a call,
        so the first success is kept for the executor's life; a failure is not kept, so
        every call that hits it raises it afresh, as before."""
        if self._test_setup is None:
            self._test_setup = (run_tests_args(self.ws.task),
                                envs.task_env(self.ws.task.dependencies))
        project_args, task_env = self._test_setup
        return list(project_args), task_env

    def _mounts(self) -> list[Mount]:
        mounts = [Mount(TOOLS_DIR, TOOLS_TARGET),
                  Mount(self.ws.repo, "/work", writable=True)]
        for tree in self.ws.protected:
            mounts.append(Mount(self.ws.public / tree.name, f"/work/{tree.name}", writable=False))
        mounts.append(Mount(self.ws.empty, "/work/.git", writable=False))
        return mounts

    def _run_warm(self, args: list[str], mounts: list[Mount], env: dict,
                  task_env=None) -> RunResult | None:
        """The warm server's RunResult, or None when this call must take the cold path."""
        if self.warm_server is None:
            server = WarmTestServer(self.sandbox, mounts=mounts, env=env, limits=self.limits,
                                    writable=self.ws.repo, tools_target=TOOLS_TARGET,
                                    task_env=task_env)
            try:
                server.start()
            except WarmUnavailable as exc:
                self.warm_off = str(exc)
                _log.warning("run_tests: warm path unavailable, using the cold path: %s", exc)
                return None
            self.warm_server = server
        if shadowed_module(self.ws.repo, self.warm_server.modules):
            return None  # a fresh interpreter could import the repo's file instead
        try:
            result = self.warm_server.run(args, self.limits)
        except WarmServerError:
            self.warm_server = None  # closed by run(); the next call starts a fresh one
            raise
        self.runs["warm"] += 1
        return result

    def _test_observation(self, result: RunResult) -> tuple[str, str, str]:
        """One sandboxed pytest run as the agent sees it (both paths format through here)."""
        output = normalize_test_output((result.stdout or "") + (result.stderr or ""))
        if result.timed_out or result.signal == signal.SIGXCPU:
            return (f"{output}\n[run_tests timed out after {self.timeout_s:g}s]",
                    "timeout", "")
        if result.exit_code is None or (result.exit_code == 1
                                        and (result.stderr or "").startswith("bwrap:")):
            return ("error: the test sandbox failed (no exit status); this is not your "
                    "fault"), "infra_error", f"signal={result.signal} stderr={result.stderr[-500:]}"
        if result.signal is not None:
            return (f"{output}\n[killed by signal {result.signal}: a resource limit was hit]",
                    "ok", "")
        return f"{output}\n[pytest exit code {result.exit_code}]", "ok", ""
