"""The SPEC §6 SFT stop signal: the parse-error rate of rollouts *sampled* from the model
being trained (teacher-forced loss says nothing about whether free-running tool calls parse).

Policy side only: the probe rolls the in-memory model out on a few fixed tasks in the policy
sandbox and counts invalid actions; nothing is verified (no enclave), so it is cheap enough
to run at every SFT evaluation.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from rlvr.agent.passport import parse_error_rate
from rlvr.agent.rollout import RolloutParams, roll_out
from rlvr.engines.model_dir import load_tokenizer
from rlvr.engines.torch_engine import TorchEngine
from rlvr.sandbox import get_sandbox
from rlvr.sandbox.params import SandboxParams
from rlvr.tasks.model import Task


def parse_error_probe(tasks: Sequence[Task], params: RolloutParams, sandbox_params: SandboxParams,
                      *, sandbox=None, tokenizer=None) -> Callable[[int, Any], dict[str, float]]:
    """`on_eval(step, model)` for `rlvr.train.sft.train_sft`: one rollout per task with the
    model as a torch engine (`params` gives budgets and decoding; its engine fields are
    ignored); each evaluation step is its own sampling round, so probes never replay. It
    samples without `decoding.grammar`: the signal is whether the *weights* have learned the
    format, which a grammar would hide (it forces every call to parse)."""
    tok = tokenizer or load_tokenizer(params.model_dir)
    box = sandbox or get_sandbox(sandbox_params.backend, **sandbox_params.options())
    probe = dataclasses.replace(params, engine="torch", group_size=1, policy_version="",
                                decoding=dataclasses.replace(params.decoding, grammar=""))

    def on_eval(step: int, model) -> dict[str, float]:
        engine = TorchEngine.from_model(model, tok, policy_version=f"sft-step{step}",
                                        policy_step=step)
        rows = roll_out(list(tasks), probe, sandbox_params, None, engine=engine, sandbox=box,
                        sampling_round=step)
        submitted = sum(r["stop_reason"] == "submitted" for r in rows)
        return {"parse_error_rate": parse_error_rate(rows),
                "submitted_rate": submitted / len(rows) if rows else 0.0}

    return on_eval
