"""Crash safety of every DVC stage (issue 11): SIGKILL a stage at a seeded random point, then
rerun it; the rerun completes and writes what an uninterrupted run writes, and the killed run
leaves no partial artifact.

One tiny project is built in a temp dir (two hand-authored tasks, one seed family, a
tiny policy, budgets of a few steps) and the DAG runs there once, uninterrupted: each
stage's outputs are the reference. Then, for each stage of `dvc.yaml`, in a copy of that
project with the stage's outputs removed (what `dvc repro` does before a stage runs):

1. the stage's own `cmd` from dvc.yaml runs as a subprocess in its own process group and is
   SIGKILLed at a time drawn from a seeded RNG uniformly in [10%, 90%] of the reference
   run's duration (a scheduling choice, never a wall-clock assertion);
2. the next run resumes from what that left and is SIGKILLed in the middle of its first
   atomic write of an output: the temp is complete, the rename not done (`KILL_AT_RENAME`
   wraps `os.replace` / `os.rename`; deterministic where a timed kill rarely hits a write);
3. after each kill every declared output (outs, metrics, plots) is either absent or
   complete: an out that exists equals the reference (files byte-equal, directories file
   by file), a metrics file parses; nothing new beside an out but the dot-prefixed temp
   names of `rlvr.artifacts.io.atomic_path` / `replace_dir`; no process of the killed
   stage is still alive (a sandbox or enclave server that escaped its process group);
4. the stage reruns to completion, and its outs and plots equal the reference's.

The stages up to `verify` run by default (~2.5 min on a loaded 2-core box, the reference
runs included); `sft`, `grpo`, `evaluate` and `gate` train and evaluate models and are
marked slow (another ~2.5 min): `pytest -m slow tests/test_crash_safety.py`.

What a clock measures is excluded by design: `*.timings.parquet` sidecars (no out in
dvc.yaml) and the metrics files (they hold seconds; they are only required to parse).
"""
from __future__ import annotations

import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from rlvr.tracking.headline import DETAILS_DIR
from taskkit import FIXED_CORE, HIDDEN_TEST, write_family, write_task

ROOT = Path(__file__).resolve().parents[1]
CORPUS_LOCK = "data/real/corpus.toml"
DAG = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
SEED = 11        # the kill times (per stage: SEED + its index in dvc.yaml)
LOW, HIGH = 0.1, 0.9
# State a stage keeps for resumption (dvc.yaml: not an out): absent in a fresh trial.
WORK_STATE = {"rollout": ["artifacts/.rollout_parts"], "grpo": ["build/grpo"]}

# The held-out family's task: another bug (in `double`), its own hidden suite (split hygiene
# refuses a held-out task sharing its reference or hidden tests with a training one).
FIXED2 = FIXED_CORE
BUGGY2 = FIXED_CORE.replace("return 2 * x", "return 2 + x")
HIDDEN2 = HIDDEN_TEST + "\n\ndef test_double_negative():\n    assert double(-3) == -6\n"
INSTRUCTION2 = "double(4) returns 6; it should return twice its argument (expected 8)."


