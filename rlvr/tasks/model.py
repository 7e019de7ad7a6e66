"""The task record (SPEC §1) and its Parquet row form.

A task's repository snapshot is the *buggy* state: package sources at the repo root plus the
public tests (paths listed in `public_tests`, read-only for the agent). Hidden tests live
apart (`hidden_tests`, paths relative to their own root) and never enter the workspace.
Test ids are pytest node ids: `test_x.py::test_y[param]` for hidden tests (relative to the
hidden root), `tests/test_x.py::test_y` for public ones.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any



@dataclass(frozen=True)
class Task:
    task_id: str
    family: str
    instruction: str
    repo_files: dict[str, str]
    public_tests: tuple[str, ...]
    hidden_tests: dict[str, str]
    reference_patch: str
    split: str = ""
    source: str = "authored"
    fail_to_pass: tuple[str, ...] = ()
    pass_to_pass: tuple[str, ...] = ()
    quarantined: tuple[tuple[str, str], ...] = ()
    provenance: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, Any] = field(default_factory=dict)
    # Python distributions the tested code needs, exact pins `name==version`, canonical and
    # sorted (rlvr.sandbox.envs.parse_dependencies): the sandbox's task layer. () = none.
    dependencies: tuple[str, ...] = ()

    # ---- derived -------------------------------------------------------------------------
    @property
    def quarantined_ids(self) -> frozenset[str]:
        return frozenset(t for t, _ in self.quarantined)

    @property
    def graded_tests(self) -> tuple[str, ...]:
        """The tests that decide a verdict: FAIL_TO_PASS + PASS_TO_PASS, minus quarantine."""
        q = self.quarantined_ids
        return tuple(t for t in (*self.fail_to_pass, *self.pass_to_pass) if t not in q)

    @property
    def source_files(self) -> dict[str, str]:
        """The repo snapshot without its public tests (what a patch may change)."""
        public = set(self.public_tests)
        return {p: c for p, c in self.repo_files.items() if p not in public}

    def hashes(self) -> dict[str, str]:
        return {
            "snapshot_hash": files_hash(self.repo_files),
            "hidden_hash": files_hash(self.hidden_tests),
            "reference_hash": hashlib.sha256(self.reference_patch.encode()).hexdigest(),
            "content_hash": content_hash(self),
        }

    def with_(self, **changes) -> "Task":
        return replace(self, **changes)

    # ---- row form ----------------------------------------------------------------------
    def to_row(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "family": self.family,
            "split": self.split,
            "source": self.source,
            "instruction": self.instruction,
            "repo_files": _files_to_rows(self.repo_files),
            "public_tests": list(self.public_tests),
            "hidden_tests": _files_to_rows(self.hidden_tests),
            "reference_patch": self.reference_patch,
            "fail_to_pass": list(self.fail_to_pass),
            "pass_to_pass": list(self.pass_to_pass),
            "quarantined": [{"test_id": t, "reason": r} for t, r in self.quarantined],
            "provenance": json.dumps(self.provenance, sort_keys=True),
            "checks": json.dumps(self.checks, sort_keys=True),
            "dependencies": list(self.dependencies),
            **self.hashes(),
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "Task":
        return cls(
            task_id=row["task_id"],
            family=row["family"],
            split=row["split"],
            source=row["source"],
            instruction=row["instruction"],
            repo_files={f["path"]: f["content"] for f in row["repo_files"]},
            public_tests=tuple(row["public_tests"]),
            hidden_tests={f["path"]: f["content"] for f in row["hidden_tests"]},
            reference_patch=row["reference_patch"],
            fail_to_pass=tuple(row["fail_to_pass"]),
            pass_to_pass=tuple(row["pass_to_pass"]),
            quarantined=tuple((q["test_id"], q["reason"]) for q in row["quarantined"]),
            provenance=json.loads(row["provenance"] or "{}"),
            checks=json.loads(row["checks"] or "{}"),
            dependencies=tuple(row.get("dependencies") or ()),
        )


def _files_to_rows(files: dict[str, str]) -> list[dict[str, str]]:
    return [{"path": p, "content": files[p]} for p in sorted(files)]


def files_hash(files: dict[str, str]) -> str:
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.encode() + b"\0" + files[path].encode() + b"\0")
    return h.hexdigest()


_COMMENT = re.compile(r"#[^\n]*")
_SPACE = re.compile(r"\s+")


def normalize_source(text: str) -> str:
    """Whitespace- and comment-insensitive form used for dedup (two tasks that differ only
    in formatting are the same task)."""
    return _SPACE.sub(" ", _COMMENT.sub("", text)).strip()


def content_hash(task: Task) -> str:
    """Dedup key: the normalised buggy sources + normalised reference fix."""
    h = hashlib.sha256()
    for path in sorted(task.source_files):
        h.update(path.encode() + b"\0" + normalize_source(task.source_files[path]).encode())
    h.update(b"\0ref\0" + normalize_source(task.reference_patch).encode())
    return h.hexdigest()
