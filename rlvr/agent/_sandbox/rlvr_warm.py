"""The warm `run_tests` server: one per episode, inside that episode's policy sandbox.

Started by `rlvr.agent.warm_tests` as ``python /opt/rlvr-agent/rlvr_warm.py`` in the very
sandbox the cold path uses (repo writable at /work, pristine public tests read-only on top,
`.git` hidden, no network), as uid 0 with only CAP_SETUID/CAP_SETGID (the sandbox's
`supervisor` mode). Stdlib only; it imports no repository code: /work is taken off
`sys.path` before pytest is imported and is only put back in a forked child.

Start-up (paid once per episode): import pytest, its builtin plugins and the stdlib modules a
pytest run imports lazily (pdb, unittest, xml.etree, difflib, ...), move the protocol off
fds 0/1 (fd 0 becomes /dev/null, fd 1 stays the `sys.stdout` a child inherits), and print one
`ready` line naming the uid range and the top-level modules now in `sys.modules` (the host
falls back to the cold path when the repo could shadow one of them). The fault-localisation
plugin is *not* imported here: pytest warns about an already-imported `-p` plugin it cannot
assertion-rewrite, and its module-level dicts would otherwise outlive a run; the child
imports it fresh, as the cold process does. Pure work on read-only inputs is done here
too (`Pristine`: the public test files' assertion rewrites and statement tables; `Configs`:
pytest's argv-only `get_config`; `PluginFixtures`: the fixture scan of pytest's own plugin
modules; `Sources`: the repo's modules compiled — never run — between runs, keyed by their
bytes), each used by a child only on an exact match.

Per request (one JSON line in, one JSON line out): fork a child that

* starts its own session, points fd 0 at /dev/null and fds 1/2 at two fresh pipes, closes
  every other fd (the protocol pipes included: it cannot forge a reply);
* drops to the unprivileged uid the host chose (and chowned /work to) and sets the cold
  path's rlimits (CPU soft/hard = limit/limit+1, address space, processes, file size, no
  core);
* rebuilds the interpreter state a fresh ``python -m pytest ARGS`` has when it hands over to
  runpy (sys.argv, sys.orig_argv, sys.path with /work first, a pristine `__main__`, a
  reseeded `random`), returns to module level and calls ``runpy._run_module_as_main
  ("pytest")`` — what the interpreter itself calls for ``-m`` — so pytest's `__main__` raises
  SystemExit;
* then does the part of interpreter finalization a run can observe, in the interpreter's
  order (`_leave`): join non-daemon threads, run the atexit handlers (logging, weakref
  finalizers, the policy's own), flush stdout and stderr — and leaves with ``os._exit``
  instead of tearing down the ~330 modules the server pre-imported and the heap (~10-15 ms
  per run; pytest writes nothing then). An exit status that is not a plain int or a flush that
  fails re-raises the SystemExit, so the interpreter finishes as the cold process would.

The server drains both pipes (keeping `out` bytes of each, counting the rest, as the
sandbox backends do), enforces the wall clock, and when the child has exited or timed out
kills every process of that uid (a helper that becomes the uid and calls kill(-1)) and
removes what the uid left in /tmp and /dev/shm, so the next run starts from what a fresh
sandbox would show. When the child's exit left both pipes at EOF (no process of the run
holds them) that sweep runs right after the reply instead of before it — still before the
next request is read. The reply carries the raw bytes; the host builds the `RunResult`
exactly like the backend's `run` would.
"""
from __future__ import annotations

import base64
import json
import os
import resource
import select
import shutil
import signal
import stat
import sys
import time
import warnings

PROTOCOL = 1
WORK = "/work"
SCRATCH = ("/tmp", "/dev/shm")
# Imported by every run child, paid here once: pytest's lazy imports after `import pytest`
# (measured on pytest 9), and ctypes, which `_become` needs in every run child for capset(2)
# (its import there cost 1.6-2.7 ms of a ~40 ms run, bench/tools.py).
LAZY_MODULES = ("pdb", "unittest", "xml.etree.ElementTree", "difflib", "faulthandler", "code",
                "codeop", "cmd", "readline", "ctypes")


