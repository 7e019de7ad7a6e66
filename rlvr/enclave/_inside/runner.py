"""The verdict child: runs a hidden test suite against patched code it must not trust.

Everything here executes inside the enclave sandbox, in a process forked from the
fork-server (server.py) for exactly one run. The code under test runs *in the same
interpreter* as pytest and this runner, so the design assumes that code is hostile and
builds the verdict from evidence it cannot produce.

How a test comes to count as passed
-----------------------------------
1. Hidden test modules are compiled by the trusted server from source held in memory; no
   hidden test source is ever written to disk. Pytest collects empty placeholder files and
   our `_MemModule` builds the module from the in-memory code object; the module is never
   put in ``sys.modules``. Asserts are plain (no pytest rewriting: explanations are never
   shown to anyone).
2. While compiling, an AST pass appends a *sentinel* to every test function (and puts one
   before each ``return``): a call to a constant that, once compiled, is replaced inside the
   code object's ``co_consts`` by the real ``sys.audit`` builtin. The call site has no name
   lookup a patch could redirect, and code objects are immutable.
3. The sentinel raises the audit event ``rlvr.pass``. The audit hook (installed before any
   untrusted code exists; CPython offers no way to remove or even list audit hooks) accepts
   it only if the raising frame runs a genuine hidden test code object with the expected
   name, and every frame from there down to the trusted per-item frame registered for the
   current test runs code that existed before the patch was imported (pytest, pluggy,
   stdlib, this runner) or hidden-test code, with our `pytest_pyfunc_call` among them: the
   genuine body ran to the end *because pytest called it*. Direct ``parametrize`` arguments
   must be the very objects collected for that item.
4. A test is ``passed`` iff its sentinel was accepted AND pytest's own reports say passed
   (setup and teardown errors still fail it). A forged pytest report gains nothing.
   ``unittest.TestCase`` methods (any class name, inherited ones too) get the same sentinel;
   their pyfunc role is our ``_UnitTestItem.runtest``, which hands the test to unittest's
   own ``TestCase.run`` (stdlib frames between it and the body are trusted code). What
   unittest reports (setUp/tearDown errors, failed ``subTest``s, skips, expected failures)
   decides the report: a failure fails, a skip is a skip. TestCase's API is what a test
   body calls to decide (``self.assertEqual``), and a patch can reach every hidden
   TestCase class (``__subclasses__``): TestCase's own dict and the unittest modules are
   checked after every test, and before and after each call the test class's MRO may bind
   TestCase's API names only to genuine hidden functions, TestCase's own values or plain
   data (an inserted base class or a rebound method fails the test). The equality guard
   below covers the ``assertEqual`` family as it covers ``assert ==``.
   Plain suites (no fixtures, conftests, setup hooks or xfail; see lean.py) skip pytest's
   collection tree and per-test protocol: the lean runner builds the same items with
   pytest's own parametrization code and calls each test itself. Its functions play the
   same protocol roles (arm, collected, loop, run_item, pyfunc) under the same hook, so
   the evidence a pass needs is the same; what it does not foresee at run time it hands
   back to pytest (a signed ``fallback`` record, and the server re-runs the job).
5. Only the hook writes result records, to an inherited pipe, each HMAC-SHA256-signed (with a
   per-run nonce and sequence number) with a key the runner read from its own pipe and
   closed before untrusted code ran. The key lives only in the hook's closure; the HMAC uses
   C builtins captured before arming, never Python code a patch could replace. The server
   drops unsigned, out-of-sequence or malformed records and flags them as forgery. Exit
   codes, stdout and files are ignored; a test without a record is failed.

Frames: views, not frames
-------------------------
A real frame object hands out ``f_back``, ``f_locals`` and ``f_globals`` with no audit
event, so one real frame of the code under test reaches the whole stack: the hidden test's
locals (expected values), its module's globals and code constants, pytest's items and, in
the middle of an equality probe, the audit hook's own frame (its closure holds the key).
Refusing frames altogether broke libraries (deprecation decorators that read
``inspect.currentframe().f_back``, ``traceback.format_exc``, ``logging.exception``). So:

* ``sys._getframe`` is replaced (in the server, before the snapshot that guards ``sys``)
  by a function that raises the event ``rlvr.frames``; the *hook* answers it with a
  ``FrameView`` chain: plain copies, made at call time from the real stack, linked to
  copies. ``inspect.currentframe``, ``logging``'s caller lookup, ``traceback.extract_stack``
  / ``print_stack`` / ``walk_stack``, ``typing``, ``enum`` and ``namedtuple`` look
  ``sys._getframe`` up at call time and get views. A view of a frame of the code under test
  shows its real code, line, globals and locals; a view of a trusted frame (stdlib, pytest,
  the enclave, or code running in an enclave module's globals) shows a ``CodeView`` (file,
  name, qualname, first line: no constants, no bytecode), its line, ``__name__`` /
  ``__file__`` / ``__package__`` of its globals and empty locals. A view of a hidden frame
  (hidden-test code, or code running in a hidden module's globals) does not say which
  hidden test or line it is: its file is the alias every hidden module is compiled under
  and sees as ``__file__`` (``<hidden>.py`` in the module's own directory, see "Which test
  is calling" below), its name and qualname ``<hidden>``, its globals only that
  ``__file__`` and the ``__name__`` ``<hidden>``, and genuine hidden code runs on line 1.
  Views pass
  ``isinstance(v, types.FrameType)`` so ``inspect.getframeinfo`` / ``inspect.stack`` work.
  The view classes and the replacement live in a namespace of their own (no path from them
  to this module's globals), hold no state and no real frame, and are filled by the hook
  through slot descriptors captured before arming: whoever raises ``rlvr.frames`` by hand
  or rebinds the classes gets nothing a view of its own stack would not show. The raw
  builtin stays refused to everyone but the three stdlib callers above.
* ``tb_frame`` may be read only by ``traceback._walk_tb_with_full_positions`` /
  ``traceback.walk_tb`` while they are consumed by ``StackSummary._extract_from_extended_frame_gen``
  (checked by code identity: the accessor, its consumer, and for ``walk_tb`` the nested
  ``extended_frame_gen`` between them). That extractor never hands a frame back: it builds
  ``FrameSummary`` records (file, line, name, and with ``capture_locals`` the locals'
  reprs). Before each allowed read the hook checks that every binding of ``traceback``,
  ``linecache`` (``lazycache`` receives ``f_globals``), ``itertools`` and ``collections``
  (``islice`` / ``deque`` receive the frame generator) is still the pre-arming one, and
  ``capture_locals`` is honoured only for frames of the code under test. Everything else
  that reads ``tb_frame`` (``traceback.walk_tb`` by the code under test, ``inspect.trace``)
  and ``gi_frame`` / ``cr_frame`` / ``ag_frame`` is refused.
* ``traceback.clear_frames`` (unittest's ``assertRaises`` calls it on the caught
  exception's traceback) may read ``tb_frame`` too, by code identity: it only calls the C
  ``frame.clear()`` on it (an executing frame refuses; a finished one drops its locals).
* Tracebacks formatted this way show the file, line and function name of the pytest
  frames they pass through, and of hidden frames the alias file, line 1 and the function's
  name (see Residual risk) - never locals, constants or source: hidden files on disk are
  empty placeholders. Warnings' ``stacklevel`` is resolved in C on real frames and yields
  only a file name and line: for a hidden frame, the alias and 1.

Which test is calling
---------------------
A patch that knows a hidden suite (an upstream suite a model memorised) can be right only
at its graded call sites and wrong everywhere else, if anything tells it which test or line
is calling. Every channel that reports a frame reads the code object (views, warnings'
stacklevel resolved in C, tracebacks through hidden frames, logging's caller lookup,
``__code__`` of a hidden function the code under test reaches), so the code objects say
nothing: `compile_suite` compiles every hidden module under one alias file name per
directory (`hidden_alias`: ``<hidden>.py`` next to it, absent on disk; the module's
``__file__`` is the same alias, so ``os.path.dirname(__file__)`` finds the data files and a
hidden test checking ``record.filename == __file__`` for a warning it caused still passes)
and with every statement on line 1, column 0 (`_on_line_one`); every hidden test module is
named ``rlvr_hidden.<hidden>`` (a warnings filter keyed on the module a warning is
attributed to names nothing either). Function names stay in the code objects, because
pytest needs them (fixtures are named by ``__name__``, parametrize ids of function values
too), and are withheld where the enclave builds what the code under test sees: frame
views name no hidden function. The honest cost, measured against the corpus (none of the
six libraries' suites checks a caller's name or line): a deprecation warning that names its
caller names the alias and line 1, a caller-name helper returns ``<hidden>`` under a hidden
test, and failure details (trusted side only) carry no line numbers for hidden frames.
The cases ``frame_view_site_*`` and ``hidden_site_*`` in the adversarial suite key on each
of these channels.

What the armed hook refuses (each with a safety flag)
-----------------------------------------------------
Frame and object-graph introspection (the raw ``sys._getframe`` builtin except for three
stdlib callers that only read the caller's module name, ``sys._current_frames``,
``tb_frame`` other than as above, ``gi_frame`` / ``cr_frame`` / ``ag_frame``,
``gc.get_objects/referrers/referents``, ``sys.settrace/setprofile``), ``ctypes`` (purged from the process before any child exists
and never importable again), building code or functions (``code.__new__``,
``function.__new__``, assigning ``__code__``), process creation (``fork``, ``exec``,
``posix_spawn``, ``subprocess``, ``os.system``; the unaudited ``_posixsubprocess`` and
``signal.signal``/timers are replaced by stubs), signals to any process, new audit hooks,
rlimit changes, network calls, links, and opens, listings or writes outside the run
directory and the read-only runtime (``/proc`` included). Listing a hidden directory that
holds a .py file (the hidden root, a helper package), by path or through a directory fd
(``os.listdir(fd)``, ``os.scandir(fd)``, ``os.fwalk``: compared by device and inode), is
refused unless every frame on the stack is trusted or hidden-test code: pytest collecting
it, or a hidden test listing its own directory, still can; the code under test, or
anything it calls, cannot (a hidden directory of data files only stays listable).

Integrity checkpoints compare, by identity, the bindings of builtins, sys, pytest, the
pytest/pluggy modules on the run path, this runner, the lean runner and the hidden test
modules (after every test), plus every other pytest/pluggy module, their classes and the
plugin registry and hook-implementation lists (after collection and at the end) with a
snapshot taken before untrusted code ran: in the server, before any fork, for everything a
child does not change before arming (`presnapshot`), and at arming for the rest. A
difference is the flag ``tamper_integrity`` and fails the verdict (and every test reported
after it).

Collection: checkpoints, name plans and pinned modules
------------------------------------------------------
The code under test first runs when a hidden module imports the package: in the middle of
collection, which is a sequence of trusted steps that read bindings (``exec_hidden`` in this
runner's and the lean runner's globals, pytest's collectors and the makeitem hooks,
``pytest.mark``, unittest's ``TestCase`` / ``TestLoader`` looked up through ``sys.modules``)
and build the hidden namespaces the tests later run in. A change made there and undone
before the one checkpoint at the end of collection went unseen, and a namespace changed
during collection was snapshotted as it was then. So:

* A checkpoint wherever the code under test may have run before a trusted step reads a
  binding: before each hidden module is built (``STEP_EVENT`` from `exec_hidden`: the
  per-test namespaces, this runner's and lean's globals among them, every hidden namespace
  built so far, the pinned modules), after each module-level import of a hidden module that
  may run the code under test (one whose root is neither stdlib nor pytest/pluggy, or a
  relative one; `compile_suite` puts the event after it, raised through the sentinel's
  constant) and when the module has been built (``HIDDEN_EVENT``). The last two also compare
  what a module body and the collection of its tests read: the module and class dicts of
  `COLLECTION_PATH` (~1.9k bindings). A wrapper installed at import time must still be bound
  when the body or the collection calls it, so it is seen before it runs; pytest's other
  classes, which no collection step reads, are compared at the end of collection and of the
  run as before. Each comparison is by identity (one C pass per dict), so a checkpoint
  costs tens of microseconds (+2-5% per warm verdict on the real-library suites).
* Hidden namespaces fixed from the compiled plan: `compile_suite` derives from each hidden
  test module's and conftest's compiled AST the names its code can bind (`_plan_names`:
  stored or deleted names, defs, classes, imports, except/match captures, ``global``
  declarations, module dunders) and, for each top-level class with plain bases (object,
  TestCase, a class of the same module) and no decorator or metaclass, the names its body
  can bind. The hook keeps private copies. When a hidden module has been built (the event
  accepted once per namespace, from `exec_hidden`'s frame only) its namespace may hold only
  planned names and is snapshotted *then*, before the code the run calls next (pytest's
  collector, the next hidden module's imports) can touch it, and compared at every later
  checkpoint and after every test. A hidden namespace that reaches the end of collection
  without having been handed over fails the run; hidden package namespaces
  (``__init__.py``: they gain submodules later) are snapshotted at the end of collection.
* Names nobody planned are refused by both runners alike: a module-level name (a planted
  ``pytest_generate_tests``, ``pytestmark``, fixture or ``test*``) when the module is built,
  before the lean runner could hand the job to pytest (whose run refuses it again), and a
  name in a hidden test class's dict its plan lacks when pytest's or the lean collector
  reaches the class (``CLASS_EVENT``; the dict is read through type's descriptor, no
  metaclass code runs; unittest's ``__init_subclass__`` attributes are planned).
* The runner's dependencies in ``sys.modules`` (every guarded module: builtins, sys, os,
  pytest, ``_pytest.*``, ``pluggy.*``, ``unittest.*``...; `pinned_modules`) are pinned by the
  server before any package exists and compared by identity at every collection checkpoint
  and at the end; after each test only those a test's run reads by name (`PER_TEST_PINS`).
  A fake ``unittest`` or ``unittest.loader`` put there at import is seen at the checkpoint
  right after that import, before pytest's unittest plugin consults it.

Equality guard: for a hidden-test ``assert a == b`` (or ``!=``, or unittest's
``assertEqual`` family) the guard looks, element-wise through plain lists, tuples and dicts
(and pre-existing subclasses of list and dict such as ``OrderedDict`` or ``Counter`` met by
a plain one; bounded), for a place where a plain builtin value meets an object whose
equality it does not take on trust. Trust goes by the *class of the object*, never only by where its
``__eq__`` was defined: an object is trusted only if its class existed before the patch
with the MRO it had then (every class alive in the server is recorded with its MRO tuple;
a class made or rebased afterwards - a patch subclass of ``collections.UserString``,
``fractions.Fraction`` or ``unittest.mock._ANY`` inheriting their stdlib ``__eq__`` - is
not), and its ``__eq__`` is then a C slot, or the original Python method of a pre-existing
class *and* the instance's own state (slots and ``__dict__``, one level into plain
containers, read through C descriptors) holds no untrusted object (a ``UserString`` whose
``data`` or a ``Fraction`` whose ``_numerator`` the patch replaced is not trusted). C types
that forward a comparison to another object (``weakref.proxy``, ``MappingProxyType``) are
never trusted.

Where such a place exists, the guard itself runs the real comparison and two probes per
place (four places at most, drawn at random), in an order drawn from ``os.urandom``, all
through one function, on fresh copies of the plain side: a probe is the plain value with
the value at that place replaced by one of the same type and shape - every plain scalar in
it redrawn (an int moved by a log-uniform offset keeping its sign, a float by 1-101% of its
magnitude, one letter or digit of a str/bytes replaced by one of the same class; dict keys
and container lengths kept), so a value class that rightly ignores part of the other side
(semver ignores build metadata) still sees a different value - drawn per comparison from
the OS, never the seeded ``random`` module. The real comparison gets a
fresh equal copy built the same way, so identity or interning does not mark it either:
every call has the same frames (views show the same chain), recursion depth, types and
shapes, and no call order marks the real one. A probe claimed equal fails the assertion
with the flag ``eq_override`` (the "AlwaysEqual" hack); a real comparison that does not
hold fails it there, after the remaining probes have run, so an object that answers by call
order (False to the first, True afterwards) is flagged wherever the real call was drawn (the
hidden test's own comparison that follows cannot make a pass of it; its errors propagate
unflagged). A probe that raises is not a claim: legitimate
``__eq__`` methods that build an object from the other side reject the probe, and the real
comparison then decides. ``!=``: the object is asked whether it differs from itself.

Threads
-------
CPython may switch threads between any two bytecodes, so a thread of the code under test can
run while the main thread is inside a trusted step, the hook included. Two rules:

* The hook ignores the audit events of its own reads (frame views, the who-is-asking
  lookup) *per thread*: a set of thread idents, not one flag. With one flag, a thread that
  asked for ``sys._current_frames()`` while the main thread was inside the hook was waved
  through and could take the hook's key from its frame (``thread_race_hook_window``,
  ``thread_race_frame1_window`` obtained ``passed`` that way).
* Before each trusted step that reads bindings (accepting a pass, building a hidden
  module, every collection checkpoint, the per-test checkpoints, the end), the hook waits for threads started since arming to end
  (``_thread._count()``, C, not rebindable; at most THREAD_WAIT_STEPS sleeps per run). One
  still running fails the run (``tamper_thread_alive``): CPython cannot stop a thread, and
  a step read while it runs is not evidence. Threads that end, joined or not, and
  executors used as context managers cost an honest patch nothing.

Runtime lock: the argument above is made for CPython 3.11 and pytest 9.2.0 (audit events,
frame layout, pytest internals); `runtime_refusal` makes the server refuse any other
version before it arms, and the host raises ``errors.UnsupportedRuntime``.

Residual risk (honest list)
---------------------------
CPython is not a security boundary. The sandbox (namespaces, a fresh unprivileged uid per
run, rlimits, no network, nothing secret on disk) is the hard boundary; this module raises
the cost of forging a *verdict* from inside it. Known gaps:

* Patch-and-restore within one window. Module attributes and class attributes can be
  rebound without an audit event; a patch that rebinds pytest internals and restores them
  before the next checkpoint can change what pytest computes - fixture values, indirect
  parametrization, which items exist. The collection checkpoints shrink the windows to:
  the package's own import (nothing trusted but the import system runs inside it); a hidden
  module body's calls into the code under test (a decorator or module-level call it
  supplies) up to the next checkpoint; the collection of one module, in which pytest calls
  code under test (``__class__`` / ``__getattr__`` / ``__bool__`` of package objects, or of
  attributes set on genuine test functions, whose ``__dict__`` is not compared) and a pytest
  binding changed and restored between two of those calls is not seen, nor is a name
  planted in the module's namespace there and removed again before the end of collection
  (pytest reads ``pytest_generate_tests``, fixtures and marks while collecting the module;
  a change left in place is seen: the namespace was snapshotted before). The sentinel
  still requires the genuine assertions to pass on the
  values they get, and every test id must be reported.
* A hidden namespace is snapshotted when its module body has run, not before: what the code
  under test does to it *during* the body, through an object the body hands it (a decorator
  or callback it supplies; frames and the module object are out of its reach) and within
  the planned names (rebinding an imported name), is the snapshot. Modules whose source
  binds names no AST pass can enumerate (``globals()``, ``vars()``, ``setattr``, ``exec``,
  ``eval``, ``__dict__``, ``sys.modules``, ``import_module``, star imports, ``__slots__``)
  get no name plan, nor do classes with decorators, metaclasses or other bases: unplanned
  names there are not refused (their namespaces are still snapshotted early). A name
  planted on a hidden class after it was collected is not refused (pytest reads
  ``pytest_generate_tests`` and fixtures at collection only; methods planted later are not
  collected).
* Only the guarded modules present in the server are pinned in ``sys.modules``; other
  entries (json, the package's dependencies) are not, and after each test only
  `PER_TEST_PINS` are compared. Runner code raises its checkpoint events through
  ``sys.audit`` looked up by name: a patch that rebinds it drops the checkpoints until the
  ``sys`` namespace is next compared (a hidden namespace whose ``HIDDEN_EVENT`` was
  dropped fails the run at the end of collection).
* Hidden test *data* files (non-.py) must be on disk for tests that open them and are
  readable by the code under test; hidden constants (expected values) are in memory - the
  generic ways to reach them (frames, gc, sys.modules, ctypes, /proc) are blocked, not
  every conceivable one. Every module and class is reachable without audit
  (``object.__subclasses__()``, ``__globals__``, closures), so no module-level object may
  refer to the run's context, pytest's Config (its plugin manager holds the session and
  its items) or the compiled suite: the context lives on our plugin instance and in the
  runners' frames, and `cut_config_roots` drops pytest's own module-level references. The
  adversarial case ``suite_via_class_globals`` walks that graph; a pytest upgrade that adds
  a new module-level reference to the Config would reopen it. A task whose dependencies need ``ctypes`` would have to
  pre-import it, re-opening raw memory access.
* The equality guard covers ``==``/``!=`` in asserts and unittest's equality assertions
  only: ``in``, ``bool()``, hashing and custom-vs-custom comparisons are not guarded, and a
  class that returns True only for the exact expected value is indistinguishable from a
  correct one. Probes are a counterfactual, not a proof: an object that accepts a *set* of
  candidates including the expected value (everything in ``[lo, hi]``, "lo, hi or x") is
  caught only when a probe lands in that set (log-uniform offsets make near neighbours
  likely; each graded assertion and each consensus run draws again, so the chance of
  escaping shrinks geometrically, but it is a chance). ``None`` has no other value of its
  type, so its probe is a bare ``object()``; an empty container's probe adds an element;
  the ``!=`` probe compares the object with itself (an object can tell that). An honest
  class whose equality is coarser than the probe's step (ints modulo a small number, floats
  within more than 1%) is flagged: the price of a probe that looks like a real value.
  The guard runs the real comparison itself, so an honest ``__eq__`` runs four times per
  guarded place (two probes, the real comparison, the test's own; twice before). Pre-existing
  objects with a permissive ``__eq__`` by design are trusted: ``unittest.mock.ANY`` itself
  returned by the code under test compares equal to anything and is not caught - hidden
  tests legitimately put ``ANY`` (and ``pytest.approx``) on the expected side, and an
  object's provenance cannot be told from the object; the same holds for pre-existing C
  containers (``OrderedDict``, ``deque``) holding untrusted objects when they meet a value
  that is not a plain list/tuple/dict.
* Frame views are copies taken when ``sys._getframe`` was called (``f_lineno`` does not
  advance, writes to ``f_locals`` go nowhere - as for a real frame in 3.11); code that
  needs a real frame object in C (``frame.clear()`` semantics, ``sys.settrace``) or reads
  generator frames (``inspect.getgeneratorstate``) or ``inspect.trace()`` does not work.
  Code created at run time by the code under test or by a hidden test through
  ``eval``/``exec``/``dataclasses`` counts as the code under test's (its view shows its
  locals) unless it runs in a hidden module's globals.
* Hidden-test objects handed to the code under test (callbacks, generators, fixtures such
  as ``request``) expose what Python exposes without audit: a hidden callback's
  ``__globals__`` is its test module's namespace, its ``__code__`` holds constants.
  Hidden TestCase and ``Test*`` classes are reachable through ``object.__subclasses__()``;
  their functions' code carries the alias file name and line 1, but their ``__name__``,
  ``__qualname__`` and ``co_name`` are the real ones (pytest names fixtures and parametrize
  ids by them), and so is the name in a traceback through a hidden frame that reaches the
  code under test (a hidden callback raising into it, a with-block inside a context manager
  of the code under test): there, which hidden *function* is running can still be read,
  never its file or line. A bytecode offset (``tb_lasti``) is not hidden either.
* That it is being graded at all is not a secret the enclave can keep
  (``"_pytest" in sys.modules``); which test is calling now is kept (see "Which test is
  calling"): the directory of a hidden module stays in the alias (tests find their data
  files through it). Closed with it: listing the hidden directory (names of hidden files),
  and PYTEST_CURRENT_TEST (pytest's running test id in ``os.environ``; the pytest runner no
  longer sets it, the lean runner never did - a hidden test that reads it sees it unset). A
  placeholder opened or stat'ed by a guessed name exists (it is empty).
  The listing refusal has an honest cost: a library under test asked to list a hidden
  directory that also holds test modules (data files kept next to the tests, handed over as
  ``os.path.dirname(__file__)``) is refused and flagged; data in a directory of its own is not.
* Threads: a thread that starts *during* a trusted step (from a finalizer or a callback of
  the code under test that the step itself triggers) and ends before the step's next
  thread check can race that one step; CPython offers no audit event for thread start in
  3.11 to refuse it. Python has no way to stop a thread, so a live one fails the run rather
  than being stopped, which also fails honest code that leaves a thread running past a
  test (a pool never shut down): curation rejects such a task instead of trusting it.
* Without root there is no uid switch: the child shares the server's uid; it cannot ptrace
  or read the non-dumpable server and the hook refuses ``kill``, but an escape from the hook
  could kill the server - scored as a failure, never a pass.
* A test that rebinds a global of its own hidden module (``global X; X = ...``) trips the
  integrity check; curation then quarantines or rejects it.
* unittest: a patch that rebinds a hidden TestCase class's API and restores it within one
  test body is the patch-and-restore gap above. Hidden classes' data attributes are not
  checked (``setUpClass`` legitimately sets them). ``IsolatedAsyncioTestCase`` tests fail
  (unflagged): asyncio's Runner installs a SIGINT handler, and signal handlers are refused.
"""
from __future__ import annotations

