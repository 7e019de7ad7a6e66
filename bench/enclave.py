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
hidden suite) with one injected operator-flip bug; patches alternate between the reference
fix and the empty patch, and warm and cold verdicts are interleaved so machine load hits
both. Because pytest's own per-test work is the same on both sides, the speed-up depends on
suite size: `--sizes` runs the comparison on hidden suites cut to about N tests (whole test
files, in name order); the headline is the size closest to 40.

    python bench/enclave.py [--backend bwrap|docker] [--seed-repo PATH] [--verdicts 20]
                            [--sizes 10,40,all]
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

from _common import DEFAULT_SEED_REPO, ROOT, bug_candidates, emit, make_task, read_seed_repo, summary

from rlvr.enclave import Enclave
from rlvr.sandbox import Limits, Mount, get_sandbox
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


def cold_args() -> list[str]:
    """The enclave's pytest arguments, pointed at the cold layout (conftests load normally)."""
    args = inside.pytest_args("/work/pytest.ini")
    out = []
    for a in args:
        if a == "--noconftest":
            continue
        out.append(a.replace(inside.HIDDEN, "/work/hidden").replace(inside.BASETEMP, "/work/tmp"))
    return out


def build_task(enclave: Enclave, seed_repo: Path) -> tuple[Task, dict[str, int]]:
    """The first operator flip the hidden suite notices (with its FAIL_TO_PASS and
    PASS_TO_PASS ids), and the number of tests per hidden file."""
    sources, tests = read_seed_repo(seed_repo)
    for path, buggy in bug_candidates(sources):
        task = make_task(f"bench-{seed_repo.name}", seed_repo.name, sources, path, buggy, tests)
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
    raise SystemExit(f"{seed_repo}: no single operator flip is detected by its tests")


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


def cold_verdict(sandbox, task: Task, patch: str) -> tuple[bool, float]:
    """Fresh copy + fresh sandbox + fresh pytest process: (passed, CPU of pytest + git)."""
    cpu = 0.0
    with tempfile.TemporaryDirectory(prefix="rlvr-cold-") as tmp:
        root = Path(tmp)
        for base, files in (("repo", task.repo_files), ("hidden", task.hidden_tests)):
            for rel, text in files.items():
                (root / base / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / base / rel).write_text(text)
        (root / "tmp").mkdir()
        (root / "pytest.ini").write_text(INI)
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
            [sandbox.python, "-s", "-c", COLD_MAIN, *cold_args()],
            mounts=[Mount(root, "/work", writable=True)], cwd="/work/repo",
            env={"PYTHONPATH": "/work/repo", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONHASHSEED": "0"},
            limits=LIMITS,
        )
        for line in result.stderr.splitlines():
            if line.startswith("RLVR_CPU "):
                cpu += float(line.split()[1])
        return result.exit_code == 0, cpu


def compare(enclave: Enclave, sandbox, task: Task, verdicts: int) -> dict:
    patches = [task.reference_patch, ""]
    warm, cold, warm_cpu, cold_cpu, agree = [], [], [], [], 0
    enclave.verify(task, task.reference_patch, seed=0)  # ship the task to the server once
    for i in range(verdicts):
        patch = patches[i % 2]
        t = time.monotonic()
        v = enclave.verify(task, patch, seed=i)
        warm.append(time.monotonic() - t)
        warm_cpu.append(v.resources["cpu_seconds"])
        t = time.monotonic()
        c, c_cpu = cold_verdict(sandbox, task, patch)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="bwrap")
    ap.add_argument("--seed-repo", type=Path, default=DEFAULT_SEED_REPO)
    ap.add_argument("--verdicts", type=int, default=20)
    ap.add_argument("--sizes", default="10,40,all", help="comma-separated suite sizes, 'all' = whole suite")
    args = ap.parse_args()
    if not shutil.which("git"):
        raise SystemExit("git is required")
    sizes = [None if s.strip() == "all" else int(s) for s in args.sizes.split(",")]

    sandbox = get_sandbox(args.backend)
    results = []
    with Enclave(backend=args.backend, limits=LIMITS, workers=1, consensus_runs=1) as enclave:
        t0 = time.monotonic()
        enclave.warm_up()
        startup = time.monotonic() - t0
        full, per_file = build_task(enclave, args.seed_repo)
        bug = next(line[6:] for line in full.reference_patch.splitlines() if line.startswith("--- a/"))
        print(f"seed repo {args.seed_repo.name}: {sum(per_file.values())} hidden tests in {len(per_file)} files, "
              f"injected bug in {bug}; backend {args.backend}, server start {startup:.2f}s", file=sys.stderr)
        for size in sizes:
            task = cut(full, per_file, size)
            n_tests = sum(n for f, n in per_file.items() if f in task.hidden_tests)
            r = compare(enclave, sandbox, task, args.verdicts)
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
    emit({"bench": "enclave", "backend": args.backend, "seed_repo": args.seed_repo.name,
          "verdicts_per_size": args.verdicts, "server_start_s": round(startup, 3),
          "headline_tests": head["tests"], "speedup_median": head["speedup_median"],
          "cpu_speedup_median": head["cpu_speedup_median"], "loadavg": round(load, 2), "sizes": results})


if __name__ == "__main__":
    main()
