"""The enclave fork-server: one long-lived process per worker, inside the sandbox.

Start-up (paid once): import pytest and its plugins plus common stdlib modules, collect the
code objects that exist before any untrusted code (the trusted set the audit hook checks
call chains against), make itself non-dumpable (``prctl(PR_SET_DUMPABLE, 0)`` through
ctypes, after which ctypes is purged from ``sys.modules`` and may never be re-imported),
install the audit hook, and print one ``ready`` JSON line.

Per request (one JSON line on stdin → one JSON line on stdout):

* the task snapshot and hidden tests travel once per task and are cached under the task key
  (hidden tests are compiled in memory, instrumented, and their source dropped; the
  snapshot's own modules are compiled to hash-checked .pyc images);
* a child is forked. It moves to its own session, points fds 0-2 at /dev/null, reads the
  per-run HMAC key from a pipe and closes it, drops to a fresh unprivileged uid (when the
  server runs as root with CAP_SETUID — never the same uid twice in a row), sets rlimits,
  writes a pristine copy of the snapshot to a fixed run directory, ``git apply``s the patch
  (atomic: every hunk is checked before anything is written, so this is ``--check`` and
  apply in one process), adds the snapshot's precompiled hash-checked .pyc files, and runs
  the hidden suite (runner.py). Only signed records on the results pipe count;
* the server enforces the wall-clock limit, reaps the child with ``wait4`` (CPU seconds and
  max RSS), kills every leftover process of that uid (a helper that takes the uid and calls
  ``kill(-1, SIGKILL)``) and wipes the run directory before answering.

A child cannot signal, ptrace or read the server (different uid, or same uid but the server
is non-dumpable and the hook blocks ``kill``). If the server dies anyway, the host sees EOF
and scores the verdict as a failure of the patch.

Stdlib + pytest only.
"""
from __future__ import annotations

import collections
import fcntl
import gc
import hashlib
import hmac
import json
import os
import select
import shutil
import signal
import sys
import time

# Never load third-party pytest plugins, whatever the environment says.
os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # `python -I` does not put the script's directory on sys.path
import runner  # noqa: E402
import lean  # noqa: E402  (before the trusted code objects are taken)

sys.path.remove(HERE)

PROTOCOL = 1
ENCLAVE_ROOT = "/tmp/rlvr-enclave"
SERVER_DIR = "/tmp/rlvr-server"
CACHE_TASKS = 128
CACHE_PYCS = 8192
MAX_RECORD_BYTES = 4 << 20
# The supervisor drains the record pipes every DRAIN_EVERY seconds and when the child exits,
# not on every record: waking it per record (one per test) costs the child a context switch
# per test. Pipes are enlarged to PIPE_BYTES so that a child rarely waits for a drain.
DRAIN_EVERY = 0.02
PIPE_BYTES = 1 << 20
PR_SET_DUMPABLE = 4


def _nondumpable() -> bool:
    """prctl(PR_SET_DUMPABLE, 0), then remove every trace of ctypes from the process."""
    ok = False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        ok = libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
        del libc, ctypes
    except Exception:
        ok = False
    for name in [n for n in sys.modules if n == "ctypes" or n.startswith(("ctypes.", "_ctypes"))]:
        del sys.modules[name]
    return ok