def _preimport() -> None:
    import pytest  # noqa: F401
    import _pytest.config as config

    for name in (*config.default_plugins, *config.builtin_plugins):
        try:
            __import__(f"_pytest.{name}")
        except ImportError:  # a builtin plugin this pytest does not ship: nothing to warm
            pass
    for name in LAZY_MODULES:
        try:
            __import__(name)
        except ImportError:
            pass
    # tokenize (already imported by inspect and linecache) compiles its token regex on first
    # use, ~6 ms in a run whose failure report tokenizes source; warm its own lru_cache with
    # the exact expressions `_tokenize` asks for
    import tokenize

    try:
        for expr in {tokenize.PseudoToken, *tokenize.endpats.values()}:
            tokenize._compile(expr)
    except AttributeError:  # a tokenize without these internals: nothing to warm
        pass


class Pristine:
    """Pure work on the read-only files (public tests, this plugin dir) done once here.

    pytest assertion-rewrites every test module, conftest and `-p` plugin it imports (parse,
    rewrite, compile: ~17 ms for a 100-line test file) and, for every traceback entry of a
    failure, re-parses the entry's whole file to find statement ranges. For the pristine
    files both are pure functions of their bytes, so the server computes them before any
    child exists, and a child uses a result only when the file's bytes (or the source text
    pytest passes) are exactly the ones it was computed from — and, for rewriting, only
    when the run's ini leaves `enable_assertion_pass_hook` off (the one config value the
    rewriter reads). Anything else goes through pytest's own code unchanged."""

    def __init__(self, paths: list[str]) -> None:
        from _pytest._code.source import _statement_linenos, findsource
        from _pytest.assertion.rewrite import rewrite_asserts
        import ast
        import importlib.util
        import linecache

        self.rewritten: dict[str, tuple[bytes, bytes, object]] = {}
        self.asts: dict[str, object] = {}
        for path in paths:
            try:
                with open(path, "rb") as fh:
                    source = fh.read()
                tree = ast.parse(source, filename=path)
                rewrite_asserts(tree, source, path, None)
                co = compile(tree, path, "exec", dont_inherit=True)
            except (OSError, SyntaxError, ValueError):
                continue
            self.rewritten[path] = (source, importlib.util.source_hash(source), co)
            full, _ = findsource(co)
            if full is not None:
                content = str(full)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    node = ast.parse(content, "source", "exec")
                _statement_linenos(node)  # memoised on the node
                self.asts[content] = node
        linecache.clearcache()

    def install(self) -> None:
        """In a child: route pytest's two pure functions through the results above."""
        import _pytest._code.code as code_mod
        import _pytest._code.source as source_mod
        import _pytest.assertion.rewrite as rewrite_mod

        rewrite_test = rewrite_mod._rewrite_test
        statement_range = source_mod.getstatementrange_ast
        rewritten, asts = self.rewritten, self.asts

        def _rewrite_test(fn, config):
            hit = rewritten.get(str(fn))
            if hit is not None and not config.getini("enable_assertion_pass_hook"):
                if fn.read_bytes() == hit[0]:
                    return hit[1], hit[2]
            return rewrite_test(fn, config)

        def getstatementrange_ast(lineno, source, assertion=False, astnode=None):
            if astnode is None:
                astnode = asts.get(str(source))
            return statement_range(lineno, source, assertion, astnode)

        rewrite_mod._rewrite_test = _rewrite_test
        source_mod.getstatementrange_ast = getstatementrange_ast
        code_mod.getstatementrange_ast = getstatementrange_ast


