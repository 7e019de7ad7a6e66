"""The task pool: a tasks Parquet artifact, read through its schema and data contract."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from rlvr.artifacts import schemas
from rlvr.artifacts.io import read_table, write_table
from rlvr.errors import UnknownTaskError
from rlvr.tasks.model import Task


def load_tasks(path: Path | str) -> list[Task]:
    table = read_table(path, schemas.TASKS, contract="tasks")
    return [Task.from_row(row) for row in table.to_pylist()]


def save_tasks(path: Path | str, tasks: Sequence[Task]) -> None:
    """Rows sorted by task_id so the same tasks give a byte-identical file."""
    rows = [t.to_row() for t in sorted(tasks, key=lambda t: t.task_id)]
    write_table(path, rows, schemas.TASKS, contract="tasks")


def get_task(tasks: Sequence[Task], task_id: str, where: Path | str) -> Task:
    for task in tasks:
        if task.task_id == task_id:
            return task
    raise UnknownTaskError(f"{where}: no task with id '{task_id}'")
