"""Data-parallel GRPO update under DeepSpeed on the CPU (gloo): two ranks started by torchrun,
each training its whole groups of the same recorded batch, take the one-process update of the
whole batch — same loss, same pre-clip gradient norm, same weights, same logged metrics —
for ZeRO 0 and 2 and for the `constant` (global G·L) and `token_mean` (global token count)
aggregations."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentkit import count_task, synthetic_groups, take_task, tiny_policy_dir
from grpokit import (FORCED_BUDGETS, SANDBOX, SCORING, fake_verifier, forced, recording_norms,
                     small_rollout)
from rlvr.agent.transcript import ChatCodec
from rlvr.engines.model_dir import load_policy
from rlvr.errors import ConfigError
from rlvr.train.backend import BackendParams, build_backend
from rlvr.train.grpo import train_grpo
from rlvr.train.grpo_batch import rank_groups
from rlvr.train.grpo_config import parse_grpo_params
from rlvr.train.grpo_update import train_on

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parents[1]

# 3 accepted groups (ranks hold 2 and 1: uneven shards, and rank 1 runs out of micro-batches
# first), one dropped group (its rows only feed the behaviour metrics), 2 mini-batches x 2
# epochs, one sequence per micro-batch, clipping on so a wrong gradient scale shows.
BASE = {"steps": 1, "group_size": 2, "groups_per_step": 3, "tasks_per_draw": 3,
        "max_draws": 1, "consensus_runs": 1, "learning_rate": 1e-2, "grad_clip": 0.004,
        "micro_batch_tokens": 60, "mini_batches": 1, "epochs": 2, "warmup_steps": 0}


def _groups(model) -> list[dict]:
    groups = synthetic_groups(model, n_groups=4, G=2, seed=3)
    for i, g in enumerate(groups):
        g["status"] = "accepted" if i < 3 else "identical_rewards"
    return groups


def test_rank_groups_partition_a_mini_batch_by_whole_groups():
    shards = [rank_groups([4, 5, 6], r, 2) for r in range(2)]
    assert shards == [[4, 6], [5]]
    assert rank_groups([4, 5, 6], 0, 1) == [4, 5, 6]
    assert rank_groups([7], 1, 2) == []      # a rank may hold no group of a mini-batch


def _launch(*args, nproc=2, timeout=600):
    """tests/grpo_rank_worker.py ARGS on `nproc` ranks under torchrun; fails with its output."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", RLVR_PROGRESS="0",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
         "--master-port", "0", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0",
         str(ROOT / "tests/grpo_rank_worker.py"), *map(str, args)],
        env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


CASES = [pytest.param(0, "constant", 1, id="zero0-constant"),
         pytest.param(2, "token_mean", 1, id="zero2-token_mean"),
         pytest.param(3, "constant", 2, id="zero3-constant-2minibatches"),
         pytest.param(2, "constant", 2, id="zero2-constant-2minibatches",
                      marks=pytest.mark.slow),
         pytest.param(0, "token_mean", 2, id="zero0-token_mean-2minibatches",
                      marks=pytest.mark.slow)]


@pytest.mark.parametrize("stage,aggregation,mini_batches", CASES)
def test_two_deepspeed_ranks_take_the_one_process_grpo_update(policy_dir, tmp_path, stage,
                                                              aggregation, mini_batches):
    kw = {**BASE, "mini_batches": mini_batches, "loss": {"loss_aggregation": aggregation}}
    if stage == 3:  # head chunks of 8 rows: the ranks' forwards need different numbers of
        kw["head_chunk_tokens"] = 8  # chunks, and must agree on as many head calls (gathers)
    model = load_policy(policy_dir).model
    model.train()
    groups = _groups(model)
    groups_file = tmp_path / "groups.json"
    groups_file.write_text(json.dumps(groups))
    params = parse_grpo_params(kw)
    backend = build_backend(model, BackendParams.of(params))
    norms = recording_norms(backend)
    want = train_on(model, backend, groups, params, SCORING, None, 0.0, 0)
    report = tmp_path / "report"
    report.mkdir()
    _launch("update", policy_dir, groups_file,
            json.dumps({**kw, "backend": "deepspeed", "zero_stage": stage}), report)
    one, two = (json.loads((report / f"rank{r}.json").read_text()) for r in (0, 1))
    assert one["metrics"] == two["metrics"]          # global numbers on every rank
    assert one["version"] == two["version"]          # every rank ends with the same weights
    got = one["metrics"]
    assert want["train/optimizer_steps"] == got["train/optimizer_steps"] == 2.0 * mini_batches
    if aggregation == "constant":                    # the global G·L, not a rank's
        assert got["train/loss_denominator"] == want["train/loss_denominator"]
    assert got["train/first_pass_ratio_dev"] == 0.0
    assert set(got) == set(want)
    # a clip fraction counts tokens: one whose ratio sits at a clip bound after the first
    # step may fall on either side of it in the two summation orders
    one_token = 1.5 / want["train/batch_policy_tokens"]
    for k, v in want.items():
        tol = one_token if k.startswith("train/clip_frac") else 1e-7
        assert got[k] == pytest.approx(v, rel=1e-5, abs=tol), k
    # AdamW is blind to a gradient's scale; the (pre-clip) norm is not: the ranks' average
    # must be the whole batch's gradient, not 1/world of it
    assert min(norms) > BASE["grad_clip"]            # clipping acted
    assert one["grad_norms"] == pytest.approx(norms, rel=1e-5) == two["grad_norms"]
    # the two sums differ in order only; the k-projection bias has a gradient that is 0 up to
    # rounding (softmax ignores a shift of every key), which AdamW's normalisation amplifies
    # to ~1e-5 x lr: hence a learning rate of 1e-2 for an absolute tolerance of 1e-6
    weights = torch.load(report / "weights.pt", weights_only=True)
    for name, a in model.state_dict().items():
        assert torch.allclose(a, weights[name], atol=1e-6, rtol=1e-5), name
    base = load_policy(policy_dir).model.state_dict()
    assert any(not torch.equal(base[n], w) for n, w in weights.items())  # the step moved them


