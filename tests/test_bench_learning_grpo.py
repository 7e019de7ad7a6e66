"""bench/learning_grpo.py's choice of training tasks: a named pool is trained on exactly, an
id outside the split is a named error (a typo must not silently train on fewer tasks)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from agentkit import all_tasks
from rlvr.tasks.pool import save_tasks
from scriptkit import REPO, load_script


def _bench():
    return load_script("bench/learning_grpo.py")


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


def test_set_overrides_reach_the_checked_grpo_params():
    p = _bench().grpo_params(REPO / "params.yaml", ["epochs=4", "loss.loss_aggregation=seq_mean",
                                                    "loss.eps_high=0.2"])
    assert (p.epochs, p.loss.loss_aggregation, p.loss.eps_high) == (4, "seq_mean", 0.2)


@pytest.mark.parametrize("item, named", [("loss.no_such_knob=1", "no_such_knob"),
                                         ("epochs", "grpo.epochs"),
                                         ("loss.eps_high=0.1", "eps_high")])
def test_a_bad_set_override_is_named(item, named):
    with pytest.raises((SystemExit, Exception), match=named):
        _bench().grpo_params(REPO / "params.yaml", [item])


def test_evaluation_sets_are_the_pipeline_stages_sets(tmp_path):
    """bench/_common.evaluation_sets builds what stage `evaluate` builds from the same pool."""
    from bench._common import PIPELINE_TASKS, evaluation_sets
    from rlvr.evaluate.params import TierSizes
    from rlvr.evaluate.sets import build_sets
    from rlvr.tasks.pool import select_tasks

    tasks = all_tasks()
    half = len(tasks) // 2
    for name, part in zip(PIPELINE_TASKS, (tasks[:half], tasks[half:])):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        save_tasks(tmp_path / name, part)
    evalp = SimpleNamespace(seed=3, tasks_per_tier=TierSizes(2, 2, 2, 2))
    want = build_sets(select_tasks([tmp_path / n for n in PIPELINE_TASKS], "", 0, 3),
                      evalp.tasks_per_tier, 3)
    assert [s.task_ids for s in evaluation_sets(tmp_path, evalp)] == [s.task_ids for s in want]
    only = evaluation_sets(tmp_path, evalp, ["train"])
    assert [s.tier for s in only] == ["train"]
