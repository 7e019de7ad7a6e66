"""bench/learning_grpo.py's choice of training tasks: a named pool is trained on exactly, an
id outside the split is a named error (a typo must not silently train on fewer tasks)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentkit import all_tasks
from rlvr.tasks.pool import save_tasks

REPO = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("learning_grpo", REPO / "bench" / "learning_grpo.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("learning_grpo", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def pool(tmp_path):
    path = tmp_path / "tasks.parquet"
    save_tasks(path, all_tasks())
    return [path]


PARAMS = SimpleNamespace(split="train", max_tasks=0, seed=0)


def test_healthy_preset_trains_on_exactly_the_named_pool(pool):
    tasks = _bench().training_tasks(pool, PARAMS, Path("unused"), "healthy", ["seq-take", "mini-count"])
    assert sorted(t.task_id for t in tasks) == ["mini-count", "seq-take"]


def test_without_names_the_healthy_preset_takes_the_split(pool):
    tasks = _bench().training_tasks(pool, PARAMS, Path("unused"), "healthy")
    assert sorted(t.task_id for t in tasks) == ["mini-count", "seq-take", "shop-price"]


def test_a_name_outside_the_split_is_a_named_error(pool):
    with pytest.raises(SystemExit, match="--train-tasks: not in split 'train': no-such-task"):
        _bench().training_tasks(pool, PARAMS, Path("unused"), "healthy", ["mini-count", "no-such-task"])