import _thread
import ast
import os
import random
import sys
import time
import types
import unittest
import warnings

import _pytest
import _pytest.fixtures
import _pytest.python
import _pytest.reports
import _pytest.runner
import _pytest.unittest
import pytest
from _pytest._code import ExceptionInfo
from _pytest.compat import is_async_function as _is_async_function
from _pytest.outcomes import Skipped, XFailed

# Fixed per-run layout (a server runs one child at a time; the dir is wiped in between).
RUN_ROOT = "/tmp/rlvr-enclave/run"
REPO = RUN_ROOT + "/repo"
HIDDEN = RUN_ROOT + "/hidden"
BASETEMP = RUN_ROOT + "/tmp"
# The file name every hidden module is compiled under and sees as its ``__file__``: one name
# for all of them, in the module's own directory (``os.path.dirname(__file__)`` still finds
# the data files next to it, and ``record.filename == __file__`` still holds), that names no
# hidden file. Not a possible module name, and absent on disk.
HIDDEN_ALIAS = "<hidden>.py"
# What views of hidden frames show for the function's name and qualname.
HIDDEN_NAME = "<hidden>"

# The runtime this module's argument is made for: the audit events, frame and code-object
# layout, and pytest internals it relies on are those of CPython 3.11 and pytest 9.2.0
# (requirements/lock.txt). Another version may add an unaudited path or move a binding the
# checkpoints compare, so the server refuses to start on it (`runtime_refusal`).
LOCKED_PYTHON = (3, 11)
LOCKED_PYTEST = "9.2.0"

PASS_EVENT = "rlvr.pass"
EQ_EVENT = "rlvr.eq"
# Collection checkpoints (see "Integrity checkpoints"): STEP_EVENT before each hidden module
# is built and after each of its imports that may run the code under test; HIDDEN_EVENT
# when a hidden module has been built (its namespace is checked against the plan and
# snapshotted); CLASS_EVENT when a hidden test class is collected.
STEP_EVENT = "rlvr.step"
HIDDEN_EVENT = "rlvr.hidden"
CLASS_EVENT = "rlvr.cls"
OUTCOMES = ("passed", "failed", "error", "skipped")
# How long (in 2 ms sleeps, per run) trusted steps wait for threads of the code under test
# to end before a live one fails the run (make_hook.threads_quiet).
THREAD_WAIT_STEPS = 500

# Audit events blocked once armed, by category (the category becomes a safety flag).
_PROCESS_EVENTS = frozenset({
    "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system",
    "subprocess.Popen", "pty.spawn", "os.startfile",
})
_NETWORK_EVENTS = frozenset({
    "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
    "socket.gethostbyname", "socket.gethostbyaddr", "socket.gethostbyname_ex",
})
_INTROSPECTION_EVENTS = frozenset({
    "sys._current_frames", "sys.settrace", "sys.setprofile", "gc.get_objects",
    "gc.get_referrers", "gc.get_referents", "code.__new__", "function.__new__",
    "sys.addaudithook", "cpython._PySys_ClearAuditHooks",
})
_SIGNAL_EVENTS = frozenset({"os.kill", "os.killpg", "signal.pthread_kill"})
_LIMIT_EVENTS = frozenset({"resource.setrlimit", "resource.prlimit"})
_FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
_WRITE_PATH_EVENTS = frozenset({
    "os.mkdir", "os.remove", "os.rmdir", "os.rename", "os.replace", "os.truncate", "os.utime",
    "os.chmod", "os.chown", "os.chflags", "os.lchflags", "os.mkfifo", "os.mknod",
    "os.setxattr", "os.removexattr", "shutil.rmtree", "shutil.move", "shutil.copyfile",
    "shutil.copytree", "shutil.chown", "os.link", "os.symlink",
})
_NO_REIMPORT = frozenset({"ctypes", "_ctypes", "_posixsubprocess", "signal", "_signal", "gc", "_testcapi",
                          "_xxsubinterpreters", "faulthandler", "resource", "_lsprof", "cProfile"})
# sys attributes that legitimately change while tests run.
def runtime_refusal(version_info=None, pytest_version: str | None = None) -> str | None:
    """Why this interpreter and pytest are not the ones the threat model argues for, or None.
    Checked by the server before it arms: a guarantee argued for one version is not assumed
    for another (the host raises `errors.UnsupportedRuntime`)."""
    version_info = sys.version_info if version_info is None else version_info
    pytest_version = pytest.__version__ if pytest_version is None else pytest_version
    problems = []
    if (getattr(version_info, "major", version_info[0]), version_info[1]) != LOCKED_PYTHON \
            or sys.implementation.name != "cpython":
        problems.append(f"python {'.'.join(map(str, tuple(version_info)[:3]))} ({sys.implementation.name}), "
                        f"locked: CPython {'.'.join(map(str, LOCKED_PYTHON))}")
    if pytest_version != LOCKED_PYTEST:
        problems.append(f"pytest {pytest_version}, locked: {LOCKED_PYTEST}")
    return "; ".join(problems) or None


_VOLATILE_SYS = frozenset({
    "stdout", "stderr", "stdin", "__stdout__", "__stderr__", "__stdin__", "last_type",
    "last_value", "last_traceback", "exc_info", "modules", "path_importer_cache", "ps1", "ps2",
    "_clear_type_cache", "tracebacklimit", "exception",
})
# Names pytest itself rebinds during a run.
_VOLATILE_NAMES = frozenset({"_reprcompare", "_assertion_pass", "_config", "__warningregistry__",
                             "_pytest_diamond_inheritance_warning_shown"})
# Pre-imported so that their classes' __eq__ count as trusted for the equality guard and so
# that a patch importing them costs nothing.
PREIMPORT = (
    "fractions", "decimal", "datetime", "enum", "collections", "collections.abc", "dataclasses",
    "functools", "itertools", "operator", "math", "statistics", "string", "re", "json", "copy",
    "heapq", "bisect", "typing", "uuid", "ipaddress", "pathlib", "textwrap", "unicodedata",
    "contextlib", "abc", "numbers", "array", "struct", "time", "calendar", "zoneinfo", "logging",
    "unittest.mock", "traceback", "inspect", "io", "tempfile", "shutil", "glob", "fnmatch",
    "difflib", "pprint", "weakref", "threading", "queue", "base64", "binascii", "hashlib",
    "hmac", "random", "secrets", "csv", "html", "urllib.parse", "ast",
    # Modules a fresh import of which is refused once armed (see _NO_REIMPORT): loaded now,
    # a plain `import` by the code under test just finds them.
    "gc", "signal", "faulthandler", "resource", "subprocess",
)


# ---------------------------------------------------------------------------------------
# Compiling the hidden suite (trusted: runs in the server, cached per task)
# ---------------------------------------------------------------------------------------
class CompiledSuite:
    """A hidden test suite compiled in memory. `test_codes` maps id(code) → function name
    for every instrumented test function; `genuine` holds every code object of the suite
    (kept alive so that ids stay unique)."""

    def __init__(self) -> None:
        self.test_modules: dict[str, tuple[str, types.CodeType]] = {}  # relpath -> (modname, code)
        self.helper_modules: dict[str, tuple[str, types.CodeType, bool]] = {}  # modname -> (relpath, code, is_pkg)
        self.conftests: dict[str, types.CodeType] = {}  # relpath -> code
        self.data_files: dict[str, str] = {}
        self.test_codes: dict[int, str] = {}
        self.genuine: list[types.CodeType] = []
        self.genuine_ids: frozenset[int] = frozenset()
        self.errors: dict[str, str] = {}  # relpath -> SyntaxError text (module collects as error)
        # Whether any hidden source names a fixture that needs pytest's capture/logging
        # plugins (see OPTIONAL_PLUGINS); when none does, each run unregisters them.
        self.needs_io_plugins = True
        # The lean runner's static plan (lean.static_plan), None when the suite needs pytest.
        self.lean: dict | None = None
        # The names each hidden test module / conftest (by file name) and each of their
        # top-level classes (by (file name, class name)) can bind, from its compiled AST;
        # None where the source binds names no AST pass can enumerate (see `_plan_names`).
        self.planned: dict[str, frozenset | None] = {}
        self.planned_classes: dict[tuple[str, str], frozenset | None] = {}


def _is_test_file(name: str) -> bool:
    return (name.startswith("test_") or name.endswith("_test.py")) and name.endswith(".py")


class _Returns(ast.NodeTransformer):
    """Put the sentinel before every `return` of one function body (not nested scopes)."""

    def __init__(self, make_call) -> None:
        self.make_call = make_call

    def visit_FunctionDef(self, node):  # nested scopes keep their own returns
        return node

    visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = visit_FunctionDef

    def visit_Return(self, node):
        value = node.value if node.value is not None else ast.Constant(None)
        tmp = "_rlvr_returned"
        return [
            ast.Assign(targets=[ast.Name(tmp, ast.Store())], value=value),
            ast.Expr(self.make_call(PASS_EVENT)),
            ast.Return(ast.Name(tmp, ast.Load())),
        ]


# unittest.TestCase methods that decide by `first == second` (or `!=`), as the guard's op.
UNITTEST_EQ_ASSERTS = {
    "assertEqual": "==", "assertEquals": "==", "failUnlessEqual": "==", "assertListEqual": "==",
    "assertTupleEqual": "==", "assertDictEqual": "==", "assertSequenceEqual": "==",
    "assertMultiLineEqual": "==", "assertNotEqual": "!=", "assertNotEquals": "!=", "failIfEqual": "!=",
}


