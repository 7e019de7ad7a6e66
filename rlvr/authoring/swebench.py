"""SWE-bench interoperability: import instances as tasks, export tasks as instances.

An instance names a repository, a `base_commit`, the gold `patch`, a `test_patch` that adds
or changes the tests that decide it, and the FAIL_TO_PASS / PASS_TO_PASS test ids (JSON-encoded
lists in the published files). Import needs the repositories as local git checkouts
(`repos_dir/<owner>__<name>`; no network): the buggy snapshot is the tree at `base_commit`
(Python sources, tests and build config), the hidden tests are the files `test_patch`
touches *after* applying it, with paths relative to the repository root (the hidden root is
the repo root: at verification they overlay the snapshot's versions), the reference is
`patch` and the instruction the `problem_statement`. Everything else an instance carries is
kept in the provenance (with `test_patch` verbatim) so export gives the instance back.

Environments: an instance may carry `dependencies`, exact pins `name==version` of what its
code and tests need (an rlvr field; SWE-bench's own harness keys environments by repo and
version instead). They become the task's `dependencies`, built offline into the sandbox's
task layer exactly as for an authored task (`rlvr.sandbox.envs`), and export writes them back.
"""
from __future__ import annotations

import io
import json
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Iterable, Sequence

from rlvr.artifacts.io import write_text
from rlvr.errors import ConfigError, PatchFormatError, TaskFormatError
from rlvr.sandbox.envs import parse_dependencies
from rlvr.tasks.model import Task, files_hash
from rlvr.tasks.patches import changed_paths, make_patch, require_diff
from rlvr.tasks.pool import load_tasks, save_tasks

SOURCE = "swebench"
REQUIRED = ("instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement",
            "FAIL_TO_PASS", "PASS_TO_PASS")
OPTIONAL = ("version", "environment_setup_commit", "created_at", "hints_text")
ENVIRONMENT = "dependencies"  # exact pins of the instance's environment (module docstring)
CONFIG_FILES = {"pyproject.toml", "setup.cfg", "setup.py", "tox.ini", "pytest.ini",
                "conftest.py", "requirements.txt", "MANIFEST.in"}
SNAPSHOT_SUFFIXES = (".py", ".pyi", ".cfg", ".toml", ".ini")
MAX_FILE_BYTES = 1 << 20


def repo_dir_name(repo: str) -> str:
    return repo.replace("/", "__")


# ---- reading instance files -----------------------------------------------------------------
def read_instances(path: Path | str) -> list[dict[str, Any]]:
    """Instances from a JSON list or a JSONL file; TaskFormatError names file and line."""
    path = Path(path)
    if not path.is_file():
        raise TaskFormatError(f"{path}: instance file not found")
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TaskFormatError(f"{path}: not valid JSON: {exc}") from None
        items = list(enumerate(data, 1))
        where = "item"
    else:
        items = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                items.append((lineno, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise TaskFormatError(f"{path}:{lineno}: not valid JSON: {exc}") from None
        where = "line"
    out = []
    for n, item in items:
        if not isinstance(item, dict):
            raise TaskFormatError(f"{path}: {where} {n}: an instance must be a JSON object")
        out.append(item)
    return out


def _field(inst: dict, key: str, where: str) -> Any:
    if key not in inst or inst[key] is None:
        raise TaskFormatError(f"{where}: missing required field '{key}'")
    return inst[key]


def _test_ids(inst: dict, key: str, where: str) -> tuple[str, ...]:
    value = _field(inst, key, where)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise TaskFormatError(f"{where}: field '{key}' is not a JSON-encoded list") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TaskFormatError(f"{where}: field '{key}' must be a list of test ids")
    return tuple(value)


def _git(repo: Path, *args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=check,
                          **kw)


def _snapshot(repo: Path, commit: str) -> dict[str, str]:
    """Python sources, tests and build config of the tree at `commit` (`git archive`, so the
    checkout itself is never touched)."""
    proc = _git(repo, "archive", "--format=tar", commit)
    files: dict[str, str] = {}
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        for member in tar.getmembers():
            if not member.isfile() or member.size > MAX_FILE_BYTES:
                continue
            name = member.name
            base = name.rsplit("/", 1)[-1]
            if not (name.endswith(SNAPSHOT_SUFFIXES) or base in CONFIG_FILES):
                continue
            data = tar.extractfile(member).read()
            try:
                files[name] = data.decode("utf-8")
            except UnicodeDecodeError:
                continue
    return files


def _apply(files: dict[str, str], patch: str, paths: Iterable[str], where: str
           ) -> dict[str, str]:
    """The given `paths` after applying `patch` to `files` (in a scratch directory)."""
    with tempfile.TemporaryDirectory(prefix="rlvr-swe-") as tmp:
        root = Path(tmp)
        for rel in paths:
            if rel in files:
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_text(files[rel])
        proc = subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], cwd=root,
                              input=patch.encode(), capture_output=True)
        if proc.returncode != 0:
            raise TaskFormatError(f"{where}: does not apply at base_commit: "
                                  f"{proc.stderr.decode(errors='replace').strip()}")
        return {rel: (root / rel).read_text() for rel in paths if (root / rel).is_file()}


