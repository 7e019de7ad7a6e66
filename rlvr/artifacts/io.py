"""Parquet artifacts: explicit schema, data contract on write and on read, atomic writes.

A stage that dies half-way must leave the previous artifact intact, so every write goes to a
temporary file in the same directory and is renamed into place only once complete and valid.
A temporary name carries its writer's pid (`.<name>.<pid>.<random>`): a process killed with
SIGKILL cannot remove its own, so the next write of the same artifact removes those whose
writer is gone (`sweep_leftovers`), never a live writer's.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from rlvr.artifacts.contracts import check, check_file, record_validated
from rlvr.errors import ArtifactError


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_leftovers(path: Path | str) -> list[Path]:
    """Remove the temporary files / directories beside `path` left by writers of `path` that
    no longer run (killed before their rename); the paths removed."""
    path = Path(path)
    removed = []
    if not path.parent.is_dir():
        return removed
    for leftover in path.parent.glob(f".{path.name}.*"):
        pid = leftover.name[len(path.name) + 2:].split(".", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)
        removed.append(leftover)
    return removed


def temp_prefix(path: Path | str) -> str:
    """The prefix of this process's temporary names for `path` (see the module docstring)."""
    return f".{Path(path).name}.{os.getpid()}."


def temp_dir_beside(path: Path | str) -> Path:
    """A fresh temporary directory next to `path` to build it in (then `replace_dir`), after
    sweeping a killed writer's leftovers."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_leftovers(path)
    return Path(tempfile.mkdtemp(prefix=temp_prefix(path), dir=path.parent))


def replace_dir(new: Path, dest: Path) -> None:
    """Move the finished directory `new` onto `dest`, replacing it. Permissions are
    normalised first (temp dirs and files are created owner-only). Where the kernel can
    (Linux `renameat2(RENAME_EXCHANGE)`) the two trade places in one atomic step, so a kill
    at any moment leaves either the old or the new directory at `dest`; elsewhere two renames,
    whose window leaves the old one beside `dest` under its writer's pid (swept later)."""
    umask = os.umask(0)
    os.umask(umask)
    for path in [new, *new.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~umask)
    if dest.exists() and exchange_paths(new, dest):
        shutil.rmtree(new, ignore_errors=True)  # `new` now holds the old directory
        return
    old = None
    if dest.exists():
        old = dest.with_name(f"{temp_prefix(dest)}old")
        os.replace(dest, old)
    os.replace(new, dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def exchange_paths(a: Path, b: Path) -> bool:
    """Atomically swap two existing paths (Linux renameat2 RENAME_EXCHANGE); False where the
    system or file system does not offer it."""
    import ctypes
    import errno

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


@contextmanager
def atomic_path(path: Path | str, suffix: str = "") -> Iterator[Path]:
    """Yield a temp path beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_leftovers(path)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=suffix or ".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text(path: Path | str, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: Path | str, obj) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def as_table(rows: Iterable[dict] | pa.Table, schema: pa.Schema, where: str) -> pa.Table:
    """`rows` as a table of exactly `schema` (keys outside it are left out); a row that does
    not fit is an ArtifactError naming `where`."""
    if isinstance(rows, pa.Table):
        return rows.select(schema.names).cast(schema)
    try:
        return pa.Table.from_pylist(list(rows), schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError, TypeError) as exc:
        raise ArtifactError(f"{where}: rows do not fit the schema: {exc}") from None


def write_table(path: Path | str, rows: Iterable[dict] | pa.Table, schema: pa.Schema,
                contract: str | None = None) -> pa.Table:
    """Write rows as Parquet with exactly `schema`; check the data contract before the rename."""
    return write_tables([(path, rows, schema, contract)])[0]


def write_tables(parts: Iterable[tuple[Path | str, Iterable[dict] | pa.Table, pa.Schema,
                                       str | None]]) -> list[pa.Table]:
    """Several files of one stage (an artifact and its timings sidecar): every
    (path, rows, schema, contract) is built and checked before the first file is written,
    so a bad row in any of them leaves all the previous files in place."""
    tables = []
    for path, rows, schema, contract in parts:
        table = as_table(rows, schema, str(path))
        if contract:
            check(contract, table, where=str(path))
        tables.append((path, table, schema, contract))
    for path, table, schema, contract in tables:
        with atomic_path(path, suffix=".parquet") as tmp:
            # No timestamps or writer noise in the file: same rows -> byte-identical artifact.
            pq.write_table(table, tmp, compression="zstd", write_statistics=False,
                           store_schema=True)
            if contract:  # the checked table's bytes: a later read need not re-run GE
                record_validated(contract, tmp, schema)
    return [table for table, *_ in tables]


def timings_path(path: Path | str) -> Path:
    """Where the timings sidecar of artifact `path` lives: `x.parquet` -> `x.timings.parquet`
    (`schemas` "timings sidecars": the run-to-run-varying measurements of its rows)."""
    path = Path(path)
    stem = path.name[:-len(".parquet")] if path.name.endswith(".parquet") else path.name
    return path.with_name(f"{stem}.timings.parquet")


def read_table(path: Path | str, schema: pa.Schema, contract: str | None = None) -> pa.Table:
    """Read a Parquet artifact, insisting on `schema`'s columns and types."""
    path = Path(path)
    if path.is_dir():
        raise ArtifactError(f"{path}: is a directory, expected a Parquet file")
    if not path.is_file():
        raise ArtifactError(f"{path}: artifact not found")
    try:
        # One file, read directly: pq.read_table goes through pyarrow.dataset, whose import
        # (pandas included) costs more than reading a task pool.
        with pq.ParquetFile(path) as parquet:
            table = parquet.read()
    except (pa.ArrowInvalid, OSError) as exc:
        raise ArtifactError(f"{path}: not a readable Parquet file: {exc}") from None
    missing = [n for n in schema.names if n not in table.schema.names]
    if missing:
        raise ArtifactError(f"{path}: missing column(s) {missing}")
    table = table.select(schema.names)
    try:
        table = table.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
        raise ArtifactError(f"{path}: columns do not match the schema: {exc}") from None
    if contract:
        check_file(contract, table, path, schema)
    return table