class _Instrument(ast.NodeTransformer):
    def __init__(self, placeholder: str, test_file: bool) -> None:
        self.placeholder = placeholder
        self.test_file = test_file
        self.scope: list[tuple[str, str]] = []
        self.tests: set[str] = set()
        self.counter = 0
        self.no_walrus = 0

    def call(self, event: str, *args: ast.expr) -> ast.Call:
        return ast.Call(func=ast.Constant(self.placeholder), args=[ast.Constant(event), *args], keywords=[])

    def visit_ClassDef(self, node):
        self.scope.append(("class", node.name))
        self.generic_visit(node)
        self.scope.pop()
        return node

    def _visit_function(self, node):
        # pytest-style tests: `test*` functions of test files, at module level or in `Test*`
        # classes. unittest-style: `test*` / `runTest` methods of any class, in any hidden
        # module (a TestCase subclass needs no Test prefix, and its tests may be inherited
        # from a base class or mixin of a helper module). Which classes are TestCases is known
        # only at run time; a sentinel in a method nobody collects is never accepted (the hook
        # wants the current item's function name, called by the pytest or unittest protocol).
        in_classes = bool(self.scope) and all(kind == "class" for kind, _ in self.scope)
        is_test = isinstance(node, ast.FunctionDef) and (
            (self.test_file and node.name.startswith("test")
             and all(name.startswith("Test") for _, name in self.scope) and all(k == "class" for k, _ in self.scope))
            or (in_classes and (node.name.startswith("test") or node.name == "runTest"))
        )
        self.scope.append(("func", node.name))
        self.generic_visit(node)
        self.scope.pop()
        if is_test:
            holder = ast.Module(body=node.body, type_ignores=[])
            _Returns(self.call).visit(holder)
            node.body = holder.body + [ast.Expr(self.call(PASS_EVENT))]
            self.tests.add(".".join([n for _, n in self.scope] + [node.name]))
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = _visit_function

    def visit_Assert(self, node):
        self.generic_visit(node)
        test = node.test
        if (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Eq, ast.NotEq))
            and not any(kind == "class" for kind, _ in self.scope[-1:])
        ):
            n = self.counter
            self.counter += 1
            a, b = f"_rlvr_eq_a{n}", f"_rlvr_eq_b{n}"
            guard = self.call(
                EQ_EVENT,
                ast.NamedExpr(ast.Name(a, ast.Store()), test.left),
                ast.NamedExpr(ast.Name(b, ast.Store()), test.comparators[0]),
                ast.Constant("==" if isinstance(test.ops[0], ast.Eq) else "!="),
            )
            compare = ast.Compare(ast.Name(a, ast.Load()), test.ops, [ast.Name(b, ast.Load())])
            node.test = ast.Subscript(ast.Tuple([guard, compare], ast.Load()), ast.Constant(1), ast.Load())
        return node

    def visit_comprehension(self, node):
        # An assignment expression may not appear in a comprehension's iterable.
        self.no_walrus += 1
        node.iter = self.visit(node.iter)
        self.no_walrus -= 1
        node.target = self.visit(node.target)
        node.ifs = [self.visit(cond) for cond in node.ifs]
        return node

    def visit_Call(self, node):
        """unittest's equality assertions (``self.assertEqual(result, expected)``) get the
        same guard as ``assert result == expected``: its probe runs on the two arguments
        before the method compares them."""
        self.generic_visit(node)
        func = node.func
        op = UNITTEST_EQ_ASSERTS.get(func.attr) if isinstance(func, ast.Attribute) else None
        if (op is None or len(node.args) < 2 or self.no_walrus
                or any(isinstance(arg, ast.Starred) for arg in node.args[:2])
                or not self.scope or self.scope[-1][0] != "func"):
            return node
        n = self.counter
        self.counter += 1
        a, b = f"_rlvr_eq_a{n}", f"_rlvr_eq_b{n}"
        guard = self.call(
            EQ_EVENT,
            ast.NamedExpr(ast.Name(a, ast.Store()), node.args[0]),
            ast.NamedExpr(ast.Name(b, ast.Store()), node.args[1]),
            ast.Constant(op),
        )
        first = ast.Subscript(ast.Tuple([guard, ast.Name(a, ast.Load())], ast.Load()), ast.Constant(1), ast.Load())
        node.args = [first, ast.Name(b, ast.Load()), *node.args[2:]]
        return node


# Names every module / class namespace has without its code binding them.
# (`__warningregistry__`: warnings.warn from the module's own code records itself there)
_MODULE_DUNDERS = frozenset({"__name__", "__doc__", "__package__", "__loader__", "__spec__", "__file__",
                             "__builtins__", "__cached__", "__annotations__", "__path__", "__warningregistry__"})
# (unittest.TestCase.__init_subclass__ sets the last two on every subclass; type() sets
# `__hash__ = None` in a class that defines __eq__ without __hash__)
_CLASS_DUNDERS = frozenset({"__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__hash__",
                            "__annotations__", "__firstlineno__", "__static_attributes__", "__orig_bases__",
                            "__parameters__", "__classcell__", "__type_params__", "_classSetupFailed",
                            "_class_cleanups"})
# Source that may bind names an AST pass cannot enumerate: such a module (and its classes)
# gets no name plan (no refusal of unplanned names; its namespace is still snapshotted).
_DYNAMIC_WORDS = ("globals(", "vars(", "locals(", "exec(", "eval(", "setattr(", "__dict__", "__setattr__",
                  "sys.modules", "__import__", "import_module", "__slots__")
# Imports that cannot run the code under test (the stdlib and pytest are imported from the
# read-only runtime): no checkpoint after them.
_TRUSTED_IMPORT_ROOTS = frozenset(sys.stdlib_module_names) | {"pytest", "_pytest", "pluggy"}