class Server:
    def __init__(self) -> None:
        self.uid_base = self.uid_count = 0
        spec = os.environ.get("RLVR_SANDBOX_UIDS", "")
        self.privsep = False
        if os.geteuid() == 0 and spec:
            base, count = (int(x) for x in spec.split(":"))
            self.uid_base, self.uid_count = base, count
            self.privsep = True
        self.counter = 0
        self.tasks: collections.OrderedDict = collections.OrderedDict()
        self.suites: collections.OrderedDict = collections.OrderedDict()  # hidden digest -> CompiledSuite
        self.pyc_cache: collections.OrderedDict = collections.OrderedDict()  # (relpath, digest) -> (pyc path, bytes)
        # (task key, patch hash) -> files the patch changed (None = deleted): a consensus
        # re-run of the same patch writes them instead of running git again.
        self.applied: collections.OrderedDict = collections.OrderedDict()
        self.pending: tuple | None = None
        self.dumpable_off = _nondumpable()
        runner.preimport()
        os.makedirs(SERVER_DIR, mode=0o700, exist_ok=True)
        os.chmod(SERVER_DIR, 0o700)
        self.ini = os.path.join(SERVER_DIR, "pytest.ini")
        with open(self.ini, "w") as fh:
            fh.write("[pytest]\npython_files = test_*.py *_test.py\npython_classes = Test\n"
                     "python_functions = test\nxfail_strict = false\n")
        os.chmod(self.ini, 0o644)
        os.chmod(SERVER_DIR, 0o711)
        # Readable (pytest walks up from the hidden root), writable only by the server: a
        # child can leave nothing behind outside the run directory.
        os.makedirs(ENCLAVE_ROOT, exist_ok=True)
        os.chmod(ENCLAVE_ROOT, 0o755)
        os.chdir(ENCLAVE_ROOT)
        self.prepared = runner.Prepared(self.ini)
        self.placeholder = "rlvr-sentinel-" + os.urandom(16).hex()
        stack = []
        f = sys._getframe()
        while f is not None:
            stack.append(f.f_code)
            f = f.f_back
        self.trusted = runner.trusted_code_objects() + stack
        hook = runner.make_hook(
            self.trusted, runner.role_codes(runner, lean), hashlib.sha256,
            runner.safe_getframe_callers(), runner.eq_originals(), runner.traceback_readers(),
        )
        sys.addaudithook(hook)
        del hook
        runner.install_frame_views()  # before the snapshot: children are checked against it
        runner.neuter_signals()
        runner.hide_current_test()
        runner.presnapshot()
        gc.freeze()  # forked children then do not copy-on-write the server's heap when collecting

    # ---- protocol -------------------------------------------------------------------------
    def serve(self) -> None:
        stdin = sys.stdin.buffer
        self.write({
            "ready": True, "protocol": PROTOCOL, "privsep": self.privsep,
            "nondumpable": self.dumpable_off, "python": sys.version.split()[0],
            "pytest": runner.pytest.__version__, "pid": os.getpid(),
        })
        while True:
            line = stdin.readline()
            if not line:
                self.finish_pending()
                return
            try:
                reply = self.handle(json.loads(line))
            except Exception as exc:  # a bug or a malformed request: not the patch's doing
                reply = {"status": "infra_error", "detail": f"server: {type(exc).__name__}: {exc}"}
            del line
            self.write(reply)
            self.finish_pending()  # after replying: the host is not kept waiting

    @staticmethod
    def write(obj) -> None:
        sys.stdout.buffer.write(json.dumps(obj).encode() + b"\n")
        sys.stdout.buffer.flush()

    def handle(self, req: dict) -> dict:
        op = req.get("op")
        if op == "ping":
            return {"id": req.get("id"), "status": "pong"}
        if op != "run":
            return {"id": req.get("id"), "status": "infra_error", "detail": f"unknown op {op!r}"}
        key = req["key"]
        if req.get("task") is not None:
            task = req["task"]
            self.tasks[key] = (task["files"], self.suite_for(task["hidden"]), self.pycs_for(task["files"]),
                               runner.project_job(task.get("project")))
            while len(self.tasks) > CACHE_TASKS:
                self.tasks.popitem(last=False)
            req["task"] = None
            del task
        if key not in self.tasks:
            return {"id": req.get("id"), "status": "need_task"}
        self.tasks.move_to_end(key)
        files, suite, pycs, project = self.tasks[key]
        reply = self.run(files, suite, dict(req, project=project), key, pycs)
        reply["id"] = req.get("id")
        return reply

    def suite_for(self, hidden: dict):
        """The compiled hidden suite (and its lean plan), shared by every task with the same
        hidden tests - e.g. all synthetic tasks of one seed family (compiling costs ~60 ms)."""
        digest = hashlib.sha256(json.dumps(hidden, sort_keys=True).encode("utf-8", "surrogateescape")).hexdigest()
        suite = self.suites.get(digest)
        if suite is None:
            suite = runner.compile_suite(hidden, self.placeholder)
            suite.lean, _reason = lean.static_plan(hidden)
            self.suites[digest] = suite
            while len(self.suites) > CACHE_TASKS:
                self.suites.popitem(last=False)
        self.suites.move_to_end(digest)
        return suite

    def pycs_for(self, files: dict) -> dict:
        """runner.compile_snapshot, per file and cached by content (tasks of one family share
        all files but the one with the bug)."""
        out: dict = {}
        todo: dict = {}
        for rel, text in files.items():
            if not rel.endswith(".py"):
                continue
            digest = (rel, hashlib.sha256(text.encode("utf-8", "surrogateescape")).digest())
            hit = self.pyc_cache.get(digest)
            if hit is None:
                todo[digest] = text
            elif hit[0] is not None:
                out[hit[0]] = hit[1]
        for digest, text in todo.items():
            compiled = runner.compile_snapshot({digest[0]: text})
            entry = next(iter(compiled.items())) if compiled else (None, None)
            self.pyc_cache[digest] = entry
            if entry[0] is not None:
                out[entry[0]] = entry[1]
        while len(self.pyc_cache) > CACHE_PYCS:
            self.pyc_cache.popitem(last=False)
        return out

    # ---- one verdict -------------------------------------------------------------------------
    def next_uid(self) -> int | None:
        if not self.privsep:
            return None
        self.counter += 1
        return self.uid_base + (self.counter % self.uid_count)

    def finish_pending(self) -> None:
        if self.pending is not None:
            pid, uid = self.pending
            self.pending = None
            self.cleanup(pid, uid)

    def run(self, files: dict, suite, req: dict, task_key: str, pycs: dict | None = None) -> dict:
        """One child run of the suite; a lean run that falls back is re-run under pytest
        (and the task keeps pytest from then on)."""
        use_lean = suite.lean is not None and req.get("lean", True)
        reply, fallback = self.run_once(files, suite, req, task_key, pycs, lean.run_tests if use_lean else None)
        if fallback is not None:  # only the lean runner can send one
            suite.lean = None
            reply, _ = self.run_once(files, suite, req, task_key, pycs, None)
        return reply

    def run_once(self, files: dict, suite, req: dict, task_key: str, pycs: dict | None,
                 run) -> tuple[dict, str | None]:
        """(reply, the lean runner's fallback reason or None)."""
        self.finish_pending()
        limits = req.get("limits") or {}
        wall = float(limits.get("wall", 30.0))
        uid = self.next_uid()
        nonce = os.urandom(12).hex()
        patch = req.get("patch") or ""
        applied_key = (task_key, hashlib.sha256(patch.encode("utf-8", "surrogateescape")).hexdigest())
        job = {
            "patch": patch, "seed": int(req.get("seed", 0)),
            "shuffle": bool(req.get("shuffle", True)), "select": req.get("select"),
            "limits": limits, "nonce": nonce, "uid": uid, "applied": self.applied.get(applied_key),
            "project": req.get("project") or runner.project_job(None),
        }
        _wipe(runner.RUN_ROOT)
        os.mkdir(runner.RUN_ROOT)
        os.chmod(runner.RUN_ROOT, 0o1777 if self.privsep else 0o700)
        res_r, res_w = os.pipe()
        key_r, key_w = os.pipe()
        tree_r, tree_w = os.pipe()
        for fd in (res_r, tree_r):
            try:
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
            except (AttributeError, OSError):  # over the user's pipe budget: default size
                pass
            os.set_blocking(fd, False)
        start = time.monotonic()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:  # ---------------- child ----------------
            code = 70
            try:
                for fd in (res_r, key_w, tree_r):
                    os.close(fd)
                runner.child_main(job, files, suite, res_w, key_r, tree_w, self.prepared, pycs, run)
                code = 0
            finally:
                os._exit(code)
        for fd in (res_w, key_r, tree_w):
            os.close(fd)
        key = os.urandom(32)
        os.write(key_w, key)
        os.close(key_w)
        (records, tree), timed_out, overflow = self.supervise(pid, (res_r, tree_r), start + wall)
        if timed_out:
            self.kill_tree(pid, uid)
        _, status, ru = os.wait4(pid, 0)
        elapsed = time.monotonic() - start
        self.pending = (pid, uid)
        os.close(res_r)
        os.close(tree_r)
        parsed = parse_records(records, key, nonce)
        del key
        if parsed["apply"] and parsed["armed"] and job["applied"] is None and tree:
            # Sent before arming, from trusted setup code: the tree git produced.
            try:
                changed = json.loads(tree)
                if isinstance(changed, dict):
                    self.applied[applied_key] = changed
                    while len(self.applied) > CACHE_TASKS * 2:
                        self.applied.popitem(last=False)
            except ValueError:
                pass
        if overflow:
            parsed["flags"].append("tamper_forged_record")
        reply = summarize(parsed, status, ru, timed_out, elapsed, limits, self.privsep)
        reply["resources"]["runner"] = "pytest" if run is None else "lean"
        return reply, parsed["fallback"]

    def supervise(self, pid: int, fds: tuple, deadline: float):
        """Drain the results (and tree) pipes until the child exits, or the deadline.

        The pipes are non-blocking and drained every DRAIN_EVERY seconds and once the child
        has exited; while it runs the loop waits on the child's pidfd only."""
        res_r, tree_r = fds
        buf = bytearray()
        tree = bytearray()
        tree_open = True
        overflow = False
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pidfd = None
        eof = exited = False
        exit_time = None
        while True:
            if tree_open:
                tree_open, _ = _drain(tree_r, tree, stop_when_full=True)
            if not eof:
                res_open, full = _drain(res_r, buf, stop_when_full=False)
                eof = not res_open
                overflow = overflow or full
            if eof and exited:
                break
            now = time.monotonic()
            if now >= deadline:
                break
            if exited and exit_time is not None and now - exit_time > 0.5:
                break  # a descendant keeps the pipe open; the child itself is done
            timeout = min(deadline - now, DRAIN_EVERY)
            if exited:
                # Only the pipes are left: wait for their EOF (or more data).
                wait = ([res_r] if not eof else []) + ([tree_r] if tree_open else [])
                if wait:
                    select.select(wait, [], [], timeout)
                continue
            if pidfd is not None:
                ready, _, _ = select.select([pidfd], [], [], timeout)
                if pidfd not in ready:
                    continue
            else:
                time.sleep(min(timeout, 0.005))
            done, _ = _peek_exit(pid)
            if done:
                exited = True
                exit_time = time.monotonic()
        if pidfd is not None:
            os.close(pidfd)
        timed_out = not exited and time.monotonic() >= deadline
        return (bytes(buf), bytes(tree) if not tree_open else b""), timed_out, overflow

    def kill_tree(self, pid: int, uid: int | None) -> None:
        try:
            os.killpg(pid, signal.SIGKILL)  # works when we share the uid
        except (ProcessLookupError, PermissionError):
            pass
        if uid is not None:
            self._as_uid(uid, sweep=True, wipe=False)

    def cleanup(self, pid: int, uid: int | None) -> None:
        if uid is not None:
            self._as_uid(uid, sweep=True, wipe=True)  # the child's files belong to uid
        else:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _wipe(runner.RUN_ROOT)

    @staticmethod
    def _as_uid(uid: int, *, sweep: bool, wipe: bool) -> None:
        """Fork a helper that becomes `uid`, kills every process of that uid in our pid
        namespace (kill(-1) skips the caller) and removes the run directory."""
        hpid = os.fork()
        if hpid == 0:
            try:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                if sweep:
                    # kill(-1) reports success whenever *any* other process exists (even
                    # one it may not signal), so check /proc for survivors of this uid.
                    for _ in range(5):
                        try:
                            os.kill(-1, signal.SIGKILL)
                        except ProcessLookupError:
                            break
                        if not _processes_of(uid):
                            break
                        time.sleep(0.002)
                if wipe:
                    _wipe(runner.RUN_ROOT)
            finally:
                os._exit(0)
        os.waitpid(hpid, 0)