class Configs:
    """pytest's `get_config(args)` — a plugin manager with the builtin plugins registered and
    their options added to a parser: ~14 ms of every run that reads nothing but `args` (no
    ini file, no conftest, no repository file; `-p no:NAME` handling only). The server builds
    one per argv it has served (after replying) and keeps it unused; a child's
    `get_config` returns its own copy-on-write copy when args, plugins and prog are the
    ones it was built for, and defers to pytest otherwise."""

    LIMIT = 8

    def __init__(self) -> None:
        import _pytest.config as config_mod
        import pytest

        self.mod = config_mod
        self.prog = config_mod._get_prog_name(
            [os.path.join(os.path.dirname(pytest.__file__), "__main__.py")])
        self.built: dict[tuple, object] = {}

    def prepare(self, argv: list[str]) -> None:
        key = tuple(argv)
        if key in self.built or len(self.built) >= self.LIMIT:
            return
        with warnings.catch_warnings():
            self.built[key] = self.mod.get_config(list(argv), None, prog=self.prog)

    def install(self) -> None:
        original = self.mod.get_config
        built, built_prog = self.built, self.prog

        def get_config(args=None, plugins=None, *, prog=None):
            if plugins is None and prog == built_prog and args is not None:
                hit = built.pop(tuple(args), None)
                if hit is not None:
                    built.clear()  # one run, one config
                    return hit
            return original(args, plugins, prog=prog)

        self.mod.get_config = get_config


class PluginFixtures:
    """pytest's fixture scan of its own builtin plugin modules, done once here.

    Every run's `FixtureManager` calls `parsefactories` on each registered plugin, and for a
    module that loop visits every name of `dir(module)` (unwrapping each value, looking for
    `_mock_name`, reading it twice): ~2k names over the `_pytest.*` modules, ~10 ms per run
    of which nothing depends on the repository. For a name whose value is not a
    `FixtureFunctionDefinition`, has no `__wrapped__` and no `_mock_name`, the loop body does
    nothing (no fixture, no warning). So the server records, per pre-imported `_pytest`
    module, its namespace and the names whose values are *not* of that inert kind, and a
    child's `dir()` inside `_pytest.fixtures` (the loop's only caller of `dir`) returns just
    those names — in `dir()`'s sorted order, so fixtures register in the same order — when
    the module's namespace holds exactly the same objects and none of the skipped values
    has since gained a `__wrapped__` or `_mock_name`. Anything else gets the builtin `dir`."""

    def __init__(self) -> None:
        import types

        import _pytest.fixtures as fixtures_mod

        names = self.names
        real_dir = dir

        def scan_names(obj):  # shadows the builtin `dir` inside _pytest.fixtures only
            cached = names(obj)
            return cached if cached is not None else real_dir(obj)

        # set before the snapshot below, so that module's namespace matches it in a child
        fixtures_mod.dir = scan_names
        self.fixture_type = fixture_type = fixtures_mod.FixtureFunctionDefinition
        self.by_id: dict[int, tuple[object, dict, list[str], tuple]] = {}
        for name, mod in list(sys.modules.items()):
            if not (name == "pytest" or name.startswith("_pytest.")):
                continue
            if not isinstance(mod, types.ModuleType):
                continue
            space = vars(mod)
            if "__getattr__" in space or "__dir__" in space:
                continue  # dir() or attribute access could be dynamic
            snapshot = dict(space)
            keep, inert = [], []
            for key in dir(mod):
                value = snapshot[key]
                (inert if _inert(value, fixture_type) else keep).append(key)
            self.by_id[id(mod)] = (mod, snapshot, keep, tuple(snapshot[k] for k in inert))

    def names(self, obj) -> list[str] | None:
        hit = self.by_id.get(id(obj))
        if hit is None or hit[0] is not obj:
            return None
        _, snapshot, keep, inert = hit
        space = vars(obj)
        if len(space) != len(snapshot):
            return None
        for key, value in snapshot.items():
            if space.get(key, _MISSING) is not value:
                return None
        for value in inert:
            if not _inert(value, self.fixture_type):
                return None
        return list(keep)


_MISSING = object()


def _inert(value, fixture_type) -> bool:
    """True when `parsefactories`' loop body does nothing for this value (see above);
    `fixture_type` is `_pytest.fixtures.FixtureFunctionDefinition`."""
    try:
        if type(value) is fixture_type:
            return False
        if getattr(value, "_mock_name", None) is not None:
            return False
        return not hasattr(value, "__wrapped__")
    except Exception:  # noqa: BLE001 - an odd object: let pytest's own loop look at it
        return False