class _Bound(ast.NodeVisitor):
    """The names one scope's own statements can bind (a superset): stored or deleted
    names, defs, classes, imports, except and match captures; nested function, class and
    lambda bodies are other scopes (their decorators, defaults and bases are not)."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.star = False

    def visit_Name(self, node):
        if not isinstance(node.ctx, ast.Load):
            self.names.add(node.id)

    def visit_FunctionDef(self, node):
        self.names.add(node.name)
        for sub in [*node.decorator_list, node.args, node.returns]:
            if sub is not None:
                self.visit(sub)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self.names.add(node.name)
        for sub in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(sub)

    def visit_Lambda(self, node):
        self.visit(node.args)

    def visit_Import(self, node):
        for alias in node.names:
            self.names.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node):
        for alias in node.names:
            if alias.name == "*":
                self.star = True
            else:
                self.names.add(alias.asname or alias.name)

    def visit_ExceptHandler(self, node):
        if node.name:
            self.names.add(node.name)
        self.generic_visit(node)

    def visit_MatchAs(self, node):
        if node.name:
            self.names.add(node.name)
        self.generic_visit(node)

    visit_MatchStar = visit_MatchAs

    def visit_MatchMapping(self, node):
        if node.rest:
            self.names.add(node.rest)
        self.generic_visit(node)


def _plan_names(tree: ast.Module, text: str, filename: str) -> tuple[frozenset | None, dict]:
    """(the names the module's code can bind, {(filename, class): the names its body can
    bind}) for an instrumented module; None for what cannot be enumerated statically."""
    dynamic = any(word in text for word in _DYNAMIC_WORDS)
    declared = {n for node in ast.walk(tree) if isinstance(node, ast.Global) for n in node.names}
    bound = _Bound()
    for stmt in tree.body:
        bound.visit(stmt)
    module = None if dynamic or bound.star else frozenset(bound.names | declared | _MODULE_DUNDERS)
    local_classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    classes: dict = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        # Bases that may add names when subclassed (__init_subclass__, metaclasses): only
        # object, unittest's TestCase and this module's own classes are foreseen.
        plain = not node.decorator_list and not node.keywords and all(
            (isinstance(b, ast.Name) and (b.id in ("object", "TestCase") or b.id in local_classes))
            or (isinstance(b, ast.Attribute) and b.attr == "TestCase" and isinstance(b.value, ast.Name)
                and b.value.id == "unittest")
            for b in node.bases)
        body = _Bound()
        for stmt in node.body:
            body.visit(stmt)
        # A class body's private names are stored mangled (`__x` in class C binds `_C__x`).
        mangled = {f"_{node.name.lstrip('_')}{n}" for n in body.names
                   if n.startswith("__") and not n.endswith("__") and node.name.strip("_")}
        classes[(filename, node.name)] = (frozenset(body.names | mangled | declared | _CLASS_DUNDERS)
                                          if plain and not dynamic and not body.star else None)
    return module, classes


def _may_run_untrusted(stmt) -> bool:
    if isinstance(stmt, ast.ImportFrom):
        return bool(stmt.level) or (stmt.module or "").split(".")[0] not in _TRUSTED_IMPORT_ROOTS
    return any(alias.name.split(".")[0] not in _TRUSTED_IMPORT_ROOTS for alias in stmt.names)


def _with_steps(body: list, make_call) -> list:
    """A checkpoint after each module-level import that may run the code under test (the
    package's own import code): what it rebinds and leaves bound is seen before the rest
    of the hidden module (decorators, pytest.mark, TestCase) reads it."""
    out = []
    for stmt in body:
        out.append(stmt)
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            if _may_run_untrusted(stmt):
                out.append(ast.Expr(make_call(STEP_EVENT, ast.Constant("import"))))
        elif isinstance(stmt, (ast.If, ast.For, ast.While, ast.With)):
            stmt.body = _with_steps(stmt.body, make_call)
            if not isinstance(stmt, ast.With):
                stmt.orelse = _with_steps(stmt.orelse, make_call)
        elif isinstance(stmt, ast.Try):
            stmt.body = _with_steps(stmt.body, make_call)
            stmt.orelse = _with_steps(stmt.orelse, make_call)
            stmt.finalbody = _with_steps(stmt.finalbody, make_call)
            for handler in stmt.handlers:
                handler.body = _with_steps(handler.body, make_call)
    return out


def _inject(code: types.CodeType, placeholder: str, value: object, out: list) -> types.CodeType:
    consts = []
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            c = _inject(c, placeholder, value, out)
        elif type(c) is str and c == placeholder:
            c = value
        consts.append(c)
    new = code.replace(co_consts=tuple(consts))
    out.append(new)
    return new


def hidden_alias(filename: str) -> str:
    """The file name hidden code at `filename` is compiled under and runs with as ``__file__``."""
    return os.path.dirname(filename) + "/" + HIDDEN_ALIAS


def _on_line_one(tree: ast.AST) -> None:
    """Every statement and expression of a hidden module on line 1, column 0: no channel that
    reports a hidden frame's line (a view's ``f_lineno``, a warning's stacklevel resolved in
    C, a traceback through a hidden frame, ``__code__.co_firstlineno``) can tell the sites of
    a hidden suite apart. Pytest orders items by definition, not by line."""
    for node in ast.walk(tree):
        if "lineno" in node._attributes:
            node.lineno = node.end_lineno = 1
            node.col_offset = node.end_col_offset = 0


def _modname(rel: str) -> tuple[str, bool]:
    parts = rel[:-3].split("/")
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def compile_suite(hidden: dict[str, str], placeholder: str) -> CompiledSuite:
    """Instrument and compile every hidden .py file; other files are data."""
    suite = CompiledSuite()
    for rel in sorted(hidden):
        text = hidden[rel]
        if not rel.endswith(".py"):
            suite.data_files[rel] = text
            continue
        name = rel.rsplit("/", 1)[-1]
        filename = f"{HIDDEN}/{rel}"
        test_file = _is_test_file(name)
        try:
            tree = ast.parse(text, filename=filename)
            inst = _Instrument(placeholder, test_file)
            tree = inst.visit(tree)
            tree.body = _with_steps(tree.body, inst.call)
            tree = ast.fix_missing_locations(tree)
            if name == "conftest.py" or test_file:
                planned, classes = _plan_names(tree, text, filename)
                suite.planned[filename] = planned
                suite.planned_classes.update(classes)
            _on_line_one(tree)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                code = compile(tree, hidden_alias(filename), "exec", dont_inherit=True)
        except SyntaxError as exc:
            suite.errors[rel] = f"{type(exc).__name__}: {exc}"
            continue
        made: list[types.CodeType] = []
        code = _inject(code, placeholder, sys.audit, made)
        suite.genuine.extend(made)
        for c in made:
            if c.co_qualname in inst.tests:
                suite.test_codes[object.__hash__(c)] = c.co_name
        if name == "conftest.py":
            suite.conftests[rel] = code
        elif test_file:
            # One module name for every hidden test module, as one file name (hidden_alias):
            # a warnings filter keyed on the module a warning is attributed to, or a class's
            # __module__, does not name the file either (helpers keep theirs: they are imported by it).
            suite.test_modules[rel] = ("rlvr_hidden." + HIDDEN_NAME, code)
        else:
            modname, is_pkg = _modname(rel)
            if modname:
                suite.helper_modules[modname] = (rel, code, is_pkg)
    suite.genuine_ids = frozenset(object.__hash__(c) for c in suite.genuine)
    suite.needs_io_plugins = any(name in text for text in hidden.values() for name in IO_FIXTURES)
    return suite


def compile_snapshot(files: dict[str, str]) -> dict[str, bytes]:
    """Checked hash-based .pyc images (PEP 552) of the snapshot's Python files, relpath ->
    bytes, compiled once per task by the trusted server instead of once per run by the
    child's imports (~5 ms a run for a small package). The import system uses one only if
    the SipHash of the source on disk matches the hash it records, so a file the patch
    changed (or the code under test rewrote) is compiled from its source as usual; a .pyc
    without its source is never used. Files that do not compile get none (the import then
    raises the SyntaxError itself)."""
    import importlib.util
    from importlib._bootstrap_external import _code_to_hash_pyc

    out: dict[str, bytes] = {}
    for rel, text in files.items():
        if not rel.endswith(".py"):
            continue
        cached = importlib.util.cache_from_source(rel)
        if os.path.isabs(cached):  # a pycache prefix is configured: the loader looks elsewhere
            return {}
        try:
            data = text.encode("utf-8")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                code = compile(data, f"{REPO}/{rel}", "exec", dont_inherit=True)
        except (SyntaxError, ValueError, UnicodeError):
            continue
        out[cached] = bytes(_code_to_hash_pyc(code, importlib.util.source_hash(data), True))
    return out


# ---------------------------------------------------------------------------------------
# Server-side preparation (trusted, once per server process)
# ---------------------------------------------------------------------------------------
def _walk_code(code: types.CodeType, out: list) -> None:
    out.append(code)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _walk_code(c, out)


def _codes_of(value: object, out: list, seen: set) -> None:
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, types.FunctionType):
        _walk_code(value.__code__, out)
        wrapped = value.__dict__.get("__wrapped__") if hasattr(value, "__dict__") else None
        if wrapped is not None:
            _codes_of(wrapped, out, seen)
    elif isinstance(value, (staticmethod, classmethod)):
        _codes_of(value.__func__, out, seen)
    elif isinstance(value, property):
        for f in (value.fget, value.fset, value.fdel):
            if f is not None:
                _codes_of(f, out, seen)
    elif isinstance(value, type):
        for attr in list(vars(value).values()):
            _codes_of(attr, out, seen)


def trusted_code_objects() -> list[types.CodeType]:
    """Every code object reachable from the modules loaded now (before untrusted code)."""
    out: list[types.CodeType] = []
    seen: set[int] = set()
    for name, mod in list(sys.modules.items()):
        if mod is None or not isinstance(mod, types.ModuleType):
            continue
        for value in list(vars(mod).values()):
            if isinstance(value, type) and getattr(value, "__module__", None) != name:
                continue
            if isinstance(value, types.FunctionType) and value.__module__ != name:
                continue
            _codes_of(value, out, seen)
    return out


def preimport() -> None:
    import importlib

    for name in PREIMPORT:
        try:
            importlib.import_module(name)
        except Exception:  # an optional stdlib module missing from this build
            pass


# ---------------------------------------------------------------------------------------
# Frame views: what `sys._getframe` / `inspect.currentframe` hand the code under test
# ---------------------------------------------------------------------------------------
FRAMES_EVENT = "rlvr.frames"
# Defined by exec in a namespace of their own: every function reachable from a view (its
# class's methods, the `sys._getframe` replacement) has these globals, never this module's
# (every function's globals are readable without audit). Nothing in here holds a real frame or
# any state: the views are built, as plain copies, by the audit hook (`make_hook`).
_VIEW_SOURCE = '''
class FrameView:
    """A read-only copy of a frame, taken when sys._getframe was called. Frames of the code
    under test show their code, line, globals and locals; other frames (stdlib, pytest,
    the enclave, hidden tests) only their file, name and line. f_back is the next copy."""

    __slots__ = ("f_code", "f_lineno", "f_lasti", "f_globals", "f_locals", "f_builtins", "f_back",
                 "f_trace", "f_trace_lines", "f_trace_opcodes")

    @property
    def __class__(self):  # isinstance(view, types.FrameType): inspect.getframeinfo, stack()
        return _FrameType

    def clear(self):
        pass

    def __repr__(self):
        return "<frame view, file %r, line %r, code %s>" % (
            self.f_code.co_filename, self.f_lineno, self.f_code.co_name)


class CodeView:
    """Where an opaque frame runs: file, name and first line, no constants or bytecode."""

    __slots__ = ("co_filename", "co_name", "co_qualname", "co_firstlineno")

    @property
    def __class__(self):
        return _CodeType

    def co_positions(self):
        return iter(())

    def co_lines(self):
        return iter(())

    def __repr__(self):
        return "<code view %s, file %r, line %r>" % (self.co_name, self.co_filename, self.co_firstlineno)


def _getframe(depth=0, /):
    """sys._getframe for the enclave: a FrameView (ValueError if the stack is shorter)."""
    out = []
    _audit("rlvr.frames", depth, out)
    if not out or out[0] is None:
        raise ValueError("call stack is not deep enough")
    return out[0]
'''
_VIEW_NS: dict = {"__name__": "rlvr_frames", "_FrameType": types.FrameType, "_CodeType": types.CodeType,
                  "_audit": sys.audit}
exec(compile(_VIEW_SOURCE, "<rlvr-frames>", "exec"), _VIEW_NS)
_REAL_GETFRAME = sys._getframe


def install_frame_views() -> None:
    """Replace `sys._getframe` by the view-returning one (in the server, after the hook is
    installed and before the snapshot, so the new binding is what every child is checked
    against). `inspect.currentframe`, `logging`, `traceback.extract_stack`, `typing` and
    `enum` all look `sys._getframe` up at call time and get views."""
    sys._getframe = _VIEW_NS["_getframe"]


def traceback_readers() -> dict:
    """Code objects of the stdlib traceback extractors the hook lets read ``tb_frame``
    (see make_hook) and the module namespaces whose bindings they call with real frames."""
    import collections
    import itertools
    import linecache
    import traceback

    try:  # CPython 3.11's private names; another layout means no tb_frame for anyone
        extract = traceback.StackSummary.extract.__func__.__code__
        nested = [c for c in extract.co_consts if isinstance(c, types.CodeType) and c.co_name == "extended_frame_gen"]
        return {
            "walkers": (traceback._walk_tb_with_full_positions.__code__, traceback.walk_tb.__code__),
            "walk_tb": traceback.walk_tb.__code__,
            "nested": tuple(nested),
            "extractor": traceback.StackSummary._extract_from_extended_frame_gen.__func__.__code__,
            "clearer": traceback.clear_frames.__code__,
            "namespaces": (vars(traceback), vars(linecache), vars(itertools), vars(collections)),
        }
    except AttributeError:
        return {}


# ---------------------------------------------------------------------------------------
# The audit hook (sealed state in its closure)
# ---------------------------------------------------------------------------------------
class _Blocked(PermissionError):
    """Raised by the enclave for an operation the code under test may not perform."""


def safe_getframe_callers() -> list[types.CodeType]:
    """Stdlib functions that call sys._getframe only to read the caller's module name
    (namedtuple, typing, the Enum functional API). They look `sys._getframe` up at call
    time and so get frame views like everyone; should one hold the raw builtin, the frame
    never leaves it, so it may have one. Every other caller of the raw builtin gets
    ValueError (which these also tolerate)."""
    import collections
    import enum
    import typing

    found = [collections.namedtuple.__code__]
    for owner, name in ((typing, "_caller"), (enum.EnumType, "_create_")):
        fn = getattr(owner, name, None)
        fn = getattr(fn, "__func__", fn)
        if isinstance(fn, types.FunctionType):
            found.append(fn.__code__)
    return found


def eq_originals() -> dict:
    """(pointer hash of a class, "__eq__"/"__ne__") -> the implementation object that class
    defined, for every class loaded before untrusted code: the only Python-level equality
    the guard takes on trust. (Trusting *code* instead would accept `__eq__ = typing.cast`.)"""
    out: dict = {}
    seen: set = set()

    def visit(klass):
        key = object.__hash__(klass)
        if key in seen:
            return
        seen.add(key)
        for name in ("__eq__", "__ne__"):
            impl = klass.__dict__.get(name)
            if impl is not None:
                out[(key, name)] = impl
        for value in list(vars(klass).values()):
            if isinstance(value, type):
                visit(value)

    for mod in list(sys.modules.values()):
        if isinstance(mod, types.ModuleType):
            for value in list(vars(mod).values()):
                if isinstance(value, type):
                    visit(value)
    # Every class alive now (bound in a module or not), with the MRO tuple it has now: a
    # class that is not here, or whose MRO was replaced since (``__bases__`` assignment makes
    # a new tuple), was made or reshaped after untrusted code could run, and the guard
    # trusts no ``__eq__`` for its instances, wherever that ``__eq__`` was defined.
    todo = [object]
    while todo:
        klass = todo.pop()
        key = object.__hash__(klass)
        if (key, "__mro__") in out:
            continue
        out[(key, "__mro__")] = klass.__mro__  # holds the class: its pointer hash stays unique
        todo.extend(type.__subclasses__(klass))
    return out


def make_hook(trusted_codes: list[types.CodeType], roles: dict, sha256, safe_getframe=(), eq_trusted=None,
              tb_readers=None):
    """Build the audit hook. Every name it uses is bound here, as a closure cell, *before*
    any untrusted code exists: it never looks up a global, so rebinding builtins or module
    attributes cannot change what it does. `roles` maps each protocol role (ROLES) to the
    code objects allowed to play it: one per runner (pytest's and the lean one)."""
    _getframe = _REAL_GETFRAME
    _write = os.write
    # Identity keys come from object.__hash__ (the pointer hash, unique among live objects):
    # unlike id() it raises no audit event, so the hook does not re-enter itself per lookup.
    _type, _id, _len, _str, _bytes, _int, _tuple, _dict = type, object.__hash__, len, str, bytes, int, tuple, dict
    _all = all
    _chain = __import__("itertools").chain.from_iterable
    _is = __import__("operator").is_
    _ValueError, _AttributeError, _AssertionError, _RuntimeError = ValueError, AttributeError, AssertionError, RuntimeError
    _Exception = Exception
    _BaseException = BaseException
    _blocked = _Blocked
    _fsdecode_err = "surrogateescape"
    _sha256 = sha256
    _range = range
    _fspath = os.fspath
    # Development aid: with RLVR_ENCLAVE_DEBUG_LOG set in the server's environment (the host
    # never sets it), the child's stderr goes to that file and the hook narrates decisions.
    _debug = bool(os.environ.get("RLVR_ENCLAVE_DEBUG_LOG"))
    trusted_ids = frozenset(_id(c) for c in trusted_codes)
    if set(roles) != set(ROLES):
        raise ValueError(f"make_hook: roles {sorted(roles)} != {sorted(ROLES)}")
    run_item_ids, loop_ids, pyfunc_ids, collected_ids, arm_ids, fallback_ids = (
        frozenset(_id(c) for c in roles[r]) for r in ROLES)
    keep_roles = _tuple(_tuple(roles[r]) for r in ROLES)  # noqa: F841 - ids must stay unique
    safe_getframe_ids = frozenset(_id(c) for c in safe_getframe)
    _NotImplemented = NotImplemented
    _object = object
    _float = float
    _bool = bool
    _complex = complex
    _list, _set, _frozenset = list, set, frozenset
    _map = map
    eq_trusted = _dict(eq_trusted or {})
    keep_alive = (trusted_codes, eq_trusted)  # noqa: F841 - ids must stay unique
    heap_flag = 1 << 9  # Py_TPFLAGS_HEAPTYPE
    # Type slots read through type's own descriptors: a patch metaclass cannot answer for them.
    _mro_of = type.__dict__["__mro__"].__get__
    _flags_of = type.__dict__["__flags__"].__get__
    _cdict = type.__dict__["__dict__"].__get__
    _member_t = _type(__import__("fractions").Fraction.__dict__["_numerator"])  # member_descriptor
    _getset_t = _type(type.__dict__["__dict__"])  # getset_descriptor
    # C types that hand a comparison to another object: judged as that object would be.
    forwarders = frozenset({__import__("weakref").ProxyType, __import__("weakref").CallableProxyType,
                            types.MappingProxyType})
    mock_any = _type(__import__("unittest.mock").mock.ANY)
    # Probes are drawn from the OS, per comparison: nothing the code under test can seed or
    # replay (os.urandom raises no audit event; int.from_bytes is C).
    _urandom, _from_bytes, _isdigit, _isalpha, _islower = (
        os.urandom, int.from_bytes, str.isdigit, str.isalpha, str.islower)
    _join_s, _join_b = "".join, b"".join
    _chr, _ord, _abs, _min, _max, _enumerate = chr, ord, abs, min, max, enumerate
    _stat, _fstat, _scandir = os.stat, os.fstat, os.scandir
    _isdir_mode = __import__("stat").S_ISDIR
    plain_types = frozenset({int, float, complex, str, bytes, bool, type(None), tuple, list, dict, set, frozenset})
    scalar_types = frozenset({int, float, complex, str, bytes, bool, type(None)})
    seq_types = (list, tuple)
    O_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    process_ev, network_ev, intro_ev = _PROCESS_EVENTS, _NETWORK_EVENTS, _INTROSPECTION_EVENTS
    signal_ev, limit_ev, frame_attrs = _SIGNAL_EVENTS, _LIMIT_EVENTS, _FRAME_ATTRS
    write_path_ev, no_reimport = _WRITE_PATH_EVENTS, _NO_REIMPORT
    volatile_sys, volatile_names = _VOLATILE_SYS, _VOLATILE_NAMES
    # Frame views (see _VIEW_SOURCE): built here, from sealed state, without running any
    # Python code of theirs (object.__new__ and the slot descriptors captured now).
    view_cls, code_cls = _VIEW_NS["FrameView"], _VIEW_NS["CodeView"]
    _new = object.__new__
    fv_set = {n: view_cls.__dict__[n].__set__ for n in view_cls.__slots__}
    cv_set = {n: code_cls.__dict__[n].__set__ for n in code_cls.__slots__}
    builtins_dict = __import__("builtins").__dict__
    inside_dir = os.path.dirname(os.path.abspath(__file__))
    # What a frame view shows (opaque): the frame itself, names and lines only, nothing.
    VISIBLE, TRUSTED, HIDDEN_FRAME = 0, 1, 2
    hidden_name = HIDDEN_NAME
    empty_ids: frozenset = frozenset()
    empty_codes: dict = {}
    tb = tb_readers or {}
    tb_walkers = frozenset(_id(c) for c in tb.get("walkers", ()))
    tb_walk_tb = _id(tb["walk_tb"]) if "walk_tb" in tb else None
    tb_nested = frozenset(_id(c) for c in tb.get("nested", ()))
    tb_extractor = _id(tb["extractor"]) if "extractor" in tb else None
    tb_clearer = _id(tb["clearer"]) if "clearer" in tb else None
    # The bindings the extractor calls with a real frame or its generator (linecache.lazycache
    # gets f_globals; itertools.islice / collections.deque the frame generator): a patch that
    # rebinds one gets no tb_frame at all (compared at each read: a restore before the next
    # checkpoint must not have let a frame out in between).
    tb_snap = _tuple((d, _tuple(d.values())) for d in tb.get("namespaces", ()))
    keep_tb = tb  # noqa: F841 - code ids must stay unique
    # Collection checkpoints: the one caller allowed to hand over a freshly built hidden
    # namespace, sys.modules (whose guarded entries are pinned by the server), a class's
    # own dict read through type's descriptor (no metaclass code runs).
    hidden_exec_ids = frozenset({_id(exec_hidden.__code__)})
    sysmods_get = sys.modules.get
    class_dict = type.__dict__["__dict__"].__get__
    class_qualname = type.__dict__["__qualname__"].__get__
    per_test_pins = PER_TEST_PINS

    # The threads now inside the hook's own reads (whose audit events it ignores): a set of
    # thread idents, not one flag, so another thread's events are never waved through
    # while one thread is inside.
    inside: set = set()
    inside_add, inside_discard = inside.add, inside.discard
    _ident, _thread_count, _sleep = _thread.get_ident, _thread._count, time.sleep
    thread_wait_steps = THREAD_WAIT_STEPS
    S: dict = {
        "phase": "server", "threads": 0, "thread_wait": 0, "seq": 0, "flags": set(), "key": None,
        "fd": -1, "nonce": "", "suite": None, "plan": None, "pos": 0, "current": None,
        "loop": None, "passed": None, "snap": None, "full": None, "cwd": "/",
        "read_ok": (), "write_ok": (), "deny": (), "tamper": [], "pre_dicts": frozenset(),
        "hooklists": None, "vcache": {}, "eq_raised": None,
    }
    # Collection checkpoints: pinned modules, the collection path's snapshot, the name plans,
    # the hidden namespaces handed over so far (and those snapshotted then).
    S.update({"pins": ((), ()), "pins_test": ((), ()), "coll": (), "planned": {}, "planned_cls": {},
              "ns_seen": frozenset(), "ns_early": frozenset()})

    def debug(msg):
        if _debug:
            _write(2, ("[rlvr-hook] " + msg + "\n").encode("utf-8", "replace"))

    def frame1():
        me = _ident()
        inside_add(me)
        try:
            return _getframe(2)
        finally:
            inside_discard(me)

    def mac(msg):
        inner = _sha256(S["ipad"] + msg).digest()
        return _sha256(S["opad"] + inner).hexdigest()[:32]

    def emit(kind, *fields):
        if S["fd"] < 0:
            return
        body = "|".join((_str(S["seq"]), kind) + fields)
        S["seq"] += 1
        msg = (S["nonce"] + "|" + body).encode("utf-8", _fsdecode_err)
        line = (body + "|" + mac(msg) + "\n").encode("utf-8", _fsdecode_err)
        try:
            _write(S["fd"], line)
        except _Exception:
            pass

    def flag(name):
        if _debug:
            debug(f"flag {name} on {S.get('ev')!r}")
        if name not in S["flags"]:
            S["flags"].add(name)
            emit("flag", name)

    def snapshot(targets):
        return _tuple((d, _tuple(d.items()), _tuple(d.values())) for d in targets)

    def check(snap, label):
        bad = None
        for d, items, ids in snap:
            try:
                if _len(d) == _len(ids) and _all(_map(_is, d.values(), ids)):  # fast path, all in C
                    continue
            except _BaseException:
                pass
            try:
                if _len(d) != _len(items):
                    for k in d:
                        if k not in volatile_names and k not in volatile_sys:
                            found = False
                            for k2, _v in items:
                                if k2 is k or (_type(k) is _str and _type(k2) is _str and k2 == k):
                                    found = True
                                    break
                            if not found:
                                bad = k
                                break
                for k, v in items:
                    if k in volatile_names or (d is S["sysdict"] and k in volatile_sys):
                        continue
                    if d.get(k, check) is not v:
                        bad = k
                        break
            except _BaseException:
                bad = "<error>"
            if bad is not None:
                break
        if bad is None and S["hooklists"] is not None:
            # Every list has its saved length and, flattened in order, the saved objects:
            # each list is then exactly its snapshot (one pass in C over ~200 lists).
            lists, lens, flat = S["hooklists"]
            if _tuple(_map(_len, lists)) != lens or not _all(_map(_is, _chain(lists), flat)):
                bad = "<hookimpls>"
        if bad is not None:
            S["tamper"].append(label)
            if _debug:
                debug(f"integrity {label}: {bad!r}")
            flag("tamper_integrity")
        return bad is None

    def pins_ok(label, which="pins"):
        """Every pinned sys.modules entry (the runner's dependencies) is still the module
        object the server imported: identity, one C pass over a fixed name list (after each
        test only the entries a test's run reads by name: `PER_TEST_PINS`)."""
        names, mods = S[which]
        try:
            if _all(_map(_is, _map(sysmods_get, names), mods)):
                return True
        except _BaseException:
            pass
        S["tamper"].append(label)
        if _debug:
            debug(f"integrity {label}: sys.modules")
        flag("tamper_integrity")
        return False

    def unplanned(keys, planned, label):
        """Refuse a namespace holding a name its compiled plan does not contain."""
        for k in keys:
            if _type(k) is not _str or k not in planned:
                S["tamper"].append(label)
                if _debug:
                    debug(f"integrity {label}: unplanned name {k!r}")
                flag("tamper_integrity")
                return True
        return False

    def norm(path):
        """Absolute, '..'-free form of a str path using only str methods."""
        if not path.startswith("/"):
            path = S["cwd"] + "/" + path
        parts = []
        for p in path.split("/"):
            if p == "" or p == ".":
                continue
            if p == "..":
                if parts:
                    parts.pop()
                continue
            parts.append(p)
        return "/" + "/".join(parts)

    def as_path(obj):
        t = _type(obj)
        if t is _str:
            return obj
        if t is _bytes:
            return obj.decode("utf-8", _fsdecode_err)
        return None

    def under(path, prefixes):
        for p in prefixes:
            if path == p or path.startswith(p + "/"):
                return True
        return False

    def path_ok(obj, write):
        t = _type(obj)
        if t is _int:
            return True
        path = as_path(obj)
        if path is None:
            try:  # os.PathLike (pathlib): ask it once, as the os function just did
                path = as_path(_fspath(obj))
            except _BaseException:
                path = None
        if path is None:
            return False
        path = norm(path)
        if under(path, S["deny"]):
            return False
        if write:
            return under(path, S["write_ok"])
        # The hidden dir holds empty placeholders (pytest walks it) and data files only.
        return under(path, S["read_ok"]) or under(path, S["write_ok"]) or under(path, S["run_roots"])

    def secret_dirs():
        """(st_dev, st_ino) of every hidden directory that holds a .py file (its listing
        would name hidden test modules), found once per run with C functions captured
        before arming. Directories of data files only stay listable: their names are no
        secret (the tests open them) and libraries under test list them honestly."""
        found = S.get("secret_dirs")
        if found is not None:
            return found
        found = _set()
        me = _ident()
        inside_add(me)
        try:
            todo = [S["hidden"]]
            while todo and _len(found) < 4096:
                d = todo.pop()
                try:
                    st = _stat(d)
                    secret = False
                    with _scandir(d) as it:
                        for e in it:
                            if e.is_dir(follow_symlinks=False):
                                todo.append(e.path)
                            elif e.name.endswith(".py"):
                                secret = True
                except _BaseException:
                    continue
                if secret:
                    found.add((st.st_dev, st.st_ino))
        finally:
            inside_discard(me)
        S["secret_dirs"] = found
        return found

    def lists_hidden(target):
        """Whether listing `target` (a path, or a directory fd) would name hidden test
        modules (see secret_dirs): compared by device and inode, so '..', a changed cwd
        or an fd opened relative to another directory find the same directory."""
        try:
            if _type(target) is _int:
                st = _fstat(target)
            else:
                path = as_path(target)
                if path is None:
                    path = as_path(_fspath(target))
                hidden = S.get("hidden")
                if path is None or not hidden or not under(norm(path), (hidden,)):
                    return False
                st = _stat(path)
        except _BaseException:
            return False  # nothing to list there
        return _isdir_mode(st.st_mode) and (st.st_dev, st.st_ino) in secret_dirs()

    def honest_stack(f):
        """Every frame from `f` down runs trusted (pre-patch) or hidden-test code: pytest
        collecting, or a hidden test listing its own data, never the code under test."""
        genuine = S.get("genuine", empty_ids)
        g = f
        while g is not None:
            cid = _id(g.f_code)
            if cid not in trusted_ids and cid not in genuine:
                return False
            g = g.f_back
        return True

    def eq_kind(obj, name):
        """'plain' | 'trusted' | 'untrusted' for how `obj` implements `name` (__eq__/__ne__).
        Trust goes by the class of the object, not by where its __eq__ was defined: only a
        class that existed before the patch, with the MRO it had then, may use a pre-existing
        __eq__ unprobed, and an instance of a pre-existing class with a Python __eq__ only
        while its own state holds nothing untrusted (a UserString whose ``data``, a Fraction
        whose ``_numerator`` the patch replaced)."""
        tp = _type(obj)
        if tp in plain_types:
            return "plain"
        if tp in forwarders:
            return "untrusted"  # a proxy compares as its referent: probe through it
        mro = _mro_of(tp)
        heap = _flags_of(tp) & heap_flag
        if heap and eq_trusted.get((_id(tp), "__mro__")) is not mro:
            return "untrusted"  # a class made (or rebased) after untrusted code could run
        for klass in mro:
            impl = _cdict(klass).get(name)
            if impl is None:
                continue
            if not (_flags_of(klass) & heap_flag):
                return "trusted"  # a C type's slot
            if eq_trusted.get((_id(klass), name)) is impl:
                # The original method of a class loaded before the patch.
                return "untrusted" if tainted(obj, tp, mro, [64]) else "trusted"
            return "untrusted"  # probed: hidden-test helpers with a real __eq__ pass the probe
        return "trusted"

    def tainted(obj, tp, mro, budget):
        """Whether the state of `obj` (an instance of a pre-existing class) holds an object
        whose equality is not trusted: slots and instance dict, one level into plain
        containers. Read through C descriptors only."""
        values = []
        for klass in mro:
            for desc in _cdict(klass).values():
                if _type(desc) is _member_t:
                    try:
                        values.append(desc.__get__(obj, tp))
                    except _BaseException:
                        pass
        for klass in mro:
            desc = _cdict(klass).get("__dict__")
            if _type(desc) is _getset_t:
                try:
                    d = desc.__get__(obj, tp)
                except _BaseException:
                    d = None
                if _type(d) is _dict:
                    values.extend(_dict.values(d))
                break
        for v in values:
            budget[0] -= 1
            if budget[0] < 0:
                return False
            t = _type(v)
            if t is _list or t is _tuple or t is _set or t is _frozenset:
                items = v
            elif t is _dict:
                items = _dict.values(v)
            else:
                items = (v,)
            for item in items:
                budget[0] -= 1
                if budget[0] < 0:
                    return False
                if _type(item) not in plain_types and eq_kind(item, "__eq__") == "untrusted":
                    return True
        return False

    def rnd(n):
        """Uniform enough in range(n), from the OS."""
        return _from_bytes(_urandom(8), "little") % n if n > 1 else 0

    def copy_scalar(v):
        """A new object equal to the plain scalar `v`, built the way a probe is (so neither
        identity nor interning tells the real value from a probe). NaN stays itself
        (container comparisons short-cut on identity)."""
        tp = _type(v)
        if tp is _int:
            return v + 0
        if tp is _float:
            return v if v != v else v * 1.0
        if tp is _complex:
            return v if v != v else v * 1
        if tp is _str:
            return _join_s((v[:1], v[1:])) if _len(v) > 1 else v
        if tp is _bytes:
            return _join_b((v[:1], v[1:])) if _len(v) > 1 else v
        return v

    def perturb_scalar(v):
        """A value of the same type and shape as `v` that `v` is not equal to, drawn fresh."""
        tp = _type(v)
        if tp is _bool:
            return not v
        if tp is _int:
            # Log-uniform offsets: near neighbours (the values a "close enough" object would
            # accept) as likely as far ones, up to twice the value's own magnitude.
            d = 1 + rnd(1 << rnd(_min(_max(2, _abs(v).bit_length()), 62) + 2))
            s = 1 if rnd(2) else -1
            if (v >= 0 and v - d < 0 and s < 0) or (v < 0 and v + d >= 0 and s > 0):
                s = -s
            return v + s * d
        if tp is _float:
            if v != v or v in (_float("inf"), _float("-inf")):
                return (rnd(2000) + 1) / 16.0
            m = _abs(v) if _abs(v) >= 1.0 else 1.0
            w = v + (1 if rnd(2) else -1) * m * (0.01 + rnd(1000) / 1000.0)
            if (v > 0 and w <= 0) or (v < 0 and w >= 0):
                w = v - (w - v)
            return w if w != v else v + m
        if tp is _complex:
            return _complex(perturb_scalar(v.real), v.imag)
        if tp is _str or tp is _bytes:
            n = _len(v)
            c, i = 97, 0
            if n:
                # A letter or digit where there is one (a class that normalises separators
                # or spacing must not see a probe it rightly calls equal).
                i = rnd(n)
                for _try in _range(16):
                    c = _ord(v[i]) if tp is _str else v[i]
                    if 48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122:
                        break
                    i = rnd(n)
            if 48 <= c <= 57:
                r = 48 + (c - 48 + 1 + rnd(9)) % 10
            elif 97 <= c <= 122:
                r = 97 + (c - 97 + 1 + rnd(25)) % 26
            elif 65 <= c <= 90:
                r = 65 + (c - 65 + 1 + rnd(25)) % 26
            elif c < 128:
                r = 32 + (c - 32 + 1 + rnd(94)) % 95 if 32 <= c < 127 else (c + 1) % 128
            elif tp is _bytes:
                r = 128 + (c - 128 + 1 + rnd(127)) % 128
            else:
                r = c + 1 + rnd(16)
                if 0xD800 <= r < 0xE000:
                    r = 0xE000 + rnd(16)
            if tp is _str:
                return _join_s((v[:i], _chr(r), v[i + 1:]))
            return _join_b((v[:i], _bytes((r,)), v[i + 1:]))
        return _object()  # None: no other value of its type exists

    def build(x, path, i, perturb, budget):
        """A fresh copy of the plain value `x` (plain containers rebuilt, plain scalars new
        objects, anything else shared). With `perturb`, the value at path[i:] (all of `x`
        when `path` is None) has *every* plain scalar in it replaced by a fresh one of the
        same type and shape, keys kept: a value class that rightly ignores part of the
        other side (semver's build metadata) still sees a different value, and no single
        untouched element tells the probe from the real value."""
        budget[0] -= 1
        if path is not None and i == _len(path):
            return build(x, None, 0, perturb, budget)
        tp = _type(x)
        if tp in scalar_types:
            if path is None and perturb:
                return perturb_scalar(x)
            return copy_scalar(x) if budget[0] >= 0 else x
        on_path = path is not None
        if budget[0] < 0 and not on_path and not perturb:
            return x
        key = path[i] if on_path else None
        if tp is _list or tp is _tuple:
            if not x and perturb and not on_path:
                out = [perturb_scalar(0)]
            elif on_path:
                out = [build(e, path, i + 1, perturb, budget) if j == key else build(e, None, 0, False, budget)
                       for j, e in _enumerate(x)]
            else:
                out = [build(e, None, 0, perturb, budget) for e in x]
            return out if tp is _list else _tuple(out)
        if tp is _dict:
            if not x and perturb and not on_path:
                return {perturb_scalar(""): perturb_scalar(0)}
            if on_path:
                return {k: (build(v, path, i + 1, perturb, budget)
                            if k is key or (_type(k) is _type(key) and k == key) else build(v, None, 0, False, budget))
                        for k, v in _dict.items(x)}
            return {k: build(v, None, 0, perturb, budget) for k, v in _dict.items(x)}
        if tp is _set or tp is _frozenset:
            if perturb and not on_path:
                out = _set(perturb_scalar(e) if _type(e) in scalar_types else e for e in x) if x else {perturb_scalar(0)}
                if out == x:
                    out.add(_object())
            else:
                out = _set(build(e, None, 0, False, budget) for e in x)
            return out if tp is _set else _frozenset(out)
        return x

    def find(a, b, path, out, budget, name):
        """Collect (plain side, path, object) for every place (bounded) where a plain value
        meets an object whose equality the guard does not trust."""
        budget[0] -= 1
        if budget[0] < 0 or _len(out) >= 64:
            return
        ka = eq_kind(a, name)
        kb = eq_kind(b, name)
        if ka == "untrusted" and kb == "plain":
            out.append((1, path, a))
            return
        if kb == "untrusted" and ka == "plain":
            out.append((0, path, b))
            return
        ta, tb = _type(a), _type(b)
        if ta in seq_types and tb in seq_types and _len(a) == _len(b):
            for i in _range(_len(a)):
                find(a[i], b[i], path + (i,), out, budget, name)
            return
        # A trusted (pre-existing) subclass of list or dict - OrderedDict, defaultdict,
        # Counter - met by a plain one is walked as its base type (C accessors): its items
        # may be untrusted objects. Paths index the plain side, which the probes rebuild.
        sa = ta is not _dict and ta is not _list and (_dict in _mro_of(ta) or _list in _mro_of(ta))
        sb = tb is not _dict and tb is not _list and (_dict in _mro_of(tb) or _list in _mro_of(tb))
        if (ta is _dict or sa) and (tb is _dict or sb) and (ta is _dict or tb is _dict) and \
                _dict in _mro_of(ta) and _dict in _mro_of(tb) and _dict.__len__(a) == _dict.__len__(b):
            for k, v in _list(_dict.items(a)):
                if _type(k) in scalar_types and _dict.__contains__(b, k):
                    find(v, _dict.__getitem__(b, k), path + (k,), out, budget, name)
        elif (ta is _list or sa) and (tb in seq_types or sb) and (ta is _list or tb in seq_types) and \
                _list in _mro_of(ta) and (tb in seq_types or _list in _mro_of(tb)):
            la = _list.__len__(a)
            if la == _len(b):
                for i in _range(la):
                    find(_list.__getitem__(a, i), b[i] if tb in seq_types else _list.__getitem__(b, i),
                         path + (i,), out, budget, name)
        elif ta in seq_types and sb and _list in _mro_of(tb) and _len(a) == _list.__len__(b):
            for i in _range(_len(a)):
                find(a[i], _list.__getitem__(b, i), path + (i,), out, budget, name)

    def compare(x, y, op):
        """The one place where the guard compares: probes and the real comparison alike."""
        return _bool(x == y) if op == "==" else _bool(x != y)

    def guard_eq(a, b, op):
        """rlvr.eq for a hidden ``a == b``: if a plain value meets untrusted equality, the
        real comparison and two fresh probes per such place (one place in four at most, drawn
        at random) run from here, in an order drawn from the OS, on fresh copies of the plain
        side: the same frames, recursion depth, types and shapes for every call, so an
        object cannot tell the probe from the real value. A probe claimed equal is the
        AlwaysEqual hack; a real comparison that fails fails the assertion here, once the
        probes drawn after it have run too (the hidden test's own comparison that follows
        cannot turn it into a pass, and a lie to a later probe is still flagged)."""
        leaves = []
        find(a, b, (), leaves, [2000], "__eq__" if op == "==" else "__ne__")
        if not leaves:
            return
        if op != "==":
            # `!=`: an object that says it differs from itself decides regardless of the data.
            for _side, _path, obj in leaves:
                try:
                    r = _type(obj).__ne__(obj, obj)
                    if r is not _NotImplemented and _bool(r):
                        return True
                except _BaseException:
                    pass
            return False
        chosen = leaves
        while _len(chosen) > 4:
            j = rnd(_len(chosen))
            chosen = chosen[:j] + chosen[j + 1:]
        calls = _len(chosen) * 2 + 1
        real_at = rnd(calls)
        real_failed = False
        for n in _range(calls):
            if n == real_at:
                try:
                    ok = compare(build(a, None, 0, False, [4096]), build(b, None, 0, False, [4096]), op)
                except _BaseException as exc:
                    S["eq_raised"] = exc  # the comparison's own error: the test's, unflagged
                    raise
                real_failed = not ok
                continue
            side, path, _obj = chosen[(n - (n > real_at)) // 2]
            x = build(a, path, 0, True, [4096]) if side == 0 else build(a, None, 0, False, [4096])
            y = build(b, path, 0, True, [4096]) if side == 1 else build(b, None, 0, False, [4096])
            try:
                claimed = compare(x, y, op)
            except _BaseException:
                claimed = False  # a probe that raises is no claim (value classes that parse `other`)
            if claimed:
                return True
        if real_failed:
            # Raised only after every probe has run: an object that answers by call order
            # (False first, True afterwards) is flagged whichever place the real call drew.
            raise _AssertionError("assert a == b")
        return False

    def verify_pass(frame):
        """The sentinel raised from `frame`: accept it only for the genuine, pytest-called
        body of the current item."""
        cur = S["current"]
        if cur is None:
            return False
        pos, run_frame = cur
        entry = S["plan"][pos]
        if S["test_codes"].get(_id(frame.f_code)) != entry[2]:
            return False
        saw_pyfunc = False
        g = frame.f_back
        depth = 0
        while g is not None and depth < 400:
            if g is run_frame:
                break
            cid = _id(g.f_code)
            if cid in pyfunc_ids:
                saw_pyfunc = True
                args = g.f_locals.get("testargs")
                if _type(args) is not _dict:
                    return False
                for pname, pvalue in entry[3]:
                    if args.get(pname, verify_pass) is not pvalue:
                        return False
            elif cid not in trusted_ids and cid not in S["genuine"]:
                return False
            g = g.f_back
            depth += 1
        return g is run_frame and saw_pyfunc

    def threads_quiet():
        """True when no thread but those alive at arming runs. Checked before each trusted
        step that reads bindings (a pass, the collection and per-test checkpoints, the end):
        a thread of the code under test could rebind and restore what that step reads while
        it reads it. CPython cannot stop a thread, so the step waits for it to end (at most
        THREAD_WAIT_STEPS sleeps per run, shared by all steps); one still running then fails
        the run (tamper_thread_alive). Threads a test or the code under test starts and
        joins, or that end on their own, cost nothing."""
        base = S["threads"]
        if _thread_count() <= base:
            return True
        while S["thread_wait"] > 0:
            S["thread_wait"] -= 1
            _sleep(0.002)
            if _thread_count() <= base:
                return True
        flag("tamper_thread_alive")
        return False

    def caller_is(f, ids):
        return f if f is not None and _id(f.f_code) in ids else None

    def chain_trusted(f):
        """Every frame below `f` runs code that existed before untrusted code did."""
        g = f.f_back
        while g is not None:
            if _id(g.f_code) not in trusted_ids:
                debug("untrusted frame below a protocol event: " + _str(g.f_code))
                return False
            g = g.f_back
        return True

    def opaque(g):
        """How much of frame `g` the code under test may see: VISIBLE (its own code), TRUSTED
        (stdlib, pytest, the enclave: file, names and line, nothing else) or HIDDEN
        (hidden-test code, or any code running in a hidden module's globals: not even which
        test or line it is)."""
        cid = _id(g.f_code)
        if cid in trusted_ids:
            return TRUSTED
        if cid in S.get("genuine", empty_ids):
            return HIDDEN_FRAME
        name = _dict.get(g.f_globals, "__file__")
        if _type(name) is _str:
            hidden = S.get("hidden")
            if hidden and name.startswith(hidden + "/"):
                return HIDDEN_FRAME
            if name.startswith(inside_dir + "/"):
                return TRUSTED
        return VISIBLE

    def view_of(g, back, hide):
        v = _new(view_cls)
        if hide:
            code = g.f_code
            c = _new(code_cls)
            filename = _str(code.co_filename)
            if filename.startswith(inside_dir + "/"):
                # The enclave's own sources are unreadable here: a name linecache skips
                # (it would try the file and trip blocked_file for a stack print).
                filename = "<rlvr-enclave>"
            glob = {}
            if hide == HIDDEN_FRAME:
                # Which hidden test calls is not shown: the alias file name (the one its
                # module's __file__ holds), no function name, its module's name withheld.
                # Genuine hidden code is on line 1 already (compile_suite).
                cv_set["co_filename"](c, filename)
                cv_set["co_name"](c, hidden_name)
                cv_set["co_qualname"](c, hidden_name)
                glob["__name__"] = hidden_name
                val = _dict.get(g.f_globals, "__file__")
                if _type(val) is _str:
                    glob["__file__"] = val
            else:
                cv_set["co_filename"](c, filename)
                cv_set["co_name"](c, _str(code.co_name))
                cv_set["co_qualname"](c, _str(code.co_qualname))
                for k in ("__name__", "__file__", "__package__"):
                    val = _dict.get(g.f_globals, k)
                    if _type(val) is _str:
                        glob[k] = val
            cv_set["co_firstlineno"](c, code.co_firstlineno)
            fv_set["f_code"](v, c)
            fv_set["f_lasti"](v, -1)
            fv_set["f_globals"](v, glob)
            fv_set["f_locals"](v, {})
            fv_set["f_builtins"](v, builtins_dict)
        else:
            fv_set["f_code"](v, g.f_code)
            fv_set["f_lasti"](v, g.f_lasti)
            fv_set["f_globals"](v, g.f_globals)
            fv_set["f_locals"](v, g.f_locals)
            fv_set["f_builtins"](v, g.f_builtins)
        fv_set["f_lineno"](v, g.f_lineno)
        fv_set["f_back"](v, back)
        fv_set["f_trace"](v, None)
        fv_set["f_trace_lines"](v, True)
        fv_set["f_trace_opcodes"](v, False)
        return v

    def give_frames(f, args):
        """rlvr.frames from `f` (the sys._getframe replacement): append to the caller's list
        a view of the frame `depth` levels above f's caller, or None if there is none. Views
        are copies made now, linked to copies: no real frame is ever handed out, so f_back
        cannot climb into pytest's, the enclave's or a hidden test's frames, and whoever
        raises the event gets nothing a view of its own stack would not show."""
        if _len(args) != 2 or _type(args[1]) is not _list:
            return
        depth, out = args
        if _type(depth) is not _int:
            try:
                depth = _int(depth.__index__())
            except _BaseException:
                return
        g = f.f_back if f is not None else None
        while depth > 0 and g is not None:
            g = g.f_back
            depth -= 1
        chain = []
        while g is not None and _len(chain) < 2000:
            chain.append(g)
            g = g.f_back
        me = _ident()
        inside_add(me)  # reading f_code / f_locals raises audit events of our own
        cache = S["vcache"]
        if _len(cache) > 4096:
            cache.clear()
        try:
            view = None
            for g in chain[::-1]:
                # An opaque frame's view depends only on the frame, its line and the view
                # below it: pytest's and the test's frames under a hot caller lookup are
                # copied once, not once per call (the cache holds the frame, so its id is
                # not reused while the entry lives; only opaque frames are cached).
                key, line = _id(g), g.f_lineno
                hit = cache.get(key)
                if hit is not None and hit[0] is g and hit[1] == line and hit[2] is view:
                    view = hit[3]
                    continue
                kind = opaque(g)
                if kind == VISIBLE:
                    view = view_of(g, view, VISIBLE)
                    continue
                made = view_of(g, view, kind)
                cache[key] = (g, line, view, made)
                view = made
        finally:
            inside_discard(me)
        del chain, g
        _list.append(args[1], view)

    def tb_reader_ok(f, tb):
        """A ``tb_frame`` read is allowed only to the stdlib traceback walkers, consumed by
        ``StackSummary._extract_from_extended_frame_gen`` (which keeps frames to itself: it
        builds FrameSummary records of names, lines and, with capture_locals, locals'
        reprs), with the bindings it calls unchanged, and with capture_locals only for
        frames of the code under test. traceback.format_exc/print_exc/format_exception,
        TracebackException and logging's exception formatting go this way."""
        if f is None or tb_extractor is None or _id(f.f_code) not in tb_walkers:
            return False
        c = f.f_back
        if c is not None and _id(f.f_code) == tb_walk_tb:
            if _id(c.f_code) not in tb_nested:
                return False
            c = c.f_back
        if c is None or _id(c.f_code) != tb_extractor:
            return False
        for d, vals in tb_snap:
            if _len(d) != _len(vals) or not _all(_map(_is, d.values(), vals)):
                return False
        cap = c.f_locals.get("capture_locals")
        if cap is None or cap is False:
            return True
        me = _ident()
        inside_add(me)
        try:
            return not opaque(tb.tb_frame)
        except _BaseException:
            return False
        finally:
            inside_discard(me)

    # Events the hook looks at; everything else (most of the traffic: builtins.id,
    # os.putenv, ...) returns after one dict lookup.
    watched = frozenset({
        FRAMES_EVENT, "open", "os.listdir", "os.scandir", "os.chdir", "sys._getframe", "object.__getattr__",
        "object.__setattr__", "object.__delattr__", "import",
    }) | process_ev | network_ev | intro_ev | signal_ev | limit_ev | write_path_ev

    def hook(event, args):
        if inside and _ident() in inside:
            return
        if event not in watched and event[:5] != "rlvr." and event[:7] != "ctypes.":
            return
        if event == FRAMES_EVENT:  # in every phase: trusted code asks for frames too
            give_frames(frame1(), args)
            return
        phase = S["phase"]
        if phase == "server":
            if event == "rlvr.presnap":
                # The server (no untrusted code exists in it, ever) snapshots the guarded
                # namespaces that no child changes before arming; forks inherit it, so a
                # child only snapshots the few late ones (late_namespaces) when it arms.
                S["presnap"] = snapshot(args[0])
                S["presnap_pytest"] = snapshot(args[1])
                S["presnap_cls"] = snapshot(args[2])
                if _len(args) > 4:
                    S["pins"] = (_tuple(args[3]), _tuple(args[3].values()))
                    few = [n for n in args[3] if n in per_test_pins]
                    S["pins_test"] = (_tuple(few), _tuple(args[3][n] for n in few))
                    S["coll"] = snapshot(args[4])
                return
            if event == "rlvr.init":
                key, fd, nonce, paths, suite = args
                S["ipad"] = _bytes(b ^ 0x36 for b in key) + b"\x36" * (64 - _len(key))
                S["opad"] = _bytes(b ^ 0x5C for b in key) + b"\x5c" * (64 - _len(key))
                S["fd"], S["nonce"] = fd, nonce
                # Private copies: the suite object itself stays reachable from the runner module.
                S["test_codes"] = _dict(suite.test_codes)
                S["genuine"] = frozenset(suite.genuine_ids)
                S["keep"] = _tuple(suite.genuine)
                S["planned"] = _dict(getattr(suite, "planned", None) or {})
                S["planned_cls"] = _dict(getattr(suite, "planned_classes", None) or {})
                S["read_ok"], S["write_ok"], S["deny"], S["hidden"], S["cwd"] = paths
                # The run directory and its parent: pytest walks up from the hidden root.
                S["run_roots"] = (S["hidden"].rsplit("/", 2)[0],)
                S["phase"] = "setup"
            return
        if event[:5] == "rlvr.":
            if event == EQ_EVENT:
                # The equality guard can only fail an assertion, so whoever raises this
                # event gains nothing: no frame check (one per hidden `assert ==`).
                if phase != "armed" or _len(args) != 3:
                    return
                if _type(args[0]) in scalar_types and _type(args[1]) in scalar_types:
                    return  # builtin scalars compare in C: nothing to probe
                try:
                    bad = guard_eq(args[0], args[1], args[2])
                except _AssertionError:
                    raise  # the real comparison said the assertion does not hold
                except _BaseException as exc:
                    if S["eq_raised"] is exc:
                        S["eq_raised"] = None
                        raise
                    bad = True
                if bad:
                    flag("eq_override")
                    raise _AssertionError("enclave: equality implemented by the code under test")
                return
            f = frame1()  # the frame that raised the event (must be called from here)
            if _debug and event != PASS_EVENT:
                debug(f"{event} from {f.f_code.co_name if f is not None else None}")
            if event == PASS_EVENT:
                if f is not None and phase == "armed" and threads_quiet() and verify_pass(f):
                    S["passed"][S["current"][0]] = True
                elif f is None or (S.get("test_codes") or empty_codes).get(_id(f.f_code)) is None:
                    flag("tamper_forged_pass")
                # else: a genuine hidden test body outside its own item (a unittest base
                # class's test method reached through super(), a helper class's `test*`
                # method): no pass, and nothing forged - only genuine code holds a sentinel.
                return
            if event == STEP_EVENT:
                # Anyone may ask for a checkpoint: it can only add a flag. After a hidden
                # module's import that may have run the code under test, the pytest/pluggy
                # classes it could have rebound are compared too.
                if phase == "armed":
                    if threads_quiet() and check(S["snap"], "step") and pins_ok("step") and _len(args) \
                            and args[0] == "import":
                        check(S["coll"], "step")
                return
            if event == HIDDEN_EVENT:
                if phase != "armed" or S["plan"] is not None or _len(args) != 2 or caller_is(f, hidden_exec_ids) is None:
                    return
                d, fname = args
                if _type(d) is not _dict or _type(fname) is not _str or _id(d) in S["ns_seen"]:
                    return
                S["ns_seen"] = S["ns_seen"] | {_id(d)}
                if threads_quiet() and check(S["snap"], "hidden") and pins_ok("hidden"):
                    check(S["coll"], "hidden")
                if fname[-12:] == "/__init__.py":
                    return  # a package's namespace gains its submodules later: snapshotted at collection
                planned = S["planned"].get(fname)
                if planned is not None:
                    unplanned(_tuple(d), planned, "unplanned_name")
                S["snap"] = S["snap"] + snapshot((d,))
                S["ns_early"] = S["ns_early"] | {_id(d)}
                return
            if event == CLASS_EVENT:
                if phase != "armed" or _len(args) != 2 or _type(args[1]) is not _str:
                    return
                try:
                    cd = class_dict(args[0])
                    qual = class_qualname(args[0])
                    planned = S["planned_cls"].get((args[1], qual)) if _type(qual) is _str else None
                    if planned is not None and _str(cd.get("__module__", ""))[:12] == "rlvr_hidden.":
                        unplanned(_tuple(cd), planned, "unplanned_class_name")
                except _BaseException:
                    pass
                return
            if phase == "setup":
                if event == "rlvr.apply":
                    emit("apply", "1" if args[0] else "0", args[1].encode("utf-8", _fsdecode_err).hex())
                elif event == "rlvr.error":
                    emit("err", args[0].encode("utf-8", _fsdecode_err).hex())
                elif event == "rlvr.arm":
                    f = caller_is(f, arm_ids)
                    if f is None or not chain_trusted(f) or S.get("presnap") is None:
                        debug("arm refused")
                        return
                    S["sysdict"] = args[1]
                    S["threads"], S["thread_wait"] = _thread_count(), thread_wait_steps
                    if args[2] is True:  # the lean runner: pytest's protocol never runs
                        S["snap"] = S["presnap"] + snapshot(args[0])
                        S["snap_cls"] = S["presnap_pytest"] + S["presnap_cls"]
                    else:
                        S["snap"] = S["presnap"] + S["presnap_pytest"] + snapshot(args[0])
                        S["snap_cls"] = S["presnap_cls"]
                    S["phase"] = "armed"
                    emit("arm")
                return
            if event == "rlvr.fallback" and S["plan"] is None:
                # The lean runner met something only pytest runs faithfully: the server
                # re-runs the job under pytest (never a pass, never a failure of the patch).
                f = caller_is(f, fallback_ids)
                if f is None or not chain_trusted(f):
                    flag("tamper_forged_pass")
                    return
                reason = args[0] if _type(args[0]) is _str else ""
                emit("fallback", reason.encode("utf-8", _fsdecode_err).hex())
                S["phase"] = "done"
                return
            if event == "rlvr.collected" and S["plan"] is None:
                f = caller_is(f, collected_ids)
                if f is None or not chain_trusted(f):
                    flag("tamper_forged_pass")
                    return
                loc = f.f_locals
                plan = loc.get("plan")
                S["plan"] = _tuple(plan)
                S["passed"] = [False] * _len(plan)
                extra = loc.get("extra_dicts")
                hidden = loc.get("hidden_dicts")
                if hidden is not None and not _all(_id(d) in S["ns_seen"] for d in hidden):
                    S["tamper"].append("hidden_unseen")  # built without its HIDDEN_EVENT
                    flag("tamper_integrity")
                early = S["ns_early"]
                S["snap"] = S["snap"] + snapshot([d for d in extra if _id(d) not in early])
                lists = _tuple(loc.get("hooklists"))
                S["hooklists"] = (lists, _tuple(_map(_len, lists)), _tuple(_chain(lists)))
                threads_quiet()
                check(S["snap"], "collection")
                check(S["snap_cls"], "collection")
                pins_ok("collection")
                emit("coll", _str(_len(plan)))
                return
            if event == "rlvr.loop" and S["loop"] is None and S["plan"] is not None:
                f = caller_is(f, loop_ids)
                if f is None:
                    flag("tamper_forged_pass")
                    return
                if not chain_trusted(f):
                    flag("tamper_forged_pass")
                    return
                S["loop"] = f
                return
            if event == "rlvr.item_start":
                f = caller_is(f, run_item_ids)
                if f is None or f.f_back is not S["loop"] or S["current"] is not None:
                    flag("tamper_forged_pass")
                    return
                pos = S["pos"]
                # The item comes from the verified run_item frame (trusted code), as an argument.
                if pos >= _len(S["plan"]) or _len(args) != 1 or args[0] is not S["plan"][pos][1]:
                    flag("tamper_forged_pass")
                    return
                S["current"] = (pos, f)
                # No check here: between the previous item_end check (or the collection
                # check) and now, only this runner's own loop code has run.
                return
            if event == "rlvr.item_end":
                f = caller_is(f, run_item_ids)
                cur = S["current"]
                if f is None or cur is None or cur[1] is not f:
                    flag("tamper_forged_pass")
                    return
                pos = cur[0]
                ok = (threads_quiet() and check(S["snap"], "after_test") and pins_ok("after_test", "pins_test")
                      and not S["tamper"])
                reported = args[0] if _type(args[0]) is _str and args[0] in OUTCOMES else "failed"
                hint = args[1] if _type(args[1]) is _str else ""
                if S["passed"][pos] and reported == "passed" and ok:
                    outcome = "passed"
                elif reported == "passed":
                    outcome = "failed"
                else:
                    outcome = reported
                nodeid = S["plan"][pos][0]
                emit("item", _str(pos), outcome, nodeid.encode("utf-8", _fsdecode_err).hex(), hint)
                S["current"] = None
                S["pos"] = pos + 1
                return
            if event == "rlvr.done":
                if f is None or f is not S["loop"]:
                    flag("tamper_forged_pass")
                    return
                ok = (threads_quiet() and check(S["snap"], "end") and check(S["snap_cls"], "end")
                      and pins_ok("end"))
                emit("done", "1" if ok else "0")
                S["phase"] = "done"
                return
            return
        if phase != "armed" and phase != "done":
            return
        # ---- armed: the code under test may be running -------------------------------
        if _debug:
            S["ev"] = (event, args[:2] if _type(args) is _tuple else args)
        if event == "open":
            if not path_ok(args[0], (_type(args[1]) is _str and ("w" in args[1] or "a" in args[1] or "+" in args[1] or "x" in args[1]))
                           or (_type(args[2]) is _int and args[2] & O_WRITE)):
                flag("blocked_file")
                raise _blocked("enclave: file access outside the workspace")
            return
        if event == "os.listdir" or event == "os.scandir":
            target = args[0] if _len(args) else "."
            if target is None:
                target = "."
            if not path_ok(target, False):
                flag("blocked_file")
                raise _blocked("enclave: listing outside the workspace")
            if lists_hidden(target) and not honest_stack(frame1()):
                flag("blocked_file")
                raise _blocked("enclave: the hidden directory cannot be listed")
            return
        if event == "os.chdir":
            p = as_path(args[0])
            if p is None or not path_ok(p, False):
                flag("blocked_file")
                raise _blocked("enclave: chdir outside the workspace")
            S["cwd"] = norm(p)
            return
        if event in write_path_ev:
            if event == "os.link" or event == "os.symlink":
                flag("blocked_file")
                raise _blocked("enclave: links are not allowed")
            for a in args[:2]:
                if (_type(a) is _str or _type(a) is _bytes) and not path_ok(a, True):
                    flag("blocked_file")
                    raise _blocked("enclave: write outside the workspace")
            return
        if event == "sys._getframe":
            f = frame1()
            if f is not None and _id(f.f_code) in safe_getframe_ids:
                return
            flag("blocked_introspection")
            raise _ValueError("call stack is not available in the enclave")
        if event == "object.__getattr__":
            if args[1] in frame_attrs:
                if args[1] == "tb_frame":
                    f = frame1()
                    # traceback.clear_frames (unittest's assertRaises calls it) only calls the
                    # C `frame.clear()` on what it reads: the frame never reaches Python code.
                    if f is not None and _id(f.f_code) == tb_clearer:
                        return
                    if tb_reader_ok(f, args[0]):
                        return
                flag("blocked_introspection")
                raise _AttributeError(f"{args[1]} is not available in the enclave")
            return
        if event == "object.__setattr__" or event == "object.__delattr__":
            if args[1] == "__code__" or args[1] == "__globals__":
                flag("blocked_introspection")
                raise _blocked("enclave: replacing code objects is not allowed")
            return
        if event in intro_ev or event[:7] == "ctypes.":
            flag("blocked_introspection")
            raise _RuntimeError(f"enclave: {event} is not allowed")
        if event in process_ev:
            flag("blocked_process")
            raise _blocked(f"enclave: {event} is not allowed (process limit)")
        if event in network_ev:
            flag("blocked_network")
            raise _blocked("enclave: no network")
        if event in signal_ev:
            flag("blocked_signal")
            raise _blocked("enclave: signals are not allowed")
        if event in limit_ev:
            flag("blocked_limits")
            raise _blocked("enclave: resource limits are fixed")
        if event == "import":
            name = args[0]
            if _type(name) is _str and name in no_reimport:
                flag("blocked_introspection")
                raise _blocked(f"enclave: importing {name} is not allowed")
            return

    return hook


# ---------------------------------------------------------------------------------------
# The pytest plugin (our code, registered before untrusted code runs)
# ---------------------------------------------------------------------------------------
class _MemModule(pytest.Module):
    """A hidden test module built from in-memory code (the file on disk is empty)."""

    def _getobj(self):
        ctx = self.config.pluginmanager.get_plugin("rlvr-enclave").ctx
        rel = os.path.relpath(str(self.path), HIDDEN)
        if rel in ctx.suite.errors:
            raise self.CollectError(ctx.suite.errors[rel])
        modname, code = ctx.suite.test_modules[rel]
        mod = types.ModuleType(modname)
        exec_hidden(ctx, mod, code, str(self.path))
        return mod

    def collect(self):
        """A module that cannot be imported (the code under test raised, exited, skipped...)
        contributes no items - its tests are then missing, i.e. failed - instead of a
        collection error whose report pytest would build by walking traceback frames,
        which the armed hook refuses."""
        try:
            return list(super().collect())
        except BaseException:  # noqa: B036 - SystemExit/pytest.exit from imported code too
            return []


# unittest.TestCase methods run by unittest's own protocol: pytest's TestCaseFunction calls
# TestCase.run, which calls the test method. The names below are TestCase's API (the
# assertions, run/_callTestMethod/__call__, setUp...), which a test class inherits: a patch
# that binds one of them on a hidden test class or a base it inserts (reachable through
# TestCase.__subclasses__(), no audit) could make every assertion pass.
_TESTCASE = unittest.TestCase
# unittest's own TestCase classes (their dicts are checked after every test): a test class's
# MRO may run through them. IsolatedAsyncioTestCase is bound lazily by unittest: bound here.
_UNITTEST_CASES = (unittest.TestCase, unittest.IsolatedAsyncioTestCase, unittest.FunctionTestCase)
TESTCASE_NAMES = frozenset(dir(_TESTCASE)) - {"__dict__", "__doc__", "__module__", "__weakref__"}
# Plain data a test class may bind to an API name (``maxDiff = None``, ``longMessage = True``).
_DATA_TYPES = frozenset({bool, int, float, str, bytes, type(None), tuple, frozenset})
_MRO = type.__dict__["__mro__"].__get__
# TestCase's own attribute values: a test class may alias them (``assertRaisesRegexp =
# unittest.TestCase.assertRaisesRegex`` in suites written for several Pythons).
_TESTCASE_VALUES = tuple(v for klass in _UNITTEST_CASES for v in vars(klass).values())
_TESTCASE_IDS = frozenset(object.__hash__(v) for v in _TESTCASE_VALUES)
_CLASS_DICT = type.__dict__["__dict__"].__get__


def _unittest_api_genuine(cls, genuine_ids) -> bool:
    """Every class on `cls`'s MRO is one of unittest's (guarded after every test) or object,
    or binds TestCase's API names only to genuine hidden functions or plain data. The MRO
    and class dicts are read through `type`'s own descriptors (no metaclass hook runs)."""
    for klass in _MRO(cls):
        if klass is object or klass in _UNITTEST_CASES:
            continue
        for key, value in list(_CLASS_DICT(klass).items()):
            if type(key) is not str or key not in TESTCASE_NAMES or type(value) in _DATA_TYPES \
                    or object.__hash__(value) in _TESTCASE_IDS:
                continue
            if type(value) in (classmethod, staticmethod):
                value = value.__func__
            if type(value) is not types.FunctionType or object.__hash__(value.__code__) not in genuine_ids:
                return False
    return True


class _UnitTestItem(_pytest.unittest.TestCaseFunction):
    """pytest's TestCaseFunction as the enclave runs it.

    * `runtest` plays the pyfunc role for unittest methods (its ``testargs`` is empty: no
      parametrization), so the sentinel proves the genuine method ran to the end because
      this runtest -> unittest's TestCase.run called it. Before and after the
      call, the test class's MRO must bind TestCase's API only to genuine hidden code.
    * `_addexcinfo` stores unittest's errors, failures and skips without building pytest's
      traceback (which reads ``tb_frame``, refused by the hook); EnclavePlugin's report
      takes them, as pytest's unittest plugin does.
    * `addSubTest` makes a failed ``subTest`` fail its test (pytest would report it as a
      separate sub-report while the test itself passed)."""

    def _addexcinfo(self, rawexcinfo) -> None:
        self.__dict__.setdefault("_excinfo", []).append(ExceptionInfo(rawexcinfo, _ispytest=True))

    def addSubTest(self, test_case, test, exc_info) -> None:
        if exc_info is None or isinstance(exc_info, ExceptionInfo):
            return  # a passed subtest, or a skip that addSkip has already recorded
        self._addexcinfo(exc_info)

    def runtest(self) -> None:
        testargs: dict = {}  # read by the hook (the pyfunc role): a unittest method takes none
        genuine = self.config.pluginmanager.get_plugin("rlvr-enclave").ctx.suite.genuine_ids
        cls = type(self.instance)
        if not _unittest_api_genuine(cls, genuine):
            raise AssertionError("enclave: the test class's unittest API was rebound")
        # pytest's TestCaseFunction.runtest minus its --trace/--pdb hooks (the debugging
        # plugin is disabled here, so its option lookup raises): hand the test to unittest.
        testcase = self.instance
        if _is_async_function(self.obj):
            testcase(result=self)
        else:
            setattr(testcase, self.name, self.obj)
            try:
                testcase(result=self)
            finally:
                delattr(testcase, self.name)
        if not _unittest_api_genuine(cls, genuine):
            raise AssertionError("enclave: the test class's unittest API was rebound")
        del testargs


class _UnitTestCase(_pytest.unittest.UnitTestCase):
    """pytest's unittest class collector, making `_UnitTestItem`s."""

    def collect(self):
        for node in super().collect():
            if type(node) is _pytest.unittest.TestCaseFunction:
                node = _UnitTestItem.from_parent(self, name=node.name)
            yield node


class _HiddenFinder:
    """Serves hidden non-test modules (helpers) from memory. It sits in sys.meta_path, so
    the code under test can read it: it holds the helpers (which the import system puts in
    sys.modules anyway) and the list of their namespaces, never the run's context or the
    test modules."""

    def __init__(self, modules) -> None:
        self.modules = modules
        self.hidden_dicts: list[dict] = []

    def find_spec(self, name, path=None, target=None):
        import importlib.machinery

        entry = self.modules.get(name)
        if entry is None:
            return None
        rel, _code, is_pkg = entry
        spec = importlib.machinery.ModuleSpec(name, self, origin=f"{HIDDEN}/{rel}", is_package=is_pkg)
        if is_pkg:
            spec.submodule_search_locations = []
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        rel, code, _ = self.modules[module.__name__]
        exec_hidden(self, module, code, f"{HIDDEN}/{rel}")


def exec_hidden(ctx, module: types.ModuleType, code, filename: str) -> None:
    """Run hidden code (a test module, helper or conftest) in `module`; its namespace joins
    `ctx.hidden_dicts` (the run's context, or the helper finder's own list), which the
    integrity checkpoints compare. Test modules and conftests are never put in sys.modules."""
    module.__file__ = hidden_alias(filename)
    ctx.hidden_dicts.append(module.__dict__)
    sys.audit(STEP_EVENT, "exec")  # the code under test may have run since the last checkpoint
    try:
        exec(code, module.__dict__)
    finally:
        # Before any code the run calls next: the namespace is compared with its plan and
        # snapshotted now, not when collection ends.
        sys.audit(HIDDEN_EVENT, module.__dict__, filename)


def order_items(items: list, ctx) -> list:
    """The run order, the same under both runners: the selection, sorted by node id
    (collection order must not leak into the seed), then shuffled by the run's seed."""
    if ctx.select is not None:
        wanted = set(ctx.select)
        items = [it for it in items if it.nodeid in wanted]
    items = sorted(items, key=lambda it: it.nodeid)
    if ctx.shuffle:
        random.Random(f"order:{ctx.seed}").shuffle(items)
    return items


class _Context:
    def __init__(self, suite, seed, shuffle, select) -> None:
        self.suite = suite
        self.seed = seed
        self.shuffle = shuffle
        self.select = select
        self.hidden_dicts: list[dict] = []
        self.arm_modules: list[dict] = []
        self.finder = _HiddenFinder(suite.helper_modules)


# No module global refers to a run's context: every function of this module is reachable
# by the code under test (object.__subclasses__() gives every class, __globals__ is not
# audited), and the context leads to the compiled hidden suite, whose constants are the
# expected values. The context lives on the plugin instance and in the runners' frames.
_GUARDED: tuple[list, list, list] | None = None
_DirectParam = getattr(_pytest.python, "DirectParamFixtureDef", None)
_RESOURCE_HINT = "resource"


def _resource_exception(exc: BaseException | None) -> bool:
    if exc is None:
        return False
    if isinstance(exc, MemoryError):
        return True
    if isinstance(exc, _Blocked) and "process limit" in str(exc):
        return True
    if isinstance(exc, RuntimeError) and "can't start new thread" in str(exc):
        return True
    if isinstance(exc, OSError) and exc.errno in (11, 12, 27, 28):  # EAGAIN ENOMEM EFBIG ENOSPC
        return True
    return False


class EnclavePlugin:
    """Arms the hook, collects hidden modules from memory, runs items in a seeded shuffled
    order in its own loop and reports each item to the hook."""

    def __init__(self, ctx: _Context) -> None:
        self.ctx = ctx
        self.hints: dict = {}

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session):
        ctx = self.ctx
        sys.audit("rlvr.arm", late_namespaces(), sys.__dict__, False)
        pm = session.config.pluginmanager
        for rel, code in sorted(ctx.suite.conftests.items()):
            mod = types.ModuleType("rlvr_hidden_conftest_" + str(len(ctx.hidden_dicts)))
            try:
                exec_hidden(ctx, mod, code, f"{HIDDEN}/{rel}")
            except Exception:
                continue
            pm.consider_conftest(mod, registration_name=f"{HIDDEN}/{rel}")
        return None

    @pytest.hookimpl(tryfirst=True)
    def pytest_pycollect_makemodule(self, module_path, parent):
        rel = os.path.relpath(str(module_path), HIDDEN)
        if rel in self.ctx.suite.test_modules or rel in self.ctx.suite.errors:
            return _MemModule.from_parent(parent, path=module_path)
        return None

    @pytest.hookimpl(tryfirst=True)
    def pytest_pycollect_makeitem(self, collector, name, obj):
        """unittest.TestCase subclasses: the class pytest's unittest plugin would collect
        (its own test of the object), as our `_UnitTestCase`. A hidden test class holding a
        name its plan does not contain (a planted ``pytest_generate_tests``...) is refused
        before pytest reads it."""
        if issubclass(type(obj), type):
            sys.audit(CLASS_EVENT, obj, str(collector.path))
        if _pytest.unittest.pytest_pycollect_makeitem(collector=collector, name=name, obj=obj) is None:
            return None
        return _UnitTestCase.from_parent(collector, name=name, obj=obj)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session, config, items):
        ctx = self.ctx
        items[:] = order_items(items, ctx)
        plan = []
        for it in items:
            fname = it.nodeid.split("::")[-1].split("[", 1)[0]
            direct = []
            callspec = getattr(it, "callspec", None)
            if callspec is not None and _DirectParam is not None:
                defs = it._fixtureinfo.name2fixturedefs
                for pname, pvalue in callspec.params.items():
                    fdefs = defs.get(pname)
                    if fdefs and type(fdefs[-1]) is _DirectParam:
                        direct.append((pname, pvalue))
            plan.append((str(it.nodeid), it, fname, tuple(direct)))
        hidden_dicts = list(ctx.hidden_dicts) + ctx.finder.hidden_dicts
        extra_dicts = hidden_dicts + [config.pluginmanager._name2plugin]
        hooklists = [hc._hookimpls for hc in vars(config.pluginmanager.hook).values()
                     if hasattr(hc, "_hookimpls")]
        sys.audit("rlvr.collected")
        del plan, extra_dicts, hooklists, hidden_dicts

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session):
        sys.audit("rlvr.loop")
        items = list(session.items)
        for i, item in enumerate(items):
            nextitem = items[i + 1] if i + 1 < len(items) else None
            _run_item(self, item, nextitem)
        sys.audit("rlvr.done")
        return True

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_makereport(self, item, call):
        excinfo = call.excinfo
        if type(item) is _UnitTestItem and item._excinfo:
            # What unittest reported during this phase (setUp, the body and its subtests,
            # tearDown all run inside the call): a failure decides over skips.
            reported, item._excinfo[:] = list(item._excinfo), []
            failures = [e for e in reported if not isinstance(e.value, (Skipped, unittest.SkipTest))]
            excinfo = (failures or reported)[0]
        exc = excinfo.value if excinfo is not None else None
        if exc is None:
            outcome, longrepr = "passed", None
        elif isinstance(exc, (Skipped, unittest.SkipTest, XFailed)):  # xfail: unittest's expectedFailure too
            outcome, longrepr = "skipped", ("", 0, "skipped")
        else:
            outcome, longrepr = "failed", "failed"
            if _resource_exception(exc):
                self.hints[item.nodeid] = _RESOURCE_HINT
        # Location is for display only (nobody displays these reports); `item.location`
        # would resolve the test's source file and line for every item (~0.1 ms each).
        return _pytest.reports.TestReport(
            item.nodeid, (item.nodeid, None, item.nodeid), {}, outcome, longrepr, call.when, (),
            call.duration, call.start, call.stop,
        )

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem):
        testfunction = pyfuncitem.obj
        funcargs = pyfuncitem.funcargs
        testargs = {arg: funcargs[arg] for arg in pyfuncitem._fixtureinfo.argnames}
        testfunction(**testargs)
        return True


