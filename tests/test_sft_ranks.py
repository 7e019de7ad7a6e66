"""Data-parallel SFT under DeepSpeed on the CPU (gloo): two ranks started by torchrun take the
same update as one torch process on the whole batch; rank 0 alone probes and writes."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlvr.engines.model_dir import load_tokenizer
from rlvr.errors import ConfigError
from rlvr.train.batching import micro_batches
from rlvr.train.sft import batch_plan, rank_shard, train_sft
from rlvr.train.sft_config import EarlyStopParams, SFTParams
from sftkit import rows, transcript  # noqa: F401  (rows: the fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parents[1]

STEP = dict(max_steps=2, batch_size=6, warmup_steps=0, learning_rate=1e-2, eval_every=0,
            micro_batch_tokens=600, grad_clip=0.5, weight_decay=0.1,
            early_stop=EarlyStopParams(parse_error_stop=None))


def test_rank_shards_partition_the_batch_longest_first():
    lengths = [5, 9, 7, 3, 8, 1]
    shards = [rank_shard(lengths, range(6), r, 2) for r in range(2)]
    assert shards == [[1, 2, 3], [4, 0, 5]]        # 9, 7, 3 | 8, 5, 1
    assert sorted(shards[0] + shards[1]) == list(range(6))
    assert rank_shard(lengths, [4, 2], 0, 1) == [4, 2]


def _launch(policy_dir, rows_file, params, out, report, nproc=2):
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", RLVR_PROGRESS="0",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    payload = json.dumps({k: (dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v)
                          for k, v in params.items()})
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
         "--master-port", "0", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0",
         str(ROOT / "tests/sft_rank_worker.py"), str(policy_dir), str(rows_file), payload,
         str(out), str(report)],
        env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # every rank's process group was destroyed before interpreter teardown (rlvr.train.backend
    # `_close_group`): a gloo thread alive then can abort a rank that finished its work
    exits = [(Path(report) / f"rank{r}.exit").read_text() for r in range(nproc)]
    assert exits == ["process group open at exit: False"] * nproc


@pytest.mark.parametrize("stage, uneven", [(0, False), (2, False), (2, True), (3, False),
                                           (3, True)])
def test_two_deepspeed_ranks_take_the_one_process_update(policy_dir, rows, tmp_path, stage,
                                                         uneven):
    """uneven: the ranks' shards cut into different numbers of micro-batches, and under
    ZeRO-2 (a reduce at every backward) the rank with fewer still makes as many. ZeRO-3
    (every parameter sharded: each forward needs both ranks): the same update, the probe
    run by rank 0 on a whole copy of the gathered weights, the model written whole."""
    tok = load_tokenizer(policy_dir)
    if uneven:
        rows = [transcript(tok, i, turns=9 if i % 5 == 0 else 1) for i in range(10)]  # 459 | 67
    micro_tokens = 250 if uneven else STEP["micro_batch_tokens"]
    step = {**STEP, "micro_batch_tokens": micro_tokens}
    if stage == 3:  # the ranks' forwards need different numbers of head chunks (gathers)
        step["head_chunk_tokens"] = 16
    lengths = [len(r["token_ids"]) for r in rows]
    _, next_batch = batch_plan(len(rows), SFTParams(**step))
    counts = []
    for _ in range(STEP["max_steps"]):
        batch = next_batch()
        counts.append(len({len(micro_batches(lengths, rank_shard(lengths, batch, r, 2),
                                             micro_tokens)) for r in (0, 1)}) > 1)
    assert any(counts) == uneven, counts  # the case each point covers
    rows_file = tmp_path / "rows.json"
    rows_file.write_text(json.dumps(rows))
    report = tmp_path / "report"
    report.mkdir()
    norms = []
    ref = train_sft(policy_dir, rows, rows[:2], SFTParams(**step), tmp_path / "torch",
                    log=lambda step, m: norms.append(m["train/grad_norm"])
                    if "train/grad_norm" in m else None)
    _launch(policy_dir, rows_file, {**step, "backend": "deepspeed", "zero_stage": stage},
            tmp_path / "ds", report)
    one, two = (json.loads((report / f"rank{r}.json").read_text()) for r in (0, 1))
    assert one["probed"] == [2] and two["probed"] == []           # rank 0 alone probes ...
    assert two["evals"][-1]["eval/parse_error_rate"] == 0.25      # ... every rank gets it
    assert one["train_loss"] == pytest.approx(ref.train_loss, rel=1e-5) == two["train_loss"]
    assert one["padded_tokens"] == two["padded_tokens"] > 0
    # AdamW is blind to a gradient's scale; the (pre-clip) norm is not: the ranks' average
    # must be the whole batch's gradient, not 1/world of it
    assert one["grad_norms"] == pytest.approx(norms, rel=1e-4) == two["grad_norms"]
    want = AutoModelForCausalLM.from_pretrained(tmp_path / "torch").state_dict()
    got = AutoModelForCausalLM.from_pretrained(tmp_path / "ds").state_dict()
    for name, a in want.items():
        assert torch.allclose(a, got[name], atol=1e-6, rtol=1e-5), name


def test_a_rank_without_its_rendezvous_is_named(policy_dir, rows, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    for k in ("RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(ConfigError, match=r"WORLD_SIZE=2 but \['RANK', 'MASTER_ADDR'"):
        train_sft(policy_dir, rows, [], SFTParams(**STEP, backend="deepspeed"), tmp_path / "o")
