"""A process boundary for the enclave, measured (issue 35): compatibility and warm cost.

The prototype (bench/_boundary/) runs the code under test in a process of its own (its own
sandbox: it mounts the patched tree, never the hidden tests) and pytest with the hidden tests
in another (its own sandbox: it never imports the patched code). The test side imports the
task's packages as proxy modules; calls cross two FIFOs; plain builtin data crosses as value
copies, everything else as handles (remote proxies), in both directions (callbacks).

Tasks: per real library of data/real/corpus.toml, the synthesis stage's own single-bug
candidates (rlvr.authoring.synth.candidates.single_candidates over
rlvr.authoring.synth.corpus_families.corpus_family, seed 0, operators interleaved), kept when
today's enclave detects the bug (`Enclave.verify` of the empty patch is not `passed`:
curation's rule), up to --tasks. The hidden suite is the library's upstream suite less the
test files that do not pass on the unmodified source in today's enclave (bench/enclave.py's
`passing_suite`). Every task's reference patch restores the same tree (the unmodified
library), so its reference verdict is run on --ref-runs tasks per side and stands for all.

Per task, interleaved: today's verdict on the unfixed repository, then the prototype's. The
prototype's "compatible subset" is the tests that pass under it on the reference tree; a task
whose unfixed repository still fails on that subset is one the boundary could grade by
itself ("per task where compatible"). Timing: --timing-tasks tasks, --verdicts verdicts per
side alternating reference and empty patch, old/new interleaved, medians.

    nice -n 19 python bench/enclave_boundary.py --library inflection --tasks 50
    nice -n 19 python bench/enclave_boundary.py --all --tasks 50
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import os
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CORPUS_CACHE, emit, summary  # noqa: E402

from _boundary.host import Boundary, top_packages  # noqa: E402
from rlvr.authoring.corpus import load_lock, source_dir  # noqa: E402
from rlvr.authoring.synth.candidates import single_candidates  # noqa: E402
from rlvr.authoring.synth.corpus_families import corpus_family  # noqa: E402
from rlvr.enclave import Enclave  # noqa: E402
from rlvr.sandbox import Limits, get_sandbox  # noqa: E402
from rlvr.tasks import project_config  # noqa: E402
from rlvr.tasks.model import Task  # noqa: E402
from rlvr.tasks.patches import make_patch  # noqa: E402

import enclave as enclave_bench  # noqa: E402  (bench/enclave.py: passing_suite)

LIMITS = Limits(wall_seconds=120, cpu_seconds=120, memory_bytes=1 << 30, max_processes=64,
                max_file_bytes=16 << 20, output_bytes=64 << 10)

MESSAGE_CLASSES = [  # (class, failure-message pattern), checked first
    ("introspection refused at the boundary (dunders of test-side objects)", r"boundary: (op|attribute|operator)"),
    ("warnings emitted in the other process", r"DID NOT WARN|warns\(|Warning"),
    ("recursion through proxies", r"RecursionError"),
    ("duck typing / protocols on proxies", r"has no len|not iterable|not subscriptable|not callable|unhashable|object has no attribute"),
]
CLASSES = [  # (class, test-source or message pattern) in priority order
    ("collection: subclassing/decorating a proxied class at import", r"(?s)collect.*(bases|metaclass|mro|__init_subclass__|TypeError)"),
    ("wire: object not encodable / refused", r"WireError|unencodable|refused wire"),
    ("monkeypatching/freezing in the test process", r"freeze_time|freezegun|monkeypatch|mock\.|patch\(|@patch|setattr\("),
    ("module namespace introspection (vars/__dict__/dir of a proxy module)", r"__dict__|vars\(|dir\("),
    ("identity (`is`) on value copies", r"\bis\b(?! not None| None)|assertIs\b|\bid\("),
    ("isinstance/type against proxied classes", r"isinstance|issubclass|type\(|__class__|assertIsInstance"),
    ("generators/iterators (introspection, laziness)", r"isgenerator|iterator|generator|GeneratorType|Iterator|__next__|\biter\("),
    ("exceptions crossing (type/attributes)", r"raises|DID NOT RAISE|assertRaises|except "),
    ("mutation of value copies (arguments, module state)", r"\.(add|append|update|extend|insert|pop|clear|sort)\(|\]\s*=[^=]"),
    ("pickling/copying remote objects", r"pickle|copy\.|deepcopy"),
    ("equality of proxies vs plain values (strict eq)", r"==|!=|assertEqual"),
]


def test_source(hidden: dict[str, str], test_id: str) -> str:
    path, _, rest = test_id.partition("::")
    name = rest.split("::")[-1].split("[")[0]
    text = hidden.get(path, "")
    try:
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return ast.get_source_segment(text, node) or ""
    except SyntaxError:
        pass
    return ""


def classify(hidden: dict[str, str], failure: dict) -> str:
    if failure["when"] == "collect":
        blob = "collect " + failure["msg"]
    else:
        blob = failure["msg"] + "\n" + test_source(hidden, failure["id"])
    if "Timeout" in failure["msg"] or "Alarm" in failure["msg"]:
        return "timeout"
    for name, pattern in MESSAGE_CLASSES:
        if failure["when"] != "collect" and re.search(pattern, failure["msg"]):
            return name
    for name, pattern in CLASSES:
        if failure["when"] == "collect" and not name.startswith("collection"):
            continue
        if re.search(pattern, blob):
            return name
    return "other"


def graded_pass(new: dict, task: Task) -> bool:
    """The prototype's verdict as today's enclave judges one: every graded test passed."""
    outs = new.get("outcomes", {})
    return new.get("rc") in (0, 1) and bool(task.graded_tests) and all(outs.get(t) == "passed" for t in task.graded_tests)


def interleave_by_operator(cands):
    by_op: dict[str, list] = {}
    for c in cands:
        by_op.setdefault(c.operator, []).append(c)
    out, depth = [], 0
    while any(depth < len(v) for v in by_op.values()):
        out += [v[depth] for k, v in sorted(by_op.items()) if depth < len(v)]
        depth += 1
    return out


def run_library(name: str, args, sandbox) -> dict:
    lock = load_lock()
    lib = next(lib for lib in lock.libraries if lib.name == name)
    family = corpus_family(lib, source_dir(lib, CORPUS_CACHE))
    label = f"{lib.name}-{lib.version}"
    t_start = time.monotonic()
    with Enclave(backend=args.backend, limits=LIMITS, workers=1, consensus_runs=1) as enc:
        enc.warm_up()
        if args.quarantine_tests:  # curation's rule: keep every file, grade the seed-passing tests
            hidden = dict(family.tests)
        else:
            hidden = enclave_bench.passing_suite(enc, label, family.repo_files, family.tests, family.dependencies)
        left_out = sorted(set(family.tests) - set(hidden))
        family = dataclasses.replace(family, tests=hidden)
        seed_task = Task(task_id=f"seed-{label}", family=label, instruction="fix the bug",
                         repo_files=dict(family.repo_files), public_tests=(), hidden_tests=hidden,
                         reference_patch="", dependencies=family.dependencies)
        seed_run = enc.run_suite(seed_task, "", seed=0)
        seed_passed = sorted(t for t, o in seed_run.outcomes.items() if o == "passed")
        project = project_config.for_task(seed_task).job_fields()
        packages = top_packages(family.repo_files, project["pythonpath"])
        task_env = enc.task_env(seed_task)
        bnd = Boundary(sandbox, hidden, project, packages, task_env, timeout=60)
        try:
            cands = interleave_by_operator(single_candidates(family, per_operator=args.per_operator, seed=0))
            if args.only_file:
                cands = [c for c in cands if all(f.endswith(args.only_file) for f in c.files)]
            tasks, rows, tried = [], [], 0
            for cand in cands:
                if len(tasks) >= args.tasks or time.monotonic() - t_start > args.budget_s:
                    break
                state = cand.state(family)
                if cand.invalid_reason(family, state):
                    continue
                tried += 1
                task = Task(task_id=cand.task_id(family), family=label, instruction="fix the bug",
                            repo_files=state, public_tests=(), hidden_tests=hidden,
                            reference_patch=make_patch(state, family.repo_files), dependencies=family.dependencies)
                t = time.monotonic()
                run = enc.run_suite(task, "", seed=tried)  # == verify(task, "") with consensus 1,
                old_s = time.monotonic() - t               # and it names the failing tests
                f2p = tuple(t for t in seed_passed if run.outcomes.get(t) != "passed")
                if run.status != "ok" or not f2p:
                    continue  # the suite does not notice this bug: no task (curation's rule)
                task = task.with_(fail_to_pass=f2p, pass_to_pass=tuple(t for t in seed_passed if t not in f2p))
                old = enc.judge(run, task.graded_tests)[0]
                new = bnd.run(task.repo_files, "")
                new["passed"] = graded_pass(new, task)
                tasks.append(task)
                rows.append({"task": task.task_id, "operator": cand.operator, "old_failed": old != "none",
                             "old_reason": old, "new_failed": not new["passed"], "new_status": new["status"],
                             "old_s": old_s, "new_s": new["wall_s"], "new_outcomes": new.get("outcomes", {}),
                             "calls": (new.get("stats") or {}).get("calls")})
                print(f"{label} task {len(tasks):3d} {cand.operator:22s} old={old:14s} "
                      f"new={'failed' if not new['passed'] else 'PASSED'} ({new['status']}) "
                      f"{old_s * 1000:6.0f} / {new['wall_s'] * 1000:6.0f} ms", file=sys.stderr, flush=True)
            # The reference (every task's reference restores the same tree): ref runs per side.
            ref_old, ref_new, ref_failures = [], [], []
            for task in tasks[: args.ref_runs]:
                v = enc.verify(task, task.reference_patch, seed=1)
                ref_old.append(v.success)
                r = bnd.run(task.repo_files, task.reference_patch)
                r["passed"] = graded_pass(r, task)
                r["ids_unknown_to_enclave"] = len(set(r.get("outcomes", {})) - set(seed_run.outcomes))
                ref_new.append(r)
                ref_failures += r.get("failures", [])
            compat = None
            if ref_new:
                compat = set.intersection(*[{t for t, o in r.get("outcomes", {}).items() if o == "passed"}
                                            for r in ref_new])
            all_tests = set().union(*[set(r.get("outcomes", {})) for r in ref_new]) if ref_new else set()
            for row in rows:
                outs = row.pop("new_outcomes")
                row["new_failed_on_compatible"] = (compat is not None and
                                                   any(outs.get(t) != "passed" for t in compat))
            # Breakages: the failing tests of the prototype's reference runs, classified.
            seen, classes, examples = set(), Counter(), {}
            for f in ref_failures:
                if f["id"] in seen:
                    continue
                seen.add(f["id"])
                c = classify(hidden, f)
                classes[c] += 1
                examples.setdefault(c, []).append(f"{f['id']}: {f['msg'][:160]}".replace("\n", " | "))
            # Warm cost: interleaved, alternating reference / empty patch.
            timing = {"old": [], "new": []}
            for task in tasks[: args.timing_tasks]:
                enc.verify(task, task.reference_patch, seed=0)  # ship the task once
                for i in range(args.verdicts):
                    patch = task.reference_patch if i % 2 == 0 else ""
                    t = time.monotonic()
                    enc.verify(task, patch, seed=i)
                    timing["old"].append(time.monotonic() - t)
                    r = bnd.run(task.repo_files, patch)
                    timing["new"].append(r["wall_s"])
        finally:
            bnd.close()
    n = len(rows)
    n_tests = len(all_tests)
    res = {
        "library": label, "tasks": n, "candidates_tried": tried, "left_out_files": left_out,
        "hidden_tests": n_tests, "packages": packages,
        "old_ref_passed_share": (sum(ref_old) / len(ref_old)) if ref_old else None,
        "new_ref_passed_share": (sum(r["passed"] for r in ref_new) / len(ref_new)) if ref_new else None,
        "ref_runs": len(ref_old),
        "ref_crash": next((r.get("crash") for r in ref_new if r.get("crash")), None),
        "ref_ids_unknown_to_enclave": [r.get("ids_unknown_to_enclave") for r in ref_new],
        "new_ref_tests_passed": len(compat) if compat is not None else None,
        "old_unfixed_failed_share": sum(r["old_failed"] for r in rows) / n if n else None,
        "new_unfixed_failed_share": sum(r["new_failed"] for r in rows) / n if n else None,
        "new_unfixed_failed_on_compatible_share": sum(r["new_failed_on_compatible"] for r in rows) / n if n else None,
        "breakages": dict(classes), "breakage_examples": {k: v[:3] for k, v in examples.items()},
        "sweep_old_median_s": statistics.median([r["old_s"] for r in rows]) if rows else None,
        "sweep_new_median_s": statistics.median([r["new_s"] for r in rows]) if rows else None,
        "timing_old": summary(timing["old"]) if timing["old"] else None,
        "timing_new": summary(timing["new"]) if timing["new"] else None,
        "loadavg": round(os.getloadavg()[0], 2), "seconds": round(time.monotonic() - t_start, 1),
    }
    if timing["old"]:
        res["cost_ratio_median"] = round(res["timing_new"]["median_s"] / res["timing_old"]["median_s"], 2)
    return res


ALWAYS_EQUAL = """