GUARDED_MODULES = ("builtins", "sys", "pytest", "random", "os", "posix", "io", "types", "functools",
                   "operator", "math", "hashlib", "signal", "_signal", "lean")
GUARDED_PREFIXES = ("_pytest", "pluggy", "unittest")
# Checked after every test (the rest at collection and at the end): the namespaces a test
# run goes through - under either runner (test bodies: builtins, pytest.raises/approx/fail...)
# and, under pytest, its per-test protocol. Comparing ~8k bindings costs ~0.4 ms per check.
PER_TEST_CORE = frozenset({
    "builtins", "sys", "pytest", "random", "_pytest.outcomes", "_pytest.python_api", "_pytest.approx",
    "_pytest.raises", "lean",
})
PER_TEST_PYTEST = frozenset({
    "_pytest.runner", "_pytest.python", "_pytest.fixtures", "_pytest.reports", "_pytest.main",
    "_pytest.nodes", "_pytest.skipping", "pluggy._callers", "pluggy._execution", "pluggy._hooks",
    "pluggy._caller", "pluggy._manager", "_pytest.mark.structures", "_pytest.unittest", "unittest.case",
})


def guarded_namespaces() -> tuple[list, list, list]:
    """(checked after every test, also checked after every test under pytest, checked at
    collection and end): module dicts and the class dicts of pytest, pluggy and the runners,
    whose bindings the checkpoints compare."""
    # The frame-view namespace and classes: reachable from sys._getframe, so a patch could
    # rebind what trusted callers (logging, typing) get from it; checked like this module.
    per_test: list = [globals(), _VIEW_NS, vars(_VIEW_NS["FrameView"]), vars(_VIEW_NS["CodeView"])]
    # TestCase's own methods (its assertions) run inside unittest test bodies: per test.
    pytest_path: list = [vars(klass) for klass in _UNITTEST_CASES]
    rest: list = []
    for value in list(globals().values()):
        if isinstance(value, type) and value.__module__ == __name__:
            rest.append(vars(value))
    for name, mod in list(sys.modules.items()):
        if not isinstance(mod, types.ModuleType):
            continue
        if name in GUARDED_MODULES or name.startswith(GUARDED_PREFIXES):
            (per_test if name in PER_TEST_CORE else pytest_path if name in PER_TEST_PYTEST else rest).append(mod.__dict__)
            if name.startswith(GUARDED_PREFIXES) or name in ("pytest", "lean"):
                for value in list(vars(mod).values()):
                    if isinstance(value, type) and value.__module__ == name:
                        rest.append(vars(value))
    return per_test, pytest_path, rest