class Sources:
    """The repository's modules compiled by the server between runs, used by a child's imports.

    A cold run compiles every repository module it imports (no .pyc: the sandbox sets
    PYTHONDONTWRITEBYTECODE), 0.3-2 ms a file, 4-7 ms a run on the seed tasks. `compile`
    runs no code and is a pure function of the source bytes, the path and the flags, so the
    server compiles the repo's .py files before the first request and again after every
    reply (while the agent thinks; files unchanged since are not compiled again), within a
    time and size budget. A child's `SourceLoader.source_to_code` — the one place importlib
    compiles source — returns the server's code object only when the path and the bytes it
    read are exactly the ones compiled and that compile raised no warning (a warning is
    output the child's own compile must emit), and otherwise makes importlib's own call.

    The replacement is compiled under importlib's frozen filename with that call on the
    original's line, so a traceback through it (a module that fails to compile) reads as the
    cold one: the import system trims its frame as it trims the original's, and pytest shows
    the same `<frozen ...>:LINE: in source_to_code` where nothing trims it."""

    BUDGET_S = 0.1
    MAX_FILES = 2000
    MAX_BYTES = 1 << 20

    def __init__(self, root: str) -> None:
        self.root = root
        self.code: dict[str, tuple[bytes, object]] = {}

    def refresh(self) -> None:
        deadline = time.monotonic() + self.BUDGET_S
        old, new = self.code, {}
        for base, dirs, files in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                if len(new) >= self.MAX_FILES or time.monotonic() > deadline:
                    self.code = new
                    return
                path = os.path.join(base, name)
                data = _read_regular(path, self.MAX_BYTES)
                if data is None:
                    continue
                hit = old.get(path)
                if hit is None or hit[0] != data:
                    code = _compile_silently(data, path)
                    hit = None if code is None else (data, code)
                if hit is not None:
                    new[path] = hit
        self.code = new

    def install(self) -> None:
        """In a child: route importlib's source compile through the cache (see above)."""
        import builtins
        import dis
        import importlib._bootstrap_external as external

        original = external.SourceLoader.source_to_code
        calls = [i.positions.lineno for i in dis.get_instructions(original)
                 if i.opname == "CALL" and i.positions is not None]
        if not self.code or not calls or calls[-1] is None or calls[-1] < 4:
            return
        line = calls[-1]
        text = ("\n" * (line - 4)
                + "def source_to_code(self, data, path, *, _optimize=-1):\n"
                + "    hit = _code.get(path) if _optimize == -1 and type(data) is bytes else None\n"
                + "    if hit is not None and hit[0] == data: return hit[1]\n"
                + "    return _bootstrap._call_with_frames_removed(compile, data, path, 'exec', "
                  "dont_inherit=True, optimize=_optimize)\n")
        space = {"__builtins__": builtins, "__name__": external.__name__,
                 "_bootstrap": external._bootstrap, "_code": self.code}
        exec(compile(text, original.__code__.co_filename, "exec"), space)
        replacement = space["source_to_code"]
        replacement.__qualname__ = original.__qualname__
        replacement.__doc__ = original.__doc__
        external.SourceLoader.source_to_code = replacement


def _read_regular(path: str, limit: int) -> bytes | None:
    """The bytes of `path` when it is a regular file (never a link, FIFO or device) of at
    most `limit` bytes that this process may read, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks)
            total += len(chunk)
            if total > limit:
                return None
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)


def _compile_silently(data: bytes, path: str):
    """importlib's compile of `data` as `path`, or None when it fails or warns."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            code = compile(data, path, "exec", dont_inherit=True, optimize=-1)
        except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError):
            return None
    return None if caught else code


def pristine_files(roots: list[str]) -> list[str]:
    out = []
    for root in roots:
        if os.path.isfile(root):
            out.append(root)
            continue
        for base, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            out += [os.path.join(base, f) for f in sorted(files) if f.endswith(".py")]
    return out