def _processes_of(uid: int) -> list[int]:
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    found.append(int(name))
            except OSError:
                pass
    return found


def _wipe(path: str) -> None:
    def fix(func, p, _exc):
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=fix)


def _drain(fd: int, out: bytearray, *, stop_when_full: bool) -> tuple[bool, bool]:
    """Read what a non-blocking pipe holds into `out` (at most MAX_RECORD_BYTES are kept).
    Returns (still open, over the limit); with `stop_when_full` a full buffer also closes."""
    full = False
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return True, full
        if not chunk:
            return False, full
        if len(out) < MAX_RECORD_BYTES:
            out += chunk
        elif stop_when_full:
            return False, True
        else:
            full = True


def _peek_exit(pid: int) -> tuple[bool, int]:
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True, 0
    return (info is not None), 0


def parse_records(data: bytes, key: bytes, nonce: str) -> dict:
    """Verify and decode the child's signed records. Anything unsigned, malformed or out of
    sequence is evidence of forgery: it is dropped and flagged."""
    ipad = bytes(b ^ 0x36 for b in key) + b"\x36" * (64 - len(key))
    opad = bytes(b ^ 0x5C for b in key) + b"\x5c" * (64 - len(key))
    out = {"apply": None, "apply_detail": "", "collected": None, "items": [], "flags": [],
           "done": False, "integrity": True, "error": "", "armed": False, "fallback": None}
    expect = 0
    for raw in data.split(b"\n"):
        if not raw:
            continue
        try:
            line = raw.decode("utf-8", "surrogateescape")
            body, tag = line.rsplit("|", 1)
            msg = (nonce + "|" + body).encode("utf-8", "surrogateescape")
            good = hashlib.sha256(opad + hashlib.sha256(ipad + msg).digest()).hexdigest()[:32]
            if not hmac_compare(good, tag):
                raise ValueError("bad mac")
            fields = body.split("|")
            if int(fields[0]) != expect:
                raise ValueError("sequence")
            expect += 1
            kind = fields[1]
            if kind == "apply":
                out["apply"] = fields[2] == "1"
                out["apply_detail"] = bytes.fromhex(fields[3]).decode("utf-8", "replace")
            elif kind == "arm":
                out["armed"] = True
            elif kind == "coll":
                out["collected"] = int(fields[2])
            elif kind == "item":
                out["items"].append((int(fields[2]), fields[3], bytes.fromhex(fields[4]).decode("utf-8", "replace"), fields[5]))
            elif kind == "flag":
                out["flags"].append(fields[2])
            elif kind == "done":
                out["done"] = True
                out["integrity"] = fields[2] == "1"
            elif kind == "fallback":
                out["fallback"] = bytes.fromhex(fields[2]).decode("utf-8", "replace")
            elif kind == "err":
                out["error"] = bytes.fromhex(fields[2]).decode("utf-8", "replace")
            else:
                raise ValueError("kind")
        except (ValueError, IndexError):
            if "tamper_forged_record" not in out["flags"]:
                out["flags"].append("tamper_forged_record")
    return out