def late_namespaces() -> list:
    """Guarded namespaces a child changes between fork and arming (this module's):
    snapshotted when the child arms, the rest in the server (`presnapshot`)."""
    return [globals()]


def presnapshot() -> None:
    """Hand the hook the server-side snapshot of every guarded namespace but the late ones
    (once, before the first fork: ~8k bindings a child no longer copies and touches)."""
    late = {object.__hash__(d) for d in late_namespaces()}
    sys.audit("rlvr.presnap", *([d for d in group if object.__hash__(d) not in late]
                                for group in _GUARDED or guarded_namespaces()), pinned_modules(),
               collection_namespaces())


# What a hidden module's body and the collection of its tests read (pytest.mark, fixtures,
# raises/approx, the collectors, pluggy's hook calls, unittest's TestCase and loader): the
# module dicts and their classes' dicts, compared at the collection checkpoints (the rest of
# pytest's classes, which no collection step reads, at the end of collection and of the run).
COLLECTION_PATH = ("_pytest.python", "_pytest.mark.structures", "_pytest.fixtures", "_pytest.nodes",
                   "_pytest.unittest", "_pytest.main", "_pytest.raises", "_pytest.approx", "_pytest.outcomes",
                   "_pytest.compat", "pluggy._hooks", "pluggy._manager", "pluggy._callers", "unittest.case",
                   "unittest.loader")