def tiny_params() -> dict:
    """params.yaml with every stage's budget cut to a few steps / tasks / runs."""
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    p["sandbox"]["workers"] = 1
    p["split"].update({"heldout_families": ["mini2"], "regression_families": [],
                       "heldout_function_share": 0.0})
    p["curate"].update({"reference_runs": 2, "max_mutants": 1})
    p["verify"]["consensus_runs"] = 1
    p["policy"].update({"vocab_size": 320, "hidden_size": 32, "layers": 1, "heads": 2,
                        "kv_heads": 1, "intermediate_size": 64, "synthetic_samples": 10})
    p["policy"]["pretrain"].update({"steps": 2, "episodes": 8, "batch_size": 2,
                                    "code_chunk_tokens": 64})
    p["synthesize"].update({"operators": ["comparison_flip", "wrong_return"], "per_operator": 2,
                            "combined": 0})
    p["synthesize"]["corpus"]["libraries"] = []
    p["rollout"].update({"workers": 1, "groups_per_wave": 2})
    # the scripted teacher needs room for its demonstrations; the tiny policy (grpo, which
    # shares this section) stops at its second unparsable turn
    p["rollout"]["budgets"].update({"max_turns": 10, "max_new_tokens_per_turn": 400,
                                    "max_new_tokens_per_episode": 3000,
                                    "max_invalid_actions": 2})
    # the 320-token vocabulary spells a demonstration in ~3.3 k tokens: room for all of them
    p["sft"].update({"epochs": 1, "max_steps": 2, "batch_size": 2, "warmup_steps": 0,
                     "eval_every": 0, "probe_tasks": 0, "max_seq_len": 8192})
    p["sft"]["early_stop"].update({"min_steps": 0})
    p["grpo"].update({"steps": 2, "group_size": 2, "groups_per_step": 1, "tasks_per_draw": 1,
                      "max_draws": 1, "epochs": 1, "consensus_runs": 1})
    p["evaluate"]["tasks_per_tier"] = {"train": 2, "heldout_function": 0, "heldout": 1,
                                       "regression": 0}
    p["evaluate"].update({"samples_per_task": 2, "workers": 1, "groups_per_wave": 2,
                          "consensus_runs": 1, "bootstrap": 50})
    p["evaluate"]["budgets"].update({"max_turns": 2, "max_new_tokens_per_turn": 16,
                                     "max_new_tokens_per_episode": 32})
    p["gate"].update({"bootstrap": 50, "target_tier": "heldout", "other_tiers": ["train"]})
    return p


def build_project(root: Path) -> None:
    """data/tasks (two authored tasks, one per family), data/seed_repos (one family), the
    tiny params.yaml: what the stages of dvc.yaml read, under their dvc.yaml paths."""
    write_task(root / "data/tasks", "mini-clamp")
    write_task(root / "data/tasks", "mini2-double", family="mini2", buggy=BUGGY2, fixed=FIXED2,
               hidden={"test_hidden.py": HIDDEN2}, instruction=INSTRUCTION2)
    write_family(root / "data/seed_repos", "minikit", package="minikit")
    write_corpus(root)
    (root / "params.yaml").write_text(yaml.safe_dump(tiny_params(), sort_keys=False))


def write_corpus(root: Path, name: str = "inflection") -> None:
    """A lock with one small library of the real corpus, its sdist already in the download
    cache (make test fetched it; else the stage downloads it): the `corpus` stage verifies
    and unpacks it."""
    import tomllib

    lib = next(entry for entry in tomllib.loads((ROOT / CORPUS_LOCK).read_text())["library"]
               if entry["name"] == name)
    sdist = lib["sdist"]
    text = (f'format = 1\n\n[[library]]\nname = "{name}"\nversion = "{lib["version"]}"\n'
            f'licence = "{lib["licence"]}"\nlicence_files = {json.dumps(lib["licence_files"])}\n'
            f'tests = {json.dumps(lib["tests"])}\nlayout = "{lib["layout"]}"\ndependencies = []\n'
            f'sdist = {{ url = "{sdist["url"]}", sha256 = "{sdist["sha256"]}" }}\n')
    (root / CORPUS_LOCK).parent.mkdir(parents=True, exist_ok=True)
    (root / CORPUS_LOCK).write_text(text)
    cached = ROOT / "data/real/.cache/sdists" / sdist["url"].rsplit("/", 1)[-1]
    if cached.is_file():
        (root / "data/real/.cache/sdists").mkdir(parents=True, exist_ok=True)
        shutil.copy(cached, root / "data/real/.cache/sdists" / cached.name)


@dataclass(frozen=True)
class Stage:
    name: str
    argv: list[str]
    outs: list[str]       # dvc.yaml outs: must equal the reference
    plots: list[str]      # dvc.yaml plots: must equal the reference
    metrics: list[str]    # dvc.yaml metrics and the stages' details files: must parse (seconds)

    @property
    def declared(self) -> list[str]:
        return [*self.outs, *self.plots, *self.metrics]

    def hooked(self) -> list[str]:
        """The same command through KILL_AT_RENAME (`python -c HOOK stages.X args...`)."""
        return [self.argv[0], "-c", KILL_AT_RENAME, *self.argv[2:]]


def _paths(entries) -> list[str]:
    return [e if isinstance(e, str) else next(iter(e)) for e in entries or []]