class _AlwaysEqual:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __hash__(self):
        return 0


def _forge(fn):
    def forged(*args, **kwargs):
        return _AlwaysEqual()
    return forged


for _name in ("camelize", "dasherize", "humanize", "ordinal", "ordinalize", "parameterize", "pluralize",
              "singularize", "tableize", "titleize", "transliterate", "underscore"):
    globals()[_name] = _forge(globals()[_name])
"""


def attacks(args, sandbox) -> None:
    """The eq_override family on one inflection task: every public function of the unfixed
    package returns an object equal to everything (a patch the static policy lets through: it
    touches only the package's own source). Today's enclave, the prototype with strict
    equality (its default) and the prototype forwarding == to the code under test."""
    lock = load_lock()
    lib = next(lib for lib in lock.libraries if lib.name == "inflection")
    family = corpus_family(lib, source_dir(lib, CORPUS_CACHE))
    label = f"{lib.name}-{lib.version}"
    path = "inflection/__init__.py"
    with Enclave(backend=args.backend, limits=LIMITS, workers=1, consensus_runs=1) as enc:
        hidden = enclave_bench.passing_suite(enc, label, family.repo_files, family.tests, family.dependencies)
        family = dataclasses.replace(family, tests=hidden)
        cand = next(c for c in interleave_by_operator(single_candidates(family, per_operator=5, seed=0))
                    if not c.invalid_reason(family, c.state(family)))
        state = cand.state(family)
        seed_task = Task(task_id=f"seed-{label}", family=label, instruction="fix the bug",
                         repo_files=dict(family.repo_files), public_tests=(), hidden_tests=hidden,
                         reference_patch="", dependencies=family.dependencies)
        seed_run = enc.run_suite(seed_task, "", seed=0)
        graded = tuple(sorted(t for t, o in seed_run.outcomes.items() if o == "passed"))
        task = Task(task_id=cand.task_id(family), family=label, instruction="fix the bug", repo_files=state,
                    public_tests=(), hidden_tests=hidden, reference_patch=make_patch(state, family.repo_files),
                    dependencies=family.dependencies, pass_to_pass=graded)
        attack = make_patch(state, {**state, path: state[path] + ALWAYS_EQUAL})
        v = enc.verify(task, attack, seed=0)
        out = {"attack": "always_equal (every public function)", "today": f"{v.reason} {v.safety_flags}"}
        project = project_config.for_task(seed_task).job_fields()
        packages = top_packages(family.repo_files, project["pythonpath"])
        compat = None
        for eq in ("strict", "forward"):
            bnd = Boundary(sandbox, hidden, project, packages, None, timeout=LIMITS.wall_seconds, eq=eq)
            try:
                ref = bnd.run(state, task.reference_patch)
                compat = {t for t, o in ref.get("outcomes", {}).items() if o == "passed"}
                r = bnd.run(state, attack)
            finally:
                bnd.close()
            outs = r.get("outcomes", {})
            fooled = sum(outs.get(t) == "passed" for t in compat)
            out[f"prototype_{eq}"] = (f"{'passed' if graded_pass(r, task) else 'failed'} on the full suite; "
                                      f"{fooled}/{len(compat)} boundary-compatible tests pass "
                                      f"({'passed' if fooled == len(compat) else 'failed'} on that subset)")
        print(out, file=sys.stderr)
        emit({"bench": "enclave_boundary_attacks", **out})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="bwrap")
    ap.add_argument("--library", action="append", help="a data/real/corpus.toml library (repeatable)")
    ap.add_argument("--all", action="store_true", help="every library of data/real/corpus.toml")
    ap.add_argument("--tasks", type=int, default=50)
    ap.add_argument("--per-operator", type=int, default=40, help="candidates drawn per operator")
    ap.add_argument("--ref-runs", type=int, default=2)
    ap.add_argument("--timing-tasks", type=int, default=2)
    ap.add_argument("--verdicts", type=int, default=6, help="per side per timing task")
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop building tasks after this long")
    ap.add_argument("--quarantine-tests", action="store_true",
                    help="keep test files with tests failing on the seed; grade only the seed-passing tests")
    ap.add_argument("--only-file", help="only bugs in repo files ending so (e.g. recipes.py)")
    ap.add_argument("--attacks", action="store_true", help="run the eq_override attack demo instead")
    args = ap.parse_args()
    os.environ.setdefault("RLVR_WHEELHOUSE", str(CORPUS_CACHE / "wheelhouse"))
    if args.attacks:
        return attacks(args, get_sandbox(args.backend))
    names = [lib.name for lib in load_lock().libraries] if args.all else (args.library or [])
    if not names:
        raise SystemExit("--library NAME or --all")
    sandbox = get_sandbox(args.backend)
    for name in names:
        res = run_library(name, args, sandbox)
        print(f"{res['library']}: {res['tasks']} tasks; reference passed old {res['old_ref_passed_share']} "
              f"new {res['new_ref_passed_share']} ({res['new_ref_tests_passed']}/{res['hidden_tests']} tests pass "
              f"under the boundary); unfixed failed old {res['old_unfixed_failed_share']} new "
              f"{res['new_unfixed_failed_share']} (on the compatible subset "
              f"{res['new_unfixed_failed_on_compatible_share']}); cost ratio {res.get('cost_ratio_median')}; "
              f"breakages {res['breakages']}", file=sys.stderr)
        if res.get("ref_crash"):
            print(f"{res['library']}: the prototype's reference run did not finish: {res['ref_crash']}", file=sys.stderr)
        emit({"bench": "enclave_boundary", "backend": args.backend, **res})


if __name__ == "__main__":
    main()