class Server:
    def __init__(self, pristine: list[str]) -> None:
        spec = os.environ.pop("RLVR_SANDBOX_UIDS", "")
        self.privsep = bool(spec) and (os.geteuid() == 0 or _can_setuid())
        self.uid_base, self.uid_count = (int(x) for x in spec.split(":")) if spec else (0, 0)
        here = os.path.dirname(os.path.abspath(__file__))
        # `python SCRIPT` put the script's directory first; `python -m pytest` puts the cwd
        # there instead. The cold path's sys.path is this one with /work at the front.
        self.cold_path = [WORK] + sys.path[1:]
        sys.path[:] = [p for p in sys.path if p not in ("", WORK, here)] + (
            [here] if here in sys.path[1:] else [])
        _preimport()
        self.pristine = Pristine(pristine_files(pristine))
        self.configs = Configs()
        self.fixtures = PluginFixtures()
        self.sources = Sources(WORK)
        self.sources.refresh()
        self.python = sys.executable
        self.modules = sorted({n.split(".", 1)[0] for n in sys.modules})
        # Protocol channel on private fds; fd 0 -> /dev/null, fd 1 -> /dev/null for the
        # server itself (the child re-points it at its pipe).
        self.rfd = os.dup(0)
        self.wfd = os.dup(1)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
        self.buf = b""
        self.counter = 0
        import gc

        gc.freeze()  # children do not copy-on-write the server's heap when they collect

    # ---- protocol -------------------------------------------------------------------------
    def send(self, obj: dict) -> None:
        data = json.dumps(obj).encode() + b"\n"
        view = memoryview(data)
        while view:
            n = os.write(self.wfd, view)
            view = view[n:]

    def recv(self) -> dict | None:
        while b"\n" not in self.buf:
            chunk = os.read(self.rfd, 1 << 16)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def serve(self):
        """Answer requests until EOF (returns None) — or, in a forked child, return the
        argv that child must run."""
        self.send({"ready": True, "protocol": PROTOCOL, "privsep": self.privsep,
                   "uids": [self.uid_base, self.uid_count], "modules": self.modules,
                   "python": sys.version.split()[0], "pid": os.getpid()})
        while True:
            req = self.recv()
            if req is None:
                return None
            if req.get("op") == "ping":
                self.send({"id": req.get("id"), "status": "pong"})
                continue
            try:
                job = self.run(req)
            except Exception as exc:  # a bug or a malformed request: not the policy's doing
                self.send({"id": req.get("id"), "status": "error",
                           "detail": f"{type(exc).__name__}: {exc}"})
                continue
            if job is not None:  # we are the child
                return job
            try:  # while the agent thinks
                self.configs.prepare([str(a) for a in req["argv"]])
                self.sources.refresh()
            except Exception:  # noqa: BLE001 - only an optimisation: the child builds its own
                pass

    # ---- one run --------------------------------------------------------------------------
    def run(self, req: dict):
        limits = req["limits"]
        uid = req.get("uid")
        if self.privsep:
            if not isinstance(uid, int) or not self.uid_base <= uid < self.uid_base + self.uid_count:
                raise ValueError(f"uid {uid!r} is outside this server's range")
        else:
            uid = None
        argv = [str(a) for a in req["argv"]]
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:  # ---------------- child ----------------
            try:
                self.enter_child(uid, limits, out_w, err_w, argv)
            except BaseException:
                os._exit(70)
            return argv
        os.close(out_w)
        os.close(err_w)
        cap = int(limits["out"])
        acc = {out_r: [bytearray(), 0], err_r: [bytearray(), 0]}
        deadline = start + float(limits["wall"])
        exited, timed_out, status, deferred = False, False, 0, False
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pidfd = None
        open_fds = [out_r, err_r]
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = not exited
                break
            waits = open_fds + ([pidfd] if pidfd is not None and not exited else [])
            ready, _, _ = select.select(waits, [], [], min(remaining, 0.05 if pidfd is None else remaining))
            for fd in ready:
                if fd == pidfd:
                    continue
                if not _read_into(fd, acc[fd], cap):
                    open_fds.remove(fd)
            if not exited:
                done, st = os.waitpid(pid, os.WNOHANG)
                if done:
                    exited, status = True, st
                    # the cold sandbox's pid namespace dies with pytest: so do its leftovers.
                    # When nothing else holds the pipes (what pytest wrote is already in
                    # them), the sweep can wait until the reply is out; it still runs
                    # before the next request is read.
                    if _drain_now(open_fds, acc, cap):
                        deferred = True
                    else:
                        self.cleanup(uid, pid)
            if exited and not open_fds:
                break
        if timed_out or not exited:
            self.cleanup(uid, pid)
            if not exited:
                _, status = os.waitpid(pid, 0)
        if pidfd is not None:
            os.close(pidfd)
        for fd in (out_r, err_r):
            os.close(fd)
        wall = time.monotonic() - start
        (out, out_n), (err, err_n) = acc[out_r], acc[err_r]
        self.send({
            "id": req.get("id"), "status": "done", "timed_out": timed_out,
            "exited": os.WIFEXITED(status), "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "stdout": base64.b64encode(bytes(out)).decode(), "stdout_total": out_n,
            "stderr": base64.b64encode(bytes(err)).decode(), "stderr_total": err_n,
            "wall": wall,
        })
        if deferred:
            self.cleanup(uid, pid)
        return None

    def enter_child(self, uid, limits: dict, out_w: int, err_w: int, argv: list) -> None:
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, _max_fd())

        def cap(kind, soft, hard=None):
            if soft is None or soft <= 0:
                return
            resource.setrlimit(kind, (int(soft), int(hard if hard is not None else soft)))

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        cpu = limits.get("cpu")
        cap(resource.RLIMIT_CPU, cpu, (cpu or 0) + 1)
        cap(resource.RLIMIT_AS, limits.get("mem"))
        cap(resource.RLIMIT_FSIZE, limits.get("fsize"))
        if uid is not None:
            cap(resource.RLIMIT_NPROC, limits.get("nproc"))
            _become(uid)
        # the interpreter state `python -m pytest ARGV` has when it calls runpy: argv[0] is
        # "-m" until runpy puts the module's path there, a pristine `__main__`, /work first
        import importlib
        import importlib.machinery
        import types

        sys.argv = ["-m", *argv]
        sys.orig_argv = [self.python, "-m", "pytest", *argv]
        sys.path[:] = list(self.cold_path)
        main = types.ModuleType("__main__")
        main.__loader__ = importlib.machinery.BuiltinImporter
        main.__builtins__ = sys.modules["builtins"]
        main.__annotations__ = {}
        sys.modules["__main__"] = main
        importlib.invalidate_caches()
        if "random" in sys.modules:
            sys.modules["random"].seed()  # a fresh process seeds from urandom
        self.pristine.install()
        self.sources.install()
        self.configs.install()
        sys.stdout.flush()

    def cleanup(self, uid, pid: int) -> None:
        """Kill the run's process tree — every process of its uid (without privilege
        separation: its session) — and remove what the uid left in /tmp and /dev/shm (one
        helper process does both)."""
        if uid is None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            return
        self._as_uid(uid, sweep=True, wipe=True)

    @staticmethod
    def _as_uid(uid: int, *, sweep: bool, wipe: bool = False) -> None:
        hpid = os.fork()
        if hpid == 0:
            try:
                _become(uid)
                if sweep:
                    for _ in range(50):
                        try:
                            os.kill(-1, signal.SIGKILL)  # kill(-1) spares the caller
                        except ProcessLookupError:
                            break
                        if not _processes_of(uid):
                            break
                        time.sleep(0.002)
                if wipe:
                    for root in SCRATCH:
                        try:
                            names = os.listdir(root)
                        except OSError:
                            continue
                        for name in names:
                            path = os.path.join(root, name)
                            try:
                                if os.lstat(path).st_uid != uid:
                                    continue
                                if os.path.isdir(path) and not os.path.islink(path):
                                    shutil.rmtree(path, onerror=_force)
                                else:
                                    os.unlink(path)
                            except OSError:
                                pass
            finally:
                os._exit(0)
        os.waitpid(hpid, 0)


