"""The task pool: a tasks Parquet artifact, read through its schema and data contract."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Sequence

from rlvr.artifacts import schemas
from rlvr.artifacts.io import read_table, write_table
from rlvr.errors import ArtifactError, UnknownTaskError
from rlvr.tasks.model import Task
from rlvr.tasks.splits import check_split_hygiene


def load_tasks(path: Path | str) -> list[Task]:
    table = read_table(path, schemas.TASKS, contract="tasks")
    return [Task.from_row(row) for row in table.to_pylist()]


def list_tasks(path: Path | str) -> list[dict]:
    """Summary rows (ids, family, split, source, test ids) without building Task records:
    the file is read and checked against its schema and contract exactly as by load_tasks;
    only the summary columns are converted to Python (repo files are most of the bytes)."""
    table = read_table(path, schemas.TASKS, contract="tasks")
    return table.select(["task_id", "family", "split", "source", "fail_to_pass",
                         "pass_to_pass"]).to_pylist()


def save_tasks(path: Path | str, tasks: Sequence[Task]) -> None:
    """Rows sorted by task_id so the same tasks give a byte-identical file."""
    rows = [t.to_row() for t in sorted(tasks, key=lambda t: t.task_id)]
    write_table(path, rows, schemas.TASKS, contract="tasks")


def rejections_path(out: Path | str) -> Path:
    """The rejection log lives beside the task file it belongs to."""
    out = Path(out)
    return out.with_name(out.name.replace(".parquet", "") + ".rejections.parquet")


def save_pool(out: Path | str, accepted: Sequence[Task], rejections: Sequence) -> None:
    """Accepted tasks (after the split-hygiene check) and the rejection log beside them:
    nothing a curation refused is dropped silently."""
    check_split_hygiene(accepted)
    save_tasks(out, accepted)
    write_table(rejections_path(out),
                [r.to_row() for r in sorted(rejections, key=lambda r: r.task_id)],
                schemas.REJECTIONS, contract="rejections")


def select_tasks(paths: Sequence[Path | str], split: str, max_tasks: int,
                 seed: int) -> list[Task]:
    """Tasks of `split` ("" = every split) from every file, in task-id order; a seeded
    sample of `max_tasks` of them when there are more (0 = all). A task id may appear in one
    file only: two pools that both define a task would make its rollouts ambiguous."""
    by_id: dict[str, Task] = {}
    for path in paths:
        for task in load_tasks(path):
            if task.task_id in by_id:
                raise ArtifactError(f"{path}: task id {task.task_id!r} also appears in an "
                                    "earlier tasks file")
            by_id[task.task_id] = task
    tasks = [by_id[k] for k in sorted(by_id) if not split or by_id[k].split == split]
    if max_tasks and len(tasks) > max_tasks:
        tasks = random.Random(seed).sample(tasks, max_tasks)
    return tasks


def get_task(tasks: Sequence[Task], task_id: str, where: Path | str) -> Task:
    for task in tasks:
        if task.task_id == task_id:
            return task
    raise UnknownTaskError(f"{where}: no task with id '{task_id}'")
