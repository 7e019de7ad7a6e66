"""Hand-authored tasks: the on-disk directory format users write their own tasks in.

    <task_id>/
      task.yaml          family: <name>            (required: the source repository / template)
                         instruction: <text>       (required: what the agent is told)
                         task_id: <id>             (optional, defaults to the directory name)
                         public_tests: [tests/]    (optional: repo paths/dirs shown to the agent)
                         provenance: {...}         (optional: free-form, kept verbatim)
                         dependencies: [attrs==23.2.0]  (optional: exact pins the tested code
                                                   needs; installed offline from the wheelhouse
                                                   into the sandbox's task layer, see
                                                   rlvr.sandbox.envs. Tasks of a family that pin
                                                   the same set share one cached environment)
      repo/              the repository at the BUGGY state, public tests included
      hidden_tests/      test_*.py — the hidden suite; never enters the agent's workspace
      reference.patch    unified diff (a/ b/ paths relative to repo/) that fixes the bug

A family's dependencies can be declared once, in a `families.yaml` beside the task
directories (`<family>: {dependencies: [name==version, ...]}`); each task of that family gets
them plus its own (a distribution pinned to two versions is an error).

FAIL_TO_PASS / PASS_TO_PASS are not written by hand: curation computes them by running the
hidden suite on the buggy and the fixed state (SPEC §1).
"""
from __future__ import annotations

from pathlib import Path

import yaml

from rlvr.errors import ConfigError, PatchFormatError, TaskFormatError
from rlvr.sandbox.envs import parse_dependencies
from rlvr.tasks.model import Task
from rlvr.tasks.patches import require_diff

TASK_FILE = "task.yaml"
FAMILIES_FILE = "families.yaml"
FAMILY_KEYS = {"dependencies"}
KNOWN_KEYS = {"task_id", "family", "instruction", "public_tests", "provenance", "dependencies"}
SKIP_PARTS = {"__pycache__", ".git", ".pytest_cache"}


def read_tree(root: Path) -> dict[str, str]:
    files: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_symlink():
            raise TaskFormatError(f"{path}: symlinks are not allowed in a task")
        if not path.is_file() or SKIP_PARTS & set(rel.parts) or path.suffix == ".pyc":
            continue
        try:
            files[rel.as_posix()] = path.read_text()
        except UnicodeDecodeError:
            raise TaskFormatError(f"{path}: not a UTF-8 text file") from None
    return files


def load_task_dir(task_dir: Path | str) -> Task:
    """Parse one task directory; TaskFormatError names the file and field at fault."""
    task_dir = Path(task_dir)
    meta_path = task_dir / TASK_FILE
    if not meta_path.is_file():
        raise TaskFormatError(f"{meta_path}: missing (every task directory needs one)")
    try:
        meta = yaml.safe_load(meta_path.read_text())
    except yaml.YAMLError as exc:
        raise TaskFormatError(f"{meta_path}: not valid YAML: {exc}") from None
    if not isinstance(meta, dict):
        raise TaskFormatError(f"{meta_path}: must be a mapping")
    unknown = sorted(set(meta) - KNOWN_KEYS)
    if unknown:
        raise TaskFormatError(f"{meta_path}: unknown field '{unknown[0]}'")
    for key in ("family", "instruction"):
        if not isinstance(meta.get(key), str) or not meta[key].strip():
            raise TaskFormatError(f"{meta_path}: field '{key}' is required (non-empty text)")
    task_id = str(meta.get("task_id") or task_dir.name)

    repo_dir = task_dir / "repo"
    if not repo_dir.is_dir():
        raise TaskFormatError(f"{repo_dir}: missing repository directory")
    repo_files = read_tree(repo_dir)
    if not any(p.endswith(".py") for p in repo_files):
        raise TaskFormatError(f"{repo_dir}: contains no Python source")

    hidden_dir = task_dir / "hidden_tests"
    hidden = read_tree(hidden_dir) if hidden_dir.is_dir() else {}
    if not any(Path(p).name.startswith("test_") and p.endswith(".py") for p in hidden):
        raise TaskFormatError(f"{hidden_dir}: missing or has no test_*.py files")

    ref_path = task_dir / "reference.patch"
    if not ref_path.is_file():
        raise TaskFormatError(f"{ref_path}: missing reference patch")
    reference = ref_path.read_text()
    if not reference.strip():
        raise TaskFormatError(f"{ref_path}: reference patch is empty")
    try:
        require_diff(reference, str(ref_path))
    except PatchFormatError as exc:
        raise TaskFormatError(str(exc)) from None

    public_spec = meta.get("public_tests", ["tests/"])
    if not isinstance(public_spec, list) or not all(isinstance(p, str) for p in public_spec):
        raise TaskFormatError(f"{meta_path}: field 'public_tests' must be a list of paths")
    public = tuple(p for p in repo_files if any(_under(p, spec) for spec in public_spec))
    provenance = meta.get("provenance") or {}
    if not isinstance(provenance, dict):
        raise TaskFormatError(f"{meta_path}: field 'provenance' must be a mapping")
    return Task(
        task_id=task_id,
        family=meta["family"].strip(),
        instruction=meta["instruction"].strip(),
        repo_files=repo_files,
        public_tests=public,
        hidden_tests=hidden,
        reference_patch=reference,
        source="authored",
        provenance={"source_dir": task_dir.name, **provenance},
        dependencies=_dependencies(meta.get("dependencies"), meta_path, task_dir.parent,
                                   meta["family"].strip()),
    )


def family_meta(source: Path, family: str) -> dict:
    """The entry of `family` in `source/families.yaml` ({} when there is none)."""
    path = Path(source) / FAMILIES_FILE
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise TaskFormatError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise TaskFormatError(f"{path}: must map each family name to a mapping")
    entry = data.get(family) or {}
    unknown = sorted(set(entry) - FAMILY_KEYS)
    if unknown:
        raise TaskFormatError(f"{path}: family '{family}': unknown field '{unknown[0]}'")
    return entry


def _dependencies(value, meta_path: Path, source: Path, family: str) -> tuple[str, ...]:
    """The task's pins plus its family's (families.yaml), canonical and sorted."""
    family_value = family_meta(source, family).get("dependencies")
    try:
        own = parse_dependencies(value, str(meta_path))
        inherited = parse_dependencies(family_value, f"{source / FAMILIES_FILE}: family '{family}'")
        return parse_dependencies([*inherited, *own], f"{meta_path} (with {FAMILIES_FILE})")
    except ConfigError as exc:
        raise TaskFormatError(str(exc)) from None


def _under(path: str, spec: str) -> bool:
    spec = spec.rstrip("/")
    return path == spec or path.startswith(spec + "/")


def discover(source: Path | str) -> list[Path]:
    """Task directories under `source` (each holds a task.yaml), sorted for determinism."""
    source = Path(source)
    if not source.is_dir():
        raise TaskFormatError(f"{source}: task source directory not found")
    if (source / TASK_FILE).is_file():
        return [source]
    dirs = sorted(p.parent for p in source.glob(f"*/{TASK_FILE}"))
    stray = sorted(p for p in source.iterdir() if p.is_dir() and not (p / TASK_FILE).exists()
                   and not p.name.startswith("."))
    if stray:
        raise TaskFormatError(f"{stray[0]}: not a task directory (missing {TASK_FILE})")
    return dirs
