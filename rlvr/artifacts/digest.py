"""The sha256 of a file's bytes, read in chunks. Its own module so that the data contracts
(`rlvr.artifacts.contracts`, whose validation record is keyed by it) need not import the
Parquet I/O that checks them; a rollout pins its tokenizer and the corpus its pinned
downloads by the same digest."""
from __future__ import annotations

import hashlib
from pathlib import Path


def file_sha256(path: Path | str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