def collection_namespaces() -> list:
    out: list = []
    for name in COLLECTION_PATH:
        mod = sys.modules.get(name)
        if not isinstance(mod, types.ModuleType):
            continue
        out.append(vars(mod))
        out += [vars(v) for v in list(vars(mod).values()) if isinstance(v, type) and v.__module__ == name]
    return out


# The pinned entries a test's run reads from sys.modules by name (pytest's runner and
# unittest plugin look up "unittest" / "unittest.case" per test; test bodies import these):
# compared after every test; all pinned entries at every collection checkpoint and the end.
PER_TEST_PINS = frozenset({"unittest", "unittest.case", "pytest", "builtins", "sys", "os", "random", "math",
                           "functools", "operator", "types", "io", "_pytest.outcomes", "_pytest.raises",
                           "_pytest.approx", "_pytest.runner", "_pytest.unittest"})


def pinned_modules() -> dict:
    """The sys.modules entries of the runner's dependencies (the guarded modules), pinned
    by the server before any package is imported: each checkpoint compares them by identity
    (a fake ``unittest`` put there is what pytest's unittest plugin would consult)."""
    return {name: mod for name, mod in sys.modules.items()
            if isinstance(mod, types.ModuleType) and name not in ("runner", "lean")
            and (name in GUARDED_MODULES or name.startswith(GUARDED_PREFIXES))}


def _run_item(plugin: EnclavePlugin, item, nextitem) -> None:
    sys.audit("rlvr.item_start", item)
    _seed_item(plugin.ctx.seed, item.nodeid)
    outcome = "failed"
    try:
        reports = _pytest.runner.runtestprotocol(item, log=False, nextitem=nextitem)
        if any(r.failed for r in reports):
            outcome = "error" if any(r.failed and r.when != "call" for r in reports) else "failed"
        elif any(r.skipped for r in reports):
            outcome = "skipped"
        elif any(r.when == "call" and r.passed for r in reports):
            outcome = "passed"
    except BaseException as exc:  # pytest.exit / KeyboardInterrupt from the code under test
        outcome = "error"
        if _resource_exception(exc):
            plugin.hints[item.nodeid] = _RESOURCE_HINT
    hint = plugin.hints.get(item.nodeid, "")
    sys.audit("rlvr.item_end", outcome, hint if type(hint) is str else "")


