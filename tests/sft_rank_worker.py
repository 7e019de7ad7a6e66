"""One rank of a data-parallel SFT run, started by `torchrun` from tests/test_sft_ranks.py:
trains the rows in ROWS with the params in PARAMS (JSON) and writes what this rank saw."""
from __future__ import annotations

import atexit
import json
import os
import sys
from pathlib import Path

import torch

from rlvr.config import parse
from rlvr.train import backend
from rlvr.train.sft import train_sft
from rlvr.train.sft_config import SFTParams


def main(base: str, rows_file: str, params_json: str, out: str, report_dir: str) -> None:
    torch.set_num_threads(1)
    backend.ZERO3_OPTIONS["stage3_param_persistence_threshold"] = 0  # shard every parameter
    # registered before the trainer opens its group, so it runs after the trainer's own
    # exit handler (atexit is last in, first out): the group must be closed by then
    rank = int(os.environ["RANK"])
    atexit.register(lambda: Path(report_dir, f"rank{rank}.exit").write_text(
        f"process group open at exit: {torch.distributed.is_initialized()}"))
    rows = json.loads(Path(rows_file).read_text())
    params = parse(SFTParams, json.loads(params_json), "sft")
    probed = []

    def on_eval(step, model):  # the rollout probe: rank 0 only, its numbers broadcast
        probed.append(step)
        return {"parse_error_rate": 0.25}

    norms = []
    result = train_sft(base, rows, rows[:2], params, out, on_eval=on_eval,
                       log=lambda step, m: norms.append(m["train/grad_norm"])
                       if "train/grad_norm" in m else None)
    Path(report_dir, f"rank{rank}.json").write_text(json.dumps({
        "train_loss": result.train_loss, "steps": result.steps, "probed": probed,
        "evals": result.evals, "padded_tokens": result.padded_tokens, "grad_norms": norms}))


if __name__ == "__main__":
    main(*sys.argv[1:])