_CAP_HEADER_V3 = 0x20080522


def _become(uid: int) -> None:
    """Become `uid` with no capability left. From uid 0 the kernel clears the capabilities
    at setresuid; from a non-zero supervisor uid (`supervisor_as_uid`) it keeps them, and
    a child holding CAP_SETUID could become its server's uid. So the sets are emptied with
    capset(2) and read back; a child that still holds one never runs."""
    import ctypes  # LAZY_MODULES

    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    header = (ctypes.c_uint32 * 2)(_CAP_HEADER_V3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable x 2 words: all empty
    if ctypes.CDLL(None, use_errno=True).capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    caps = _capabilities()
    held = {name: caps.get(name) for name in ("CapInh", "CapPrm", "CapEff", "CapAmb")
            if caps.get(name) != 0}  # unreadable counts as held: fail closed
    if held or os.getresuid() != (uid, uid, uid):
        raise PermissionError(f"run uid {uid} still privileged: {held}")


def _capabilities() -> dict[str, int]:
    """This process's capability sets as the kernel reports them ({"CapEff": bits, ...}
    for CapInh, CapPrm, CapEff, CapBnd, CapAmb); {} where /proc cannot say."""
    try:
        with open("/proc/self/status") as fh:
            return {name: int(value, 16) for name, _, value in
                    (line.partition(":") for line in fh if line.startswith("Cap"))}
    except (OSError, ValueError):
        return {}


def _can_setuid() -> bool:
    """CAP_SETUID and CAP_SETGID effective: a supervisor started as a non-zero uid with them
    as ambient capabilities (`serve(supervisor_as_uid=True)`, which keeps the sandbox's fixed
    address layout) drops its children to their uids as a uid-0 one does."""
    wanted = (1 << 6) | (1 << 7)  # CAP_SETGID, CAP_SETUID
    return _capabilities().get("CapEff", 0) & wanted == wanted


def _force(func, path, _exc):
    try:
        os.chmod(os.path.dirname(path), 0o700)
        if not os.path.islink(path):
            os.chmod(path, 0o700)
        func(path)
    except OSError:
        pass


def _drain_now(open_fds: list, acc: dict, cap: int) -> bool:
    """Read what the pipes hold without waiting; True when every pipe reached EOF (no
    process of the run still holds one)."""
    while open_fds:
        ready, _, _ = select.select(open_fds, [], [], 0)
        if not ready:
            return False
        for fd in ready:
            if not _read_into(fd, acc[fd], cap):
                open_fds.remove(fd)
    return True


def _read_into(fd: int, acc: list, cap: int) -> bool:
    try:
        chunk = os.read(fd, 1 << 16)
    except BlockingIOError:
        return True
    if not chunk:
        return False
    if len(acc[0]) < cap:
        acc[0] += chunk[: cap - len(acc[0])]
    acc[1] += len(chunk)
    return True


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


def _leave(exc: SystemExit) -> None:
    """End a child the way a cold ``python -m pytest`` ends, minus what no output depends on.

    `Py_FinalizeEx` first joins non-daemon threads (`threading._shutdown`), then runs the
    atexit handlers, then flushes sys.stdout and sys.stderr (a failed flush makes the exit
    status 120), and only then clears modules and collects the heap. The first three are done
    here in that order and the process leaves with ``os._exit(status)``: the teardown of the
    server's pre-imported modules is the costly part and shows in no run's output. Returns
    (the caller re-raises) when the status is not None or a C int — the interpreter prints
    such a value and exits 1 — or when a flush fails: the interpreter then reports and exits
    as it would (threads are already joined and the atexit list is empty: both no-ops)."""
    code = 0 if exc.code is None else exc.code
    if not isinstance(code, int) or not -(1 << 31) <= code < (1 << 31):
        return
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()
    import atexit

    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None and not getattr(stream, "closed", False):
                stream.flush()
    except Exception:  # noqa: BLE001 - the interpreter's own flush reports it
        return
    os._exit(int(code))


def _max_fd() -> int:
    try:
        return os.sysconf("SC_OPEN_MAX")
    except (ValueError, OSError):
        return 1 << 16


if __name__ == "__main__":
    # argv: the read-only trees whose files never change (public tests, this plugin)
    _job = Server(sys.argv[1:]).serve()
    if _job is None:
        sys.exit(0)
    del _job
    import runpy

    try:
        # exactly what the interpreter calls for `-m pytest` (one frame deeper: this module's)
        runpy._run_module_as_main("pytest")
    except SystemExit as _exit:
        _leave(_exit)  # returns only when the interpreter must finish as it would cold
        raise