def _seed_item(seed: int, nodeid: str) -> None:
    random.seed(f"{seed}:{nodeid}")


RUN_ITEM_CODE = _run_item.__code__
LOOP_CODE = EnclavePlugin.pytest_runtestloop.__code__
# Two pyfunc roles: pytest functions (our pytest_pyfunc_call) and unittest methods (our
# TestCaseFunction.runtest, which hands the test to unittest's own TestCase.run).
PYFUNC_CODE = (EnclavePlugin.pytest_pyfunc_call.__code__, _UnitTestItem.runtest.__code__)
COLLECTED_CODE = EnclavePlugin.pytest_collection_modifyitems.__code__
ARM_CODE = EnclavePlugin.pytest_collection.__code__
# The protocol roles the hook checks frames against (see make_hook), in its unpacking order.
ROLES = ("run_item", "loop", "pyfunc", "collected", "arm", "fallback")


def role_codes(*runners) -> dict:
    """{role: (code, ...)} over runner modules exposing RUN_ITEM_CODE, LOOP_CODE, ... (a
    runner without a role, like this pytest one without fallback, contributes nothing)."""
    attrs = {role: role.upper() + "_CODE" for role in ROLES}
    out: dict = {}
    for role, attr in attrs.items():
        codes: list = []
        for m in runners:
            value = getattr(m, attr, ())
            codes.extend(value if isinstance(value, tuple) else (value,))
        out[role] = tuple(codes)
    return out


def _stub(name):
    def blocked(*args, **kwargs):
        raise _Blocked(f"enclave: {name} is not allowed (process limit)" if "fork" in name
                       else f"enclave: {name} is not allowed")
    blocked.__name__ = name
    return blocked


def neuter_signals() -> None:
    """Replace the unaudited signal and timer primitives: once, in the server (which never
    uses them), so that every child starts with them replaced."""
    import _signal
    import signal

    for mod in (signal, _signal):
        for name in ("signal", "setitimer", "alarm", "set_wakeup_fd", "siginterrupt", "pthread_kill", "sigwait"):
            if hasattr(mod, name):
                setattr(mod, name, _stub(name))


def _no_current_test_var(item, when) -> None:
    """Stands in for ``_pytest.runner._update_current_test_var``: PYTEST_CURRENT_TEST would
    tell the code under test, through ``os.environ``, which hidden test (file, name,
    parameters) is running."""


def hide_current_test() -> None:
    """In the server, before the snapshot: pytest never sets PYTEST_CURRENT_TEST in a child
    (the lean runner never did)."""
    _pytest.runner._update_current_test_var = _no_current_test_var
    os.environ.pop("PYTEST_CURRENT_TEST", None)


def neuter_modules() -> None:
    """Replace the unaudited process primitive before untrusted code can use it (in the
    child: its own trusted setup has just run git through it), and make sure ctypes is
    still gone (the server purged it and nothing trusted imports it)."""
    try:
        import _posixsubprocess

        _posixsubprocess.fork_exec = _stub("fork_exec")
    except ImportError:
        pass
    for name in ("ctypes", "_ctypes", "ctypes.util", "ctypes._endian"):
        sys.modules.pop(name, None)


# Fixtures served by the capture and logging plugins (the subtests fixture uses both). A run
# whose hidden suite never names one unregisters those plugins: they only capture output and
# log records for reports, which the enclave never shows, and wrap every test phase.
IO_FIXTURES = ("caplog", "capsys", "capfd", "capsysbinary", "capfdbinary", "capteesys", "subtests")
OPTIONAL_PLUGINS = ("logging-plugin", "capturemanager")


# A --doctest-glob that no file under the run directory can match (a pattern with a path
# separator is matched against the absolute path). The doctest plugin stays loaded because
# it provides the `doctest_namespace` fixture, which upstream autouse conftest fixtures use
# (`-p no:doctest` made every test of such a suite an error); it collects nothing: doctests
# are never hidden tests (no sentinel exists for an example), and `--doctest-modules` is off.
NO_DOCTEST_GLOB = "/dev/null/rlvr-no-doctests"


def pytest_args(ini: str) -> list[str]:
    return [
        HIDDEN, "-c", ini, "--rootdir", HIDDEN, "--noconftest", "--assert=plain", "-q", "-s",
        "--basetemp", BASETEMP, "--continue-on-collection-errors", "--import-mode=importlib",
        "--doctest-glob", NO_DOCTEST_GLOB,
        "-p", "no:cacheprovider", "-p", "no:faulthandler", "-p", "no:pastebin",
        "-p", "no:junitxml", "-p", "no:stepwise", "-p", "no:warnings",
        "-p", "no:unraisableexception", "-p", "no:threadexception", "-p", "no:debugging",
        "-p", "no:legacypath", "-p", "no:setuponly", "-p", "no:setupplan",
    ]


def cut_config_roots() -> None:
    """Drop the references pytest keeps to its Config from module-level objects. From the
    config, the plugin manager leads to the session (a registered plugin), its items (their
    functions' constants, their `callspec.params`) and this runner's plugin (the run's
    context); and every module and class is reachable by the code under test without audit
    (``object.__subclasses__()``, ``__globals__``). `MARK_GEN._config` only makes unknown
    marks warn; the assertion plugin's per-test `util._config` / `_reprcompare` are never
    set here (our loop calls `runtestprotocol`, not the hook that sets them), and the
    debugging plugin, which keeps `pytestPDB._config`, is disabled."""
    import _pytest.mark

    _pytest.mark.MARK_GEN._config = None


class Prepared:
    """A pytest session configured and started in the server (default plugins imported
    and registered, options parsed, fixture manager built: ~0.1 s of pytest start-up).
    Each child collects and runs in its own forked copy; the server's copy is never used."""

    def __init__(self, ini: str) -> None:
        import _pytest.config
        import _pytest.main

        args = pytest_args(ini)
        saved = sys.stdout
        sys.stdout = open(os.devnull, "w")  # the terminal reporter binds sys.stdout now
        os.makedirs(HIDDEN, exist_ok=True)  # --rootdir must exist while options are parsed
        try:
            config = _pytest.config.get_config(args, None, prog="rlvr-enclave")
            self.plugin = EnclavePlugin(None)
            pm = config.pluginmanager
            pm.register(self.plugin, name="rlvr-enclave")
            config = pm.hook.pytest_cmdline_parse(pluginmanager=pm, args=list(args))
            session = _pytest.main.Session.from_config(config)
            session.exitstatus = 0
            config._do_configure()
            config.hook.pytest_sessionstart(session=session)
        finally:
            sys.stdout = saved
            for d in (HIDDEN, RUN_ROOT):
                try:
                    os.rmdir(d)
                except OSError:
                    pass
        self.config = config
        self.session = session
        cut_config_roots()
        global _GUARDED
        _GUARDED = guarded_namespaces()  # the same dict objects in every forked child


def run_tests(suite, seed: int, shuffle: bool, select, prepared: Prepared) -> None:
    """Collect and run the hidden suite in the pre-started session (child, hook ready)."""
    ctx = _Context(suite, seed, shuffle, select)
    prepared.plugin.ctx = ctx
    sys.meta_path.insert(0, ctx.finder)
    random.seed(f"{seed}:session")
    hook = prepared.config.hook
    session = prepared.session
    try:
        hook.pytest_collection(session=session)
        hook.pytest_runtestloop(session=session)
    except BaseException:  # whatever the code under test raised: the records tell
        if os.environ.get("RLVR_ENCLAVE_DEBUG_LOG"):
            import traceback

            traceback.print_exc()


# ---------------------------------------------------------------------------------------
# The child's trusted setup (between fork and the first line of untrusted code)
# ---------------------------------------------------------------------------------------
def _read_exact(fd: int, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            raise OSError("key pipe closed early")
        data += chunk
    return data


def _set_limits(limits: dict, privsep: bool) -> None:
    import resource

    cpu = int(limits.get("cpu", 0) or 0)
    if cpu > 0:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    mem = int(limits.get("mem", 0) or 0)
    if mem > 0:
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    fsize = int(limits.get("fsize", 0) or 0)
    if fsize > 0:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    nproc = int(limits.get("nproc", 0) or 0)
    if nproc > 0 and privsep:
        # Per fresh uid, so it counts only this run's processes and threads (at least a few:
        # the trusted setup itself runs git).
        nproc = max(nproc, 4)
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _write_tree(root: str, files: dict) -> None:
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if type(text) is bytes:
            with open(path, "wb") as fh:
                fh.write(text)
            continue
        with open(path, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)


def _git(args: list[str], patch: str) -> tuple[bool, str]:
    import subprocess

    env = {"PATH": "/usr/bin:/bin", "HOME": RUN_ROOT, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CEILING_DIRECTORIES": "/tmp", "LC_ALL": "C"}
    try:
        proc = subprocess.run(["git", *args], input=patch.encode("utf-8"), cwd=REPO, env=env,
                              capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"git {args[0]}: {exc}"
    return proc.returncode == 0, proc.stderr.decode("utf-8", "replace").strip()


def apply_patch(patch: str) -> tuple[bool, str]:
    """`git apply` in the pristine copy (the empty patch is a no-op). One git process, not
    `--check` then apply: without --reject, git apply is atomic - it verifies every hunk
    (exact context, no fuzz) before it writes anything and touches nothing on failure - so
    a separate --check run repeats the same verification for the cost of another spawn."""
    if not patch.strip():
        return True, ""
    ok, err = _git(["apply", "--whitespace=nowarn", "-"], patch)
    return ok, ("git apply: " + err) if not ok else ""


def _runtime_prefixes() -> tuple[str, ...]:
    prefixes = {"/usr", "/lib", "/lib64", "/bin", "/etc", sys.prefix, sys.base_prefix,
                sys.exec_prefix, os.path.dirname(os.path.dirname(pytest.__file__))}
    for p in sys.path:
        if p and p.startswith("/") and not p.startswith("/opt/rlvr-enclave"):
            prefixes.add(p)
    for p in ("/dev/null", "/dev/urandom", "/dev/random", "/dev/zero"):
        prefixes.add(p)
    return tuple(sorted(prefixes))


def _changed_tree(files: dict) -> dict | None:
    """Files the applied patch changed, relative to the pristine snapshot (None if a file
    is not text, which the policy makes impossible for a patch that passed it)."""
    out: dict = {}
    seen = set()
    for root, _dirs, names in os.walk(REPO):
        for name in names:
            full = os.path.join(root, name)
            rel = os.path.relpath(full, REPO)
            seen.add(rel)
            try:
                with open(full, encoding="utf-8", newline="") as fh:
                    text = fh.read()
            except (OSError, UnicodeDecodeError):
                return None
            if files.get(rel) != text:
                out[rel] = text
    for rel in files:
        if rel not in seen:
            out[rel] = None
    return out


def project_job(project) -> dict:
    """The part of a task's project config (rlvr.tasks.project_config job fields) the child
    uses: `pythonpath` (repo-relative import roots, e.g. ["src"] for a src layout, put ahead
    of the repo root so hidden tests import the repo's own package, never a same-named one
    of the runtime) and `markers` (registered, as the project's own config would). The host
    normalises them; anything leaving the repo or not a string is dropped here too (the
    server must not trust a request to keep the child's imports inside the repo)."""
    import posixpath

    project = project if isinstance(project, dict) else {}
    roots: list[str] = []
    for entry in project.get("pythonpath") or ():
        if type(entry) is not str or not entry or "\0" in entry:
            continue
        norm = posixpath.normpath(entry)
        if norm.startswith(("/", "..")) or norm == "." or norm in roots:
            continue
        roots.append(norm)
    markers = [m for m in project.get("markers") or () if type(m) is str and m.strip() and "\n" not in m]
    return {"pythonpath": roots, "markers": markers}


# The runner's own packages: a repository shipping one of these cannot be tested here (the
# runner keeps using the runtime's copy, as it must).
_RUNNER_PACKAGES = frozenset({"pytest", "_pytest", "pluggy", "py"})


def evict_shadowed(roots: list[str], site: list[str]) -> None:
    """Forget the runtime's imported copies of packages the repository provides. The server
    imported pytest's dependencies (iniconfig, packaging, ...) before any fork; a repository
    whose own package has one of those names (a src layout of iniconfig itself) would
    otherwise be served the runtime's copy from sys.modules, whatever sys.path says. Only
    modules loaded from the runtime's site directories are dropped (the stdlib stays ahead
    of the repository, as before); the runner's own packages stay."""
    provided: set[str] = set()
    for root in roots:
        try:
            names = os.listdir(root)
        except OSError:
            continue
        for name in names:
            if name.endswith(".py"):
                provided.add(name[:-3])
            elif os.path.isfile(os.path.join(root, name, "__init__.py")):
                provided.add(name)
    provided -= _RUNNER_PACKAGES
    if not provided:
        return
    prefixes = tuple(p.rstrip("/") + "/" for p in site)
    for modname, module in list(sys.modules.items()):
        top = modname.split(".", 1)[0]
        if top in provided and str(getattr(module, "__file__", None) or "").startswith(prefixes):
            del sys.modules[modname]


def child_main(job: dict, files: dict, suite: CompiledSuite, results_fd: int, key_fd: int,
               tree_fd: int, prepared, pycs: dict | None = None, run=None) -> None:
    """Everything from fork to the test run; returns only if the run completed. `run` is the
    runner (default: pytest's `run_tests`; the lean one for suites it plans)."""
    run = run or run_tests
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    debug_log = os.environ.get("RLVR_ENCLAVE_DEBUG_LOG")  # development aid; the host never sets it
    if debug_log:
        os.dup2(os.open(debug_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666), 2)
    keep = {0, 1, 2, results_fd, key_fd, tree_fd}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    key = _read_exact(key_fd, 32)
    os.close(key_fd)
    uid = job["uid"]
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # also makes us non-dumpable (fs.suid_dumpable = 0)
    _set_limits(job["limits"], uid is not None)
    os.umask(0o022)
    for d in (REPO, HIDDEN, BASETEMP):  # RUN_ROOT itself is made fresh by the server
        os.mkdir(d, 0o700)
    paths = (
        _runtime_prefixes(),  # read-only runtime
        (REPO, BASETEMP, "/dev/null"),  # writable (the rest of RUN_ROOT is readable)
        ("/proc", "/tmp/rlvr-server", "/opt/rlvr-enclave", "/dev/fd", "/dev/stdin",
         "/dev/stdout", "/dev/stderr"),  # denied
        HIDDEN,
        REPO,
    )
    project = job.get("project") or project_job(None)
    sys.audit("rlvr.init", key, results_fd, job["nonce"], paths, suite)
    del key
    try:
        placeholders = {rel: "" for rel in suite.test_modules}
        placeholders.update({rel: "" for rel in suite.errors})
        placeholders.update(suite.data_files)
        _write_tree(HIDDEN, placeholders)
        applied = job.get("applied")
        if applied is not None:  # this exact patch was applied by git in an earlier run
            _write_tree(REPO, {p: t for p, t in files.items() if p not in applied})
            _write_tree(REPO, {p: t for p, t in applied.items() if t is not None})
            ok, detail = True, ""
        else:
            _write_tree(REPO, files)
            ok, detail = apply_patch(job["patch"])
            if ok and job["patch"].strip():
                import json

                changed = _changed_tree(files)
                if changed is not None:
                    data = json.dumps(changed).encode("utf-8", "surrogateescape")
                    while data:
                        data = data[os.write(tree_fd, data):]
        os.close(tree_fd)
        if ok and pycs:  # after the tree is final (and after _changed_tree, which reads text)
            _write_tree(REPO, pycs)
        for line in project["markers"]:  # before collection: --strict-markers style checks see them
            prepared.config.addinivalue_line("markers", line)
        if not suite.needs_io_plugins and run is run_tests:
            pm = prepared.config.pluginmanager
            for name in OPTIONAL_PLUGINS:
                if pm.get_plugin(name) is not None:
                    pm.unregister(name=name)
    except Exception as exc:
        sys.audit("rlvr.error", f"setup: {type(exc).__name__}: {exc}")
        if debug_log:
            import traceback

            traceback.print_exc()
        return
    sys.audit("rlvr.apply", ok, detail)
    if not ok:
        return
    # Interpreter state the code under test starts from.
    stdlib = [p for p in sys.path if "site-packages" not in p and not p.startswith("/opt/rlvr-enclave")]
    site = [p for p in sys.path if "site-packages" in p]
    sys.path[:] = stdlib + [REPO + "/" + p for p in project["pythonpath"]] + [REPO] + site
    # Finders of the read-only runtime directories stay (their listings are cached in the
    # server); any other path's finder (the run dir did not exist then) is dropped.
    for path in [p for p in sys.path_importer_cache if p not in stdlib and p not in site]:
        del sys.path_importer_cache[path]
    evict_shadowed([REPO + "/" + p for p in project["pythonpath"]] + [REPO], site)
    os.chdir(REPO)
    sink = open(os.devnull, "w") if not debug_log else os.fdopen(os.dup(2), "w", buffering=1)
    sys.stdin = sys.__stdin__ = open(os.devnull)
    sys.stdout = sys.__stdout__ = sink
    sys.stderr = sys.__stderr__ = sink
    for name in [n for n in os.environ if n.startswith(("PYTEST_", "PYTHON", "RLVR_"))]:
        if name not in ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE"):
            del os.environ[name]
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    neuter_modules()
    for name in ("runner", "lean"):
        sys.modules.pop(name, None)  # not reachable by name from the code under test
    run(suite, job["seed"], job["shuffle"], job["select"], prepared)