def instance_to_task(inst: dict[str, Any], repos_dir: Path | str, *, split: str = "heldout",
                     where: str = "instance") -> Task:
    """One SWE-bench instance as a Task (split fixed by the caller: SWE-bench is usually an
    evaluation set, so the default keeps it out of training)."""
    instance_id = _field(inst, "instance_id", where)
    if not isinstance(instance_id, str) or not instance_id:
        raise TaskFormatError(f"{where}: field 'instance_id' must be a non-empty string")
    where = f"instance {instance_id}"
    values = {k: _field(inst, k, where) for k in REQUIRED}
    for key in ("repo", "base_commit", "patch", "test_patch", "problem_statement"):
        if not isinstance(values[key], str) or not values[key].strip():
            raise TaskFormatError(f"{where}: field '{key}' must be a non-empty string")
    for key in ("patch", "test_patch"):
        try:
            require_diff(values[key], f"{where}: field '{key}'")
        except PatchFormatError as exc:
            raise TaskFormatError(str(exc)) from None
    f2p = _test_ids(inst, "FAIL_TO_PASS", where)
    p2p = _test_ids(inst, "PASS_TO_PASS", where)
    repo = Path(repos_dir) / repo_dir_name(values["repo"])
    if not (repo / ".git").exists() and not (repo / "HEAD").is_file():
        raise TaskFormatError(f"{where}: field 'repo': no local git checkout at {repo}")
    commit = values["base_commit"]
    if _git(repo, "cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode != 0:
        raise TaskFormatError(f"{where}: field 'base_commit': {commit} is not a commit of {repo}")
    snapshot = _snapshot(repo, commit)
    test_paths = changed_paths(values["test_patch"])
    base = dict(snapshot)
    for rel in test_paths:  # test data the snapshot filter left out (fixtures, .json, ...)
        if rel not in base:
            shown = _git(repo, "show", f"{commit}:{rel}", check=False)
            if shown.returncode == 0:
                try:
                    base[rel] = shown.stdout.decode("utf-8")
                except UnicodeDecodeError:
                    raise TaskFormatError(f"{where}: field 'test_patch': {rel} is not a "
                                          "UTF-8 text file") from None
    hidden = _apply(base, values["test_patch"], test_paths, f"{where}: field 'test_patch'")
    if not hidden:
        raise TaskFormatError(f"{where}: field 'test_patch' leaves no test file")
    provenance = {
        "instance_id": instance_id,
        "repo": values["repo"],
        "base_commit": commit,
        "test_patch": values["test_patch"],
        "hidden_root": "repo",
        **{k: inst[k] for k in OPTIONAL if k in inst},
        "extra": {k: v for k, v in sorted(inst.items())
                  if k not in REQUIRED and k not in OPTIONAL and k != ENVIRONMENT},
    }
    try:
        dependencies = parse_dependencies(inst.get(ENVIRONMENT), where)
    except ConfigError as exc:
        raise TaskFormatError(str(exc)) from None
    return Task(task_id=instance_id, family=values["repo"],
                instruction=values["problem_statement"], repo_files=snapshot,
                public_tests=(), hidden_tests=hidden, reference_patch=values["patch"],
                split=split, source=SOURCE, fail_to_pass=f2p, pass_to_pass=p2p,
                provenance=provenance, dependencies=dependencies)


def import_swebench(path: Path | str, repos_dir: Path | str, *, split: str = "heldout"
                    ) -> list[Task]:
    """Every instance of a SWE-bench JSON / JSONL file as a Task (errors name the instance
    and the field)."""
    instances = read_instances(path)
    tasks, seen = [], set()
    for n, inst in enumerate(instances, 1):
        task = instance_to_task(inst, repos_dir, split=split, where=f"{path}: instance #{n}")
        if task.task_id in seen:
            raise TaskFormatError(f"{path}: instance {task.task_id}: duplicate instance_id")
        seen.add(task.task_id)
        tasks.append(task)
    return tasks


# ---- export ------------------------------------------------------------------------------
def task_to_instance(task: Task) -> dict[str, Any]:
    """A Task in SWE-bench's instance format. Imported tasks give their instance back; other
    tasks (authored, synthetic) map family -> repo, snapshot hash -> base_commit and their
    hidden suite -> a test_patch that adds it."""
    prov = task.provenance or {}
    if task.source == SOURCE and "base_commit" in prov:
        test_patch = prov.get("test_patch") or ""
        repo, commit = prov.get("repo", task.family), prov["base_commit"]
    else:
        test_patch = make_patch({}, task.hidden_tests)
        repo, commit = task.family, files_hash(task.repo_files)
    inst: dict[str, Any] = {
        "instance_id": task.task_id,
        "repo": repo,
        "base_commit": commit,
        "patch": task.reference_patch,
        "test_patch": test_patch,
        "problem_statement": task.instruction,
        "FAIL_TO_PASS": json.dumps(list(task.fail_to_pass)),
        "PASS_TO_PASS": json.dumps(list(task.pass_to_pass)),
    }
    for key in OPTIONAL:
        if key in prov:
            inst[key] = prov[key]
    inst.update(prov.get("extra", {}))
    if task.dependencies:
        inst[ENVIRONMENT] = list(task.dependencies)
    return inst


def export_swebench(tasks: Sequence[Task]) -> list[dict[str, Any]]:
    return [task_to_instance(t) for t in sorted(tasks, key=lambda t: t.task_id)]


def write_instances(path: Path | str, instances: list[dict[str, Any]]) -> None:
    """JSONL for a `.jsonl` path, a JSON list otherwise (atomic)."""
    path = Path(path)
    if path.suffix == ".jsonl":
        text = "".join(json.dumps(i, sort_keys=True) + "\n" for i in instances)
    else:
        text = json.dumps(instances, indent=2, sort_keys=True) + "\n"
    write_text(path, text)


# ---- CLI entry points (wired into `rlvr tasks ...` by rlvr/cli.py) -----------------------
def cmd_import_swebench(args) -> int:
    """`rlvr tasks import-swebench FILE --repos DIR --out FILE [--split S]`"""
    tasks = import_swebench(args.file, args.repos, split=getattr(args, "split", None) or "heldout")
    save_tasks(args.out, tasks)
    print(f"imported {len(tasks)} SWE-bench instance(s) -> {args.out}")
    return 0


def cmd_export_swebench(args) -> int:
    """`rlvr tasks export-swebench --tasks FILE --out FILE` (.jsonl or .json)"""
    instances = export_swebench(load_tasks(args.tasks))
    write_instances(args.out, instances)
    print(f"exported {len(instances)} task(s) -> {args.out}")
    return 0


def add_cli(subparsers) -> None:
    """Register `import-swebench` / `export-swebench` on an argparse subparsers object."""
    p = subparsers.add_parser("import-swebench", help="SWE-bench instances -> tasks Parquet")
    p.add_argument("file", type=Path, help="instances (.json list or .jsonl)")
    p.add_argument("--repos", type=Path, required=True,
                   help="directory of local git checkouts named <owner>__<name>")
    p.add_argument("--out", type=Path, required=True, help="tasks Parquet to write")
    p.add_argument("--split", choices=("train", "heldout", "regression"), default="heldout")
    p.set_defaults(func=cmd_import_swebench)
    p = subparsers.add_parser("export-swebench", help="tasks Parquet -> SWE-bench instances")
    p.add_argument("--tasks", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True, help=".jsonl or .json")
    p.set_defaults(func=cmd_export_swebench)
