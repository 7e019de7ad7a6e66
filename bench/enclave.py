"""Per-verdict wall time: warm enclave (fork-server) vs a cold baseline, in one process.

Warm: `Enclave.verify` with one run per verdict (consensus off, so both sides do the same
work): the sandbox and pytest start-up are paid once per worker; each verdict forks a child
that writes a pristine copy, applies the patch and runs the hidden suite under the sealed
runner.

Cold baseline, same isolation: per verdict a fresh temporary copy of the snapshot plus the
hidden tests on disk, `git apply --check` + `git apply`, a fresh sandbox of the same backend
and a fresh pytest process with the enclave's own pytest flags (plugin autoload off,
cacheprovider and the other plugins off, our ini and rootdir, plain asserts, explicit env);
its exit status is the verdict. Its CPU is what that pytest process reports for itself
(plus git), because bwrap's PID-1 reaper hides a sandbox tree's rusage.

The task is built from a seed repository (default data/seed_repos/caching; its tests/ is the
hidden suite) with one injected operator-flip bug. `--library NAME` builds it instead from a
pinned real library of data/real/corpus.toml (fetched by scripts/fetch_corpus.py): its package
sources and project config at the pinned version, its upstream test files unchanged as the
hidden suite, its declared dependency pins as the task env (both sides get the same layer), and
the first operator flip its suite notices. Upstream test files that do not pass on the
unmodified source in the sandbox are left out (and named on stderr) so the reference passes;
the cold side keeps pytest's debugging plugin there (see cold_args).
Patches alternate between the reference fix and the empty patch, and warm and cold verdicts
are interleaved so machine load hits both. Because pytest's own per-test work is the same on both sides, the speed-up depends on
suite size: `--sizes` runs the comparison on hidden suites cut to about N tests (whole test
files, in name order); the headline is the size closest to 40.

    python bench/enclave.py [--backend bwrap|docker] [--seed-repo PATH | --library NAME]
                            [--verdicts 20] [--sizes 10,40,all] [--against REV]

`--against REV` replaces the cold baseline by the enclave runner of another commit (its
`rlvr/enclave/_inside` tree, extracted with `git archive`, served by this commit's host
side): the warm cost of a runner change, old and new verdicts interleaved (which goes first
alternates), medians and the new/old ratio per size.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import (CORPUS_CACHE, DEFAULT_SEED_REPO, ROOT, bug_candidates, emit, make_task, read_library,
                     read_seed_repo, summary)

from rlvr.enclave import Enclave
from rlvr.sandbox import Limits, Mount, get_sandbox
from rlvr.tasks import project_config
from rlvr.tasks.model import Task

sys.path.insert(0, str(ROOT / "rlvr" / "enclave" / "_inside"))
import runner as inside  # noqa: E402  (for the enclave's exact pytest flags)

LIMITS = Limits(wall_seconds=60, cpu_seconds=60, memory_bytes=1 << 30, max_processes=64,
                max_file_bytes=16 << 20, output_bytes=64 << 10)
INI = "[pytest]\npython_files = test_*.py *_test.py\npython_classes = Test\npython_functions = test\n"
COLD_MAIN = (
    "import resource, sys, pytest\n"
    "rc = pytest.main(sys.argv[1:])\n"
    "u = resource.getrusage(resource.RUSAGE_SELF)\n"
    "sys.stderr.write('\\nRLVR_CPU %f\\n' % (u.ru_utime + u.ru_stime))\n"
    "sys.exit(rc)\n"
)


def cold_args(debugging: bool = False) -> list[str]:
    """The enclave's pytest arguments, pointed at the cold layout (conftests load normally).
    `debugging` keeps pytest's debugging plugin: its unittest.TestCase items call it on every
    test (`maybe_wrap_pytest_function_for_tracing`) and error out without it, so library
    suites (e.g. python-slugify's TestCase classes) need it; the enclave runs its own loop."""
    args = inside.pytest_args("/work/pytest.ini")
    out = []
    for i, a in enumerate(args):
        if a == "--noconftest":
            continue
        if debugging and (a == "no:debugging" or (a == "-p" and args[i + 1] == "no:debugging")):
            continue
        out.append(a.replace(inside.HIDDEN, "/work/hidden").replace(inside.BASETEMP, "/work/tmp"))
    return out


def passing_suite(enclave: Enclave, label: str, sources: dict[str, str], tests: dict[str, str],
                  deps: tuple[str, ...]) -> dict[str, str]:
    """The hidden files whose tests all pass on the unmodified source in the sandbox (with
    the support files, e.g. __init__.py); the others are named on stderr and left out, since
    a suite the reference fails cannot give a verdict."""
    any_py = next(p for p in sorted(sources) if p.endswith(".py"))
    clean = make_task(f"bench-{label}-clean", label, sources, any_py, sources[any_py], tests, deps)
    run = enclave.run_suite(clean, "", seed=0)
    if run.status != "ok" or not run.outcomes:
        raise SystemExit(f"{label}: the unmodified source does not run its suite ({run.status})")
    bad = sorted({t.split("::")[0] for t, o in run.outcomes.items() if o != "passed"})
    if bad:
        print(f"{label}: left out upstream test files not passing on the unmodified source: {', '.join(bad)}",
              file=sys.stderr)
    return {p: t for p, t in tests.items() if p not in bad}


def build_task(enclave: Enclave, label: str, sources: dict[str, str], tests: dict[str, str],
               deps: tuple[str, ...] = (), include_init: bool = False) -> tuple[Task, dict[str, int]]:
    """The first operator flip the hidden suite notices (with its FAIL_TO_PASS and
    PASS_TO_PASS ids), and the number of tests per hidden file."""
    for path, buggy in bug_candidates(sources, include_init=include_init):
        task = make_task(f"bench-{label}", label, sources, path, buggy, tests, deps)
        pristine = enclave.run_suite(task, "", seed=0)
        if pristine.status == "ok" and any(o != "passed" for o in pristine.outcomes.values()):
            fixed = enclave.run_suite(task, task.reference_patch, seed=0)
            if fixed.status == "ok" and fixed.outcomes and all(o == "passed" for o in fixed.outcomes.values()):
                per_file: dict[str, int] = {}
                for test_id in fixed.outcomes:
                    per_file[test_id.split("::")[0]] = per_file.get(test_id.split("::")[0], 0) + 1
                f2p = tuple(sorted(t for t, o in pristine.outcomes.items() if o != "passed"))
                p2p = tuple(sorted(t for t in fixed.outcomes if t not in f2p))
                return task.with_(fail_to_pass=f2p, pass_to_pass=p2p), per_file
    raise SystemExit(f"{label}: no single operator flip is detected by its tests")


def cut(task: Task, per_file: dict[str, int], size: int | None) -> Task:
    """Keep whole hidden test files (name order) until about `size` tests; the file with the
    reference's failing tests always stays so the empty patch still fails."""
    if size is None:
        return task
    failing = {t.split("::")[0] for t in task.fail_to_pass}
    keep, count = [], 0
    for name in sorted(per_file, key=lambda f: (f not in failing, f)):
        if count >= size:
            break
        keep.append(name)
        count += per_file[name]
    hidden = {p: t for p, t in task.hidden_tests.items() if not p.endswith(".py") or p in keep
              or not os.path.basename(p).startswith("test_")}
    return task.with_(hidden_tests=hidden, task_id=f"{task.task_id}-{count}",
                      fail_to_pass=tuple(t for t in task.fail_to_pass if t.split("::")[0] in keep),
                      pass_to_pass=tuple(t for t in task.pass_to_pass if t.split("::")[0] in keep))


def cold_verdict(sandbox, task: Task, patch: str, project: dict, task_env: Path | None = None,
                 debugging: bool = False) -> tuple[bool, float]:
    """Fresh copy + fresh sandbox + fresh pytest process: (passed, CPU of pytest + git).
    `project` (the task's project_config job fields, read once per task) is honoured as the
    enclave honours it: its markers registered, its import roots ahead of the repo;
    `task_env` is the task's dependency layer."""
    cpu = 0.0
    with tempfile.TemporaryDirectory(prefix="rlvr-cold-") as tmp:
        root = Path(tmp)
        for base, files in (("repo", task.repo_files), ("hidden", task.hidden_tests)):
            for rel, text in files.items():
                (root / base / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / base / rel).write_text(text)
        (root / "tmp").mkdir()
        (root / "pytest.ini").write_text(INI + "".join(
            ("markers =\n" if i == 0 else "") + f"    {m}\n" for i, m in enumerate(project["markers"])))
        if patch.strip():
            for args in (["apply", "--check"], ["apply"]):
                before = os.times()
                code = subprocess.run(["git", *args, "-"], input=patch.encode(), cwd=root / "repo",
                                      capture_output=True).returncode
                after = os.times()
                cpu += (after.children_user + after.children_system) - (before.children_user + before.children_system)
                if code:
                    return False, cpu
        result = sandbox.run(
            [sandbox.python, "-s", "-c", COLD_MAIN, *cold_args(debugging)],
            mounts=[Mount(root, "/work", writable=True)], cwd="/work/repo",
            env={"PYTHONPATH": ":".join([*(f"/work/repo/{p}" for p in project["pythonpath"]), "/work/repo"]),
                 "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONHASHSEED": "0"},
            limits=LIMITS, task_env=task_env,
        )
        for line in result.stderr.splitlines():
            if line.startswith("RLVR_CPU "):
                cpu += float(line.split()[1])
        return result.exit_code == 0, cpu


def compare(enclave: Enclave, sandbox, task: Task, verdicts: int, task_env: Path | None = None,
            debugging: bool = False) -> dict:
    patches = [task.reference_patch, ""]
    warm, cold, warm_cpu, cold_cpu, agree = [], [], [], [], 0
    enclave.verify(task, task.reference_patch, seed=0)  # ship the task to the server once
    project = project_config.for_task(task).job_fields()
    for i in range(verdicts):
        patch = patches[i % 2]
        t = time.monotonic()
        v = enclave.verify(task, patch, seed=i)
        warm.append(time.monotonic() - t)
        warm_cpu.append(v.resources["cpu_seconds"])
        t = time.monotonic()
        c, c_cpu = cold_verdict(sandbox, task, patch, project, task_env, debugging)
        cold.append(time.monotonic() - t)
        cold_cpu.append(c_cpu)
        agree += v.success == c
        if v.success != (patch == task.reference_patch):
            raise SystemExit(f"verdict {i}: enclave said {v.success} ({v.reason}) on {task.task_id}")
    ws, cs, wc, cc = summary(warm), summary(cold), summary(warm_cpu), summary(cold_cpu)
    return {"task": task.task_id, "warm": ws, "cold": cs, "warm_cpu": wc, "cold_cpu": cc,
            "speedup_median": round(cs["median_s"] / ws["median_s"], 2),
            "cpu_speedup_median": round(cc["median_s"] / wc["median_s"], 2),
            "agreement": agree / verdicts}


def runner_tree(rev: str, into: Path) -> Path:
    """`rev`'s rlvr/enclave/_inside tree, extracted under `into` (readable in the sandbox)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "rlvr/enclave/_inside"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    tree = into / "rlvr" / "enclave" / "_inside"
    for path in [into, *into.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return tree


def compare_runners(new: Enclave, old: Enclave, task: Task, verdicts: int) -> dict:
    """Warm verdicts of this commit's runner and another's on the same task, interleaved."""
    patches = [task.reference_patch, ""]
    wall: dict[str, list[float]] = {"new": [], "old": []}
    cpu: dict[str, list[float]] = {"new": [], "old": []}
    for enc in (new, old):
        enc.verify(task, task.reference_patch, seed=0)  # ship the task to each server once
    for i in range(verdicts):
        patch = patches[i % 2]
        order = (("new", new), ("old", old)) if i % 4 < 2 else (("old", old), ("new", new))
        for side, enc in order:
            t = time.monotonic()
            v = enc.verify(task, patch, seed=i)
            wall[side].append(time.monotonic() - t)
            cpu[side].append(v.resources["cpu_seconds"])
            if v.success != (patch == task.reference_patch):
                raise SystemExit(f"verdict {i} ({side} runner): {v.success} ({v.reason}) on {task.task_id}")
    ws, os_, wc, oc = summary(wall["new"]), summary(wall["old"]), summary(cpu["new"]), summary(cpu["old"])
    return {"task": task.task_id, "new": ws, "old": os_, "new_cpu": wc, "old_cpu": oc,
            "ratio_median": round(ws["median_s"] / os_["median_s"], 3),
            "cpu_ratio_median": round(wc["median_s"] / oc["median_s"], 3)}


def against_main(args, sizes) -> None:
    """--against REV: this commit's runner vs REV's, warm, on every size."""
    results = []
    with tempfile.TemporaryDirectory(prefix="rlvr-runner-") as tmp, \
            Enclave(backend=args.backend, limits=LIMITS, workers=1, consensus_runs=1) as new, \
            Enclave(backend=args.backend, limits=LIMITS, workers=1, consensus_runs=1) as old:
        Path(tmp).chmod(0o755)
        old.inside_dir = runner_tree(args.against, Path(tmp))
        full, per_file, label = bench_task(new, args)
        seen = set()
        for size in sizes:
            task = cut(full, per_file, size)
            if frozenset(task.hidden_tests) in seen:
                continue
            seen.add(frozenset(task.hidden_tests))
            r = compare_runners(new, old, task, args.verdicts)
            r["tests"] = sum(n for f, n in per_file.items() if f in task.hidden_tests)
            results.append(r)
            print(f"{r['tests']:4d} tests: new median {r['new']['median_s'] * 1000:6.1f} ms, old "
                  f"{r['old']['median_s'] * 1000:6.1f} ms -> x{r['ratio_median']:.3f} wall, "
                  f"x{r['cpu_ratio_median']:.3f} CPU", file=sys.stderr)
    emit({"bench": "enclave_runner", "backend": args.backend, "against": args.against, "task": label,
          "verdicts_per_size": args.verdicts, "loadavg": round(os.getloadavg()[0], 2), "sizes": results})


def bench_task(enclave: Enclave, args) -> tuple[Task, dict[str, int], str]:
    """The benchmark task (a real library's or the seed repo's) and its tests per file."""
    if args.library:
        lib = read_library(args.library)
        hidden = passing_suite(enclave, lib.label, lib.sources, lib.tests, lib.dependencies)
        full, per_file = build_task(enclave, lib.label, lib.sources, hidden, lib.dependencies, include_init=True)
        return full, per_file, lib.label
    sources, tests = read_seed_repo(args.seed_repo)
    full, per_file = build_task(enclave, args.seed_repo.name, sources, tests)
    return full, per_file, args.seed_repo.name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="bwrap")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--seed-repo", type=Path, default=DEFAULT_SEED_REPO)
    src.add_argument("--library", help="a data/real/corpus.toml library name, e.g. python-slugify")
    ap.add_argument("--verdicts", type=int, default=20)
    ap.add_argument("--sizes", default="10,40,all", help="comma-separated suite sizes, 'all' = whole suite")
    ap.add_argument("--against", metavar="REV", help="compare with REV's enclave runner instead of a cold pytest")
    args = ap.parse_args()
    if not shutil.which("git"):
        raise SystemExit("git is required")
    sizes = [None if s.strip() == "all" else int(s) for s in args.sizes.split(",")]

    if args.library:  # the task env is built offline from the corpus wheelhouse
        os.environ.setdefault("RLVR_WHEELHOUSE", str(CORPUS_CACHE / "wheelhouse"))
    if args.against:
        against_main(args, sizes)
        return
    sandbox = get_sandbox(args.backend)
    results = []
    with Enclave(backend=args.backend, limits=LIMITS, workers=1, consensus_runs=1) as enclave:
        t0 = time.monotonic()
        enclave.warm_up()
        startup = time.monotonic() - t0
        if args.library:
            lib = read_library(args.library)
            label, kind = lib.label, "library"
            hidden = passing_suite(enclave, label, lib.sources, lib.tests, lib.dependencies)
            extra = {"left_out": sorted(set(lib.tests) - set(hidden)), "dependencies": list(lib.dependencies)}
            full, per_file = build_task(enclave, label, lib.sources, hidden, lib.dependencies, include_init=True)
        else:
            sources, tests = read_seed_repo(args.seed_repo)
            label, kind, extra = args.seed_repo.name, "seed repo", {}
            full, per_file = build_task(enclave, label, sources, tests)
        task_env = enclave.task_env(full)
        bug_lines = [line for line in full.reference_patch.splitlines() if line[:1] in "+-"
                     and not line.startswith(("---", "+++"))]
        bug = next(line[6:] for line in full.reference_patch.splitlines() if line.startswith("--- a/"))
        flip = " -> ".join(b[1:].strip() for b in reversed(bug_lines))  # the patch goes buggy -> fixed
        print(f"{kind} {label}: {sum(per_file.values())} hidden tests in {len(per_file)} files, "
              f"injected bug in {bug} ({flip}); backend {args.backend}, server start {startup:.2f}s",
              file=sys.stderr)
        seen = set()
        for size in sizes:
            task = cut(full, per_file, size)
            if frozenset(task.hidden_tests) in seen:  # a cut equal to one already measured
                continue
            seen.add(frozenset(task.hidden_tests))
            n_tests = sum(n for f, n in per_file.items() if f in task.hidden_tests)
            r = compare(enclave, sandbox, task, args.verdicts, task_env, debugging=bool(args.library))
            r["tests"] = n_tests
            results.append(r)
            print(f"{n_tests:4d} tests: warm median {r['warm']['median_s'] * 1000:6.1f} ms (p90 "
                  f"{r['warm']['p90_s'] * 1000:6.1f})  cold median {r['cold']['median_s'] * 1000:7.1f} ms (p90 "
                  f"{r['cold']['p90_s'] * 1000:7.1f})  -> {r['speedup_median']:.1f}x wall, "
                  f"{r['cpu_speedup_median']:.1f}x CPU ({r['warm_cpu']['median_s'] * 1000:.0f} vs "
                  f"{r['cold_cpu']['median_s'] * 1000:.0f} ms); agreement {r['agreement']:.0%}")
    head = min(results, key=lambda r: abs(r["tests"] - 40))
    load = os.getloadavg()[0]
    print(f"headline (~40 tests): {head['speedup_median']:.1f}x median wall speed-up; "
          f"load average {load:.1f} on {os.cpu_count()} CPUs")
    emit({"bench": "enclave", "backend": args.backend, ("library" if args.library else "seed_repo"): label,
          "verdicts_per_size": args.verdicts, "server_start_s": round(startup, 3),
          "headline_tests": head["tests"], "speedup_median": head["speedup_median"],
          "cpu_speedup_median": head["cpu_speedup_median"], "loadavg": round(load, 2), "sizes": results,
          **({"bug": f"{bug}: {flip}", **extra} if args.library else {})})


if __name__ == "__main__":
    main()