def stage(name: str) -> Stage:
    spec = DAG[name]
    argv = shlex.split(spec["cmd"])
    assert argv[0] == "scripts/python", argv
    assert argv[1] == "-m", argv
    outs = _paths(spec.get("outs"))
    details = [o for o in outs if o.startswith(f"{DETAILS_DIR}/")]  # every metric: seconds too
    return Stage(name, [sys.executable, *argv[1:]], [o for o in outs if o not in details],
                 _paths(spec.get("plots")), [*_paths(spec.get("metrics")), *details])


# Runs a stage module with os.replace / os.rename watched: the first rename onto one of the
# stage's declared outputs (or into a directory out) SIGKILLs the stage's whole process group
# instead: the kill lands in the middle of an atomic write, temp complete, rename not done.
# With RLVR_CRASH_LOG set instead, each such rename is only appended to that file.
KILL_AT_RENAME = """
import json, os, runpy, signal, sys
outs = [os.path.abspath(p) for p in json.loads(os.environ["RLVR_CRASH_OUTS"])]
log = os.environ.get("RLVR_CRASH_LOG")

def hits(dst):
    dst = os.path.abspath(os.fspath(dst))
    return any(dst == o or dst.startswith(o + os.sep) for o in outs)

def watched(real):
    def rename(src, dst, *a, **k):
        if hits(dst):
            if log is None:
                os.killpg(0, signal.SIGKILL)
            with open(log, "a") as fh:
                fh.write(os.path.relpath(os.path.abspath(os.fspath(dst))) + "\\n")
        return real(src, dst, *a, **k)
    return rename

os.replace, os.rename = watched(os.replace), watched(os.rename)
sys.argv = sys.argv[1:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


def env(tag: str, root: Path) -> dict[str, str]:
    return {**os.environ, "RLVR_TRACKING": "off", "RLVR_PROGRESS": "0", "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1", "HF_HUB_OFFLINE": "1",
            "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}", "RLVR_CRASH_TAG": tag}


def start(st: Stage, root: Path, tag: str, hook: str | None = None) -> subprocess.Popen:
    """hook None: the dvc.yaml command; "kill": killed at its first rename onto an out;
    "log": its renames onto outs logged to `<stage>.<tag>.renames`."""
    log = open(root / f"{st.name}.{tag}.log", "wb")
    extra = {}
    if hook:
        extra["RLVR_CRASH_OUTS"] = json.dumps(st.declared)
        if hook == "log":
            extra["RLVR_CRASH_LOG"] = str(root / f"{st.name}.{tag}.renames")
    try:
        return subprocess.Popen(st.hooked() if hook else st.argv, cwd=root,
                                env={**env(tag, root), **extra}, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log.close()


@dataclass
class Run:
    killed: bool          # SIGKILLed (else it ran to the end, exit 0)
    seconds: float


def run(st: Stage, root: Path, tag: str, *, kill_after: float | None = None,
        hook: str | None = None) -> Run:
    """Run the stage in `root`; SIGKILL its process group `kill_after` seconds in (hook
    "kill": it kills its group itself at its first rename onto an output)."""
    t0 = time.monotonic()
    proc = start(st, root, tag, hook)
    try:
        proc.wait(timeout=kill_after if kill_after is not None else 900)
    except subprocess.TimeoutExpired:
        if kill_after is None:
            raise
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return Run(True, time.monotonic() - t0)
    if hook == "kill" and proc.returncode == -signal.SIGKILL:
        return Run(True, time.monotonic() - t0)
    log = (root / f"{st.name}.{tag}.log").read_text()[-4000:]
    assert proc.returncode == 0, f"{st.name} ({tag}) exit {proc.returncode}:\n{log}"
    return Run(False, time.monotonic() - t0)


def survivors(tag: str) -> list[str]:
    """Processes still carrying the stage's RLVR_CRASH_TAG (children inherit the env)."""
    mark = f"RLVR_CRASH_TAG={tag}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if mark in (proc / "environ").read_bytes().split(b"\0"):
                found.append(f"{proc.name}: {(proc / 'cmdline').read_bytes()[:200]!r}")
        except OSError:
            continue
    return found


