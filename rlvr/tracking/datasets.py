"""The MLflow dataset source of a pipeline artifact: its path inside the DVC repository.

MLflow's own local source classes are generated at import time and cannot be imported by
name, and resolving a bare path through its registry warns that two sources match. An
artifact of this pipeline is a file or directory under the repo root (a DVC out or dep),
so the source is that repo-relative path; the dataset's digest is its DVC md5.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from mlflow.data.dataset_source import DatasetSource


class PathDatasetSource(DatasetSource):
    def __init__(self, path: str):
        self.path = path

    @staticmethod
    def _get_source_type() -> str:
        return "dvc_path"

    def load(self, root: Path | str = ".") -> Path:
        """The artifact's path in a checkout rooted at `root` (what `dvc pull` restores)."""
        return Path(root) / self.path

    @staticmethod
    def _can_resolve(raw_source: Any) -> bool:
        return False  # never picked for arbitrary strings: built explicitly by the tracker

    @classmethod
    def _resolve(cls, raw_source: Any) -> "PathDatasetSource":
        return cls(str(raw_source))

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path}

    @classmethod
    def from_dict(cls, source_dict: dict[Any, Any]) -> "PathDatasetSource":
        return cls(source_dict["path"])