LOOP = {"group_size": 2, "groups_per_step": 4, "tasks_per_draw": 2, "max_draws": 2,
        "consensus_runs": 1, "learning_rate": 1e-2}


@pytest.mark.parametrize("stage", [2, 3])
def test_the_loop_on_two_ranks_draws_and_trains_as_one_process(tmp_path, bwrap_sandbox, stage):
    """Two ranks (ZeRO 2, or 3: every parameter sharded) run step 1, are stopped, and resume
    from its checkpoint (every rank's optimizer partition) for step 2: the same groups,
    policy steps, curves and weights as one process's 2-step run. Rank 0 alone rolls out
    (under ZeRO-3 from its whole copy, sent the gathered weights after each update),
    verifies and logs."""
    base = tiny_policy_dir()
    tasks = [count_task(), take_task()]
    whole = train_grpo(base, tasks, parse_grpo_params({**LOOP, "steps": 2}),
                       small_rollout(**FORCED_BUDGETS), SANDBOX, tmp_path / "one-out",
                       tmp_path / "one-work", verifier=fake_verifier,
                       wrap_engine=forced(ChatCodec.from_model_dir(base)))
    assert whole.policy_step == 2
    ds = {**LOOP, "backend": "deepspeed", "zero_stage": stage}
    reports = []
    for steps in (1, 2):
        report = tmp_path / f"report{steps}"
        report.mkdir()
        _launch("loop", base, json.dumps({**ds, "steps": steps}), tmp_path / "ds-out",
                tmp_path / "ds-work", report)
        reports.append([json.loads((report / f"rank{r}.json").read_text()) for r in (0, 1)])
    ckpt = next((tmp_path / "ds-work").glob("*/checkpoints/step-000001"))
    assert (ckpt / "optimizer.pt").is_file() and (ckpt / "optimizer-rank1.pt").is_file()
    (a0, a1), (b0, b1) = reports
    assert b0["resumed_from"] == b1["resumed_from"] == 1
    assert a0["verifier_calls"] > 0 and a1["verifier_calls"] == b1["verifier_calls"] == 0
    assert (a0["logged"], b0["logged"], a1["logged"], b1["logged"]) == ([1], [2], [], [])
    key = lambda g: (g["step"], g["draw"], g["group_id"], g["status"], g["rewards"],  # noqa: E731
                     tuple(g["trajectory_ids"]))
    for rank in (b0, b1):                         # every rank holds the whole loop state
        assert [key(g) for g in rank["ledger"]] == [key(g) for g in whole.ledger]
        assert rank["policy_step"] == whole.policy_step
    assert b0["version"] == b1["version"]
    assert b0["curves"] == b1["curves"]
    assert len(b0["curves"]) == len(whole.curves) == 2
    for got, want in zip(b0["curves"], whole.curves):
        assert set(got) == set(want)
        for k, v in want.items():
            assert got[k] == pytest.approx(v, rel=1e-5, abs=1e-6), k
    weights = AutoModelForCausalLM.from_pretrained(tmp_path / "ds-out").state_dict()
    # AdamW moves an entry by up to ~lr a step whatever its gradient's size, so an entry
    # whose gradient is a sum of nearly cancelling terms carries their rounding (a different
    # order on two ranks) into the weights: seen up to 1.2e-5 after 2 steps of lr 1e-2 on the
    # tied embedding, so the bound is 1e-3 of the largest possible move (2 x lr)
    tol = 1e-3 * 2 * LOOP["learning_rate"]
    for name, a in whole.model.state_dict().items():
        assert torch.allclose(a, weights[name], atol=tol, rtol=0), name
    with pytest.raises(ConfigError, match="optimizer state of 2 rank"):   # one process
        train_grpo(base, tasks, parse_grpo_params({**ds, "steps": 3}),
                   small_rollout(**FORCED_BUDGETS), SANDBOX, tmp_path / "x",
                   tmp_path / "ds-work", verifier=fake_verifier)