def digest(path: Path):
    """A file's bytes, or a directory's {relative path: bytes}; None if absent."""
    if path.is_dir():
        return {p.relative_to(path).as_posix(): p.read_bytes()
                for p in sorted(path.rglob("*")) if p.is_file()}
    return path.read_bytes() if path.is_file() else None


def differing(got, want) -> str:
    if isinstance(got, dict) and isinstance(want, dict):
        extra = sorted(set(got) - set(want))
        missing = sorted(set(want) - set(got))
        changed = sorted(k for k in set(got) & set(want) if got[k] != want[k])
        return f"extra files {extra}, missing {missing}, changed {changed}"
    return "bytes differ" if got is not None and want is not None else "one is absent"


def is_temp(name: str, outs: list[Path]) -> bool:
    """The temp names the atomic writers use beside an out: `.<name>.<random>...` (and
    `..<name>.random.<random>`: init_policy's temp of its pre-pretraining directory)."""
    return name.startswith(".") and any(f".{o.name}." in name for o in outs)


# ---- the reference run ------------------------------------------------------------------------
class Reference:
    """The DAG run once, uninterrupted, in one project dir, as far as a test needs it: each
    stage's duration and its renames onto its outputs (`<stage>.ref.renames`: the stage is
    run through KILL_AT_RENAME in log mode)."""

    def __init__(self, root: Path):
        self.root = root
        build_project(root)
        self.runs: dict[str, Run] = {}

    def upto(self, name: str) -> Run:
        for n in DAG:
            if n not in self.runs:
                self.runs[n] = run(stage(n), self.root, "ref", hook="log")
            if n == name:
                return self.runs[n]
        raise KeyError(name)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, bwrap_sandbox) -> Reference:
    root = tmp_path_factory.mktemp("crash") / "ref"
    root.mkdir()
    return Reference(root)


def trial_dir(ref: Path, st: Stage, dest: Path) -> Path:
    """A copy of the reference project without the stage's outputs and resumption state."""
    shutil.copytree(ref, dest, symlinks=True,
                    ignore=shutil.ignore_patterns("*.log", "*.renames", "mlflow.db"))
    for rel in [*st.outs, *st.plots, *st.metrics, *WORK_STATE.get(st.name, [])]:
        p = dest / rel
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    for out in st.outs:  # timing sidecars of the outs
        side = (dest / out).with_name(Path(out).name.replace(".parquet", ".timings.parquet"))
        if out.endswith(".parquet") and side.exists():
            side.unlink()
    return dest


def check_after_kill(st: Stage, root: Path, ref: Path) -> list[str]:
    """Defects in what the killed run left (empty: none)."""
    problems = []
    for rel in [*st.outs, *st.plots]:
        got = digest(root / rel)
        if got is not None and got != digest(ref / rel):
            problems.append(f"{rel}: partial after kill ({differing(got, digest(ref / rel))})")
    for rel in st.metrics:
        if (root / rel).exists():
            try:
                json.loads((root / rel).read_text())
            except ValueError as exc:
                problems.append(f"{rel}: unreadable after kill ({exc})")
    outs = [root / rel for rel in [*st.outs, *st.plots, *st.metrics]]
    for parent in {o.parent for o in outs}:
        for entry in parent.iterdir() if parent.is_dir() else []:
            mine = any(entry == o for o in outs) or is_temp(entry.name, outs)
            if not mine and not (ref / entry.relative_to(root)).exists() \
                    and not entry.name.endswith(".timings.parquet") \
                    and not any(entry == root / w for w in WORK_STATE.get(st.name, [])):
                problems.append(f"{entry.relative_to(root)}: left by the killed run, not an out "
                                "nor a temp name")
    return problems


def check_after_rerun(st: Stage, root: Path, ref: Path) -> list[str]:
    problems = []
    for rel in [*st.outs, *st.plots]:
        got, want = digest(root / rel), digest(ref / rel)
        if got != want:
            problems.append(f"{rel}: rerun after kill differs from the uninterrupted run "
                            f"({differing(got, want)})")
    for rel in st.metrics:
        json.loads((root / rel).read_text())
    return problems