def hmac_compare(a: str, b: str) -> bool:
    return hmac.compare_digest(a, b)


RESOURCE_SIGNALS = {signal.SIGXCPU: "timeout", signal.SIGXFSZ: "resource_limit",
                    signal.SIGSEGV: "resource_limit", signal.SIGBUS: "resource_limit"}


def summarize(parsed: dict, status: int, ru, timed_out: bool, elapsed: float, limits: dict,
              privsep: bool) -> dict:
    outcomes: dict[str, str] = {}
    order: list[str] = []
    hints = 0
    for _pos, outcome, nodeid, hint in parsed["items"]:
        if nodeid not in outcomes:
            order.append(nodeid)
        outcomes[nodeid] = outcome if outcome in runner.OUTCOMES else "failed"
        hints += hint == "resource"
    flags = list(dict.fromkeys(parsed["flags"]))
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    cpu = ru.ru_utime + ru.ru_stime
    detail = ""
    if timed_out:
        run_status = "timeout"
    elif parsed["apply"] is False:
        run_status, detail = "apply_failed", parsed["apply_detail"][:500]
    elif sig is not None and sig in RESOURCE_SIGNALS:
        run_status = RESOURCE_SIGNALS[sig]
    elif sig == signal.SIGKILL and cpu >= float(limits.get("cpu", 1e9)):
        run_status = "timeout"
    elif parsed["apply"] is None or not parsed["armed"] or parsed["error"]:
        # The child died in trusted setup, before any code of the patch could run.
        run_status = "infra_error"
        detail = parsed["error"] or f"child setup failed (exit {code}, signal {sig})"
    elif not parsed["done"] and (hints or "blocked_process" in flags):
        run_status = "resource_limit"  # the run died on a limit before it finished
    else:
        run_status = "ok"
    if hints or "blocked_process" in flags:
        # Some test hit a limit (MemoryError, no more threads, a refused process): the
        # outcomes stand, and a failing verdict says resource_limit rather than tests_failed.
        flags.append("resource_limit_hit")
    if run_status in ("ok", "resource_limit") and not parsed["done"]:
        flags.append("run_aborted")
        if sig is not None:
            flags.append("runner_killed")
    if not parsed["integrity"] and "tamper_integrity" not in flags:
        flags.append("tamper_integrity")
    return {
        "status": run_status, "outcomes": outcomes, "order": order, "flags": flags,
        "collected": parsed["collected"], "detail": detail, "wall": elapsed,
        "resources": {"cpu_seconds": round(cpu, 4), "max_rss_kb": ru.ru_maxrss, "minor_faults": ru.ru_minflt,
                      "exit_code": code, "signal": sig, "privsep": privsep},
    }


def main() -> None:
    refusal = runner.runtime_refusal()
    if refusal:  # before arming: nothing of a task has been read yet
        Server.write({"ready": False, "refused": "unsupported_runtime", "detail": refusal})
        raise SystemExit(3)
    Server().serve()


if __name__ == "__main__":
    main()