# The stages after verify train and evaluate models: ~2.5 more minutes on a loaded 2-core box.
SLOW = {"sft", "grpo", "evaluate", "gate"}


def _param(name: str):
    return pytest.param(name, marks=[pytest.mark.slow] if name in SLOW else [])


def kill_check(st: Stage, root: Path, ref: Path, tag: str, **how) -> tuple[Run, list[str]]:
    """One killed run and the defects it left (partial outs, strays, live processes)."""
    killed = run(st, root, tag, **how)
    problems = check_after_kill(st, root, ref) if killed.killed else []
    time.sleep(0.5)  # an orphan re-parented to init is still there; a dying one is gone
    left = survivors(tag)
    problems += [f"process of the killed stage still alive: {p}" for p in left]
    for p in left:
        os.kill(int(p.split(":")[0]), signal.SIGKILL)
    return killed, problems


@pytest.mark.parametrize("name", [_param(n) for n in DAG])
def test_kill_9_then_rerun_gives_the_uninterrupted_outputs(name, reference, tmp_path):
    """SIGKILL at a seeded random point, then SIGKILL the next run in the middle of its
    first atomic write of an output; the run after that must finish with the reference
    outputs."""
    ref = reference.upto(name)
    renames = (reference.root / f"{name}.ref.renames").read_text().split()
    assert renames, f"{name}: the reference renamed nothing onto its outputs"
    st = stage(name)
    frac = random.Random(SEED + list(DAG).index(name)).uniform(LOW, HIGH)
    tag = uuid.uuid4().hex[:8]
    for attempt in range(3):  # a run faster than the reference may finish first: kill sooner
        root = trial_dir(reference.root, st, tmp_path / f"trial{attempt}")
        first, problems = kill_check(st, root, reference.root, f"kill-{name}-{tag}",
                                     kill_after=frac * ref.seconds)
        if first.killed:
            break
        frac /= 2
    assert first.killed, f"{name} finished before {frac:.0%} of the reference's {ref.seconds:.1f}s"
    mid, more = kill_check(st, root, reference.root, f"mid-{name}-{tag}", hook="kill")
    problems += more
    run(st, root, "rerun")
    problems += check_after_rerun(st, root, reference.root)
    assert not problems, (f"{name}: killed at {frac:.0%} of {ref.seconds:.1f}s, then "
                          f"{'at its first rename onto ' + renames[0] if mid.killed else 'not again'}"
                          ":\n" + "\n".join(problems))


# ---- the atomic-write primitives (fast; no stage run) ------------------------------------------
def test_a_killed_writers_leftovers_are_swept_by_the_next_write(tmp_path):
    from rlvr.artifacts.io import sweep_leftovers, temp_dir_beside, write_text

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (tmp_path / f".out.json.{dead}.abc.tmp").write_text("half")   # a SIGKILLed writer's
    (tmp_path / f".model.{dead}.xyz").mkdir()
    (tmp_path / f".model.{dead}.xyz" / "w.bin").write_bytes(b"half")
    live = tmp_path / f".out.json.{os.getppid()}.def.tmp"                   # a live writer's
    live.write_text("in flight")
    write_text(tmp_path / "out.json", "{}")
    assert {p.name for p in tmp_path.glob("*out.json*")} == {live.name, "out.json"}
    built = temp_dir_beside(tmp_path / "model")
    assert not (tmp_path / f".model.{dead}.xyz").exists() and built.name.startswith(
        f".model.{os.getpid()}.")
    assert sweep_leftovers(tmp_path / "out.json") == []               # the live one stays


def test_replace_dir_swaps_in_one_step_and_keeps_nothing_beside(tmp_path):
    from rlvr.artifacts.io import exchange_paths, replace_dir

    dest, new = tmp_path / "policy", tmp_path / ".policy.new"
    dest.mkdir()
    (dest / "w").write_text("old")
    new.mkdir()
    (new / "w").write_text("new")
    replace_dir(new, dest)
    assert (dest / "w").read_text() == "new" and sorted(tmp_path.iterdir()) == [dest]
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("a")
    if exchange_paths(a, b):                 # Linux: one atomic step, both names always exist
        assert (b / "x").read_text() == "a" and a.is_dir() and not (a / "x").exists()
