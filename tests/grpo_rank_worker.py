"""One rank of a data-parallel GRPO run, started by `torchrun` from tests/test_grpo_ranks.py.

`update BASE GROUPS PARAMS REPORT`: one loop step's training half (`train_on`: behaviour
metrics + `update_policy`) on the recorded groups in GROUPS (JSON) with the params in PARAMS
(JSON); writes what this rank saw (metrics, pre-clip grad norms, a hash of its weights; rank
0 also the weights).
`loop BASE PARAMS OUT WORK REPORT`: the online loop (`train_grpo`) on agentkit's two tiny
tasks with grpokit's forced-fix engine and fake verifier; writes this rank's ledger,
curves, policy step, how often it called the verifier and the log callback.
`fleet BASE PARAMS OUT WORK REPORT SANDBOX`: the loop verified by the real enclave on the
sandbox params SANDBOX (JSON), with the passports' sampling servers in the report
(tests/test_grpo_fleet.py)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from agentkit import count_task, take_task
from grpokit import (FORCED_BUDGETS, SANDBOX, SCORING, fake_verifier, forced, recording_norms,
                     small_rollout, verifiable)
from rlvr.agent.transcript import ChatCodec
from rlvr.engines.model_dir import load_policy
from rlvr.train import backend as backend_mod
from rlvr.train.backend import BackendParams, build_backend
from rlvr.train.grpo import train_grpo
from rlvr.train.grpo_checkpoint import state_version
from rlvr.train.grpo_config import parse_grpo_params
from rlvr.train.grpo_update import train_on

def update(base: str, groups_file: str, params_json: str, report_dir: str) -> None:
    torch.set_num_threads(1)
    backend_mod.ZERO3_OPTIONS["stage3_param_persistence_threshold"] = 0  # shard every one
    rank = int(os.environ["RANK"])
    groups = json.loads(Path(groups_file).read_text())
    params = parse_grpo_params(json.loads(params_json))
    model = load_policy(base).model
    model.train()
    backend = build_backend(model, BackendParams.of(params))
    assert backend.world == int(os.environ["WORLD_SIZE"]) and backend.rank == rank
    norms = recording_norms(backend)
    metrics = train_on(model, backend, groups, params, SCORING, None, 0.0, 0)
    with backend.full_weights():  # (ZeRO-3: gathered from the ranks' shards)
        version = state_version(model)
        if rank == 0:
            torch.save({k: v.clone() for k, v in model.state_dict().items()},
                       Path(report_dir, "weights.pt"))
    Path(report_dir, f"rank{rank}.json").write_text(json.dumps({
        "metrics": metrics, "grad_norms": norms, "version": version}))
    backend.finish()  # no rank tears its group down while rank 0 still writes


def loop(base: str, params_json: str, out: str, work: str, report_dir: str) -> None:
    torch.set_num_threads(1)
    backend_mod.ZERO3_OPTIONS["stage3_param_persistence_threshold"] = 0  # shard every one
    rank = int(os.environ["RANK"])
    params = parse_grpo_params(json.loads(params_json))
    calls, logged = [], []

    def verifier(tasks, patches):
        calls.append(len(patches))
        return fake_verifier(tasks, patches)

    result = train_grpo(base, [count_task(), take_task()], params,
                        small_rollout(**FORCED_BUDGETS), SANDBOX, out, work, verifier=verifier,
                        wrap_engine=forced(ChatCodec.from_model_dir(base)),
                        log=lambda step, m: logged.append(step))
    Path(report_dir, f"rank{rank}.json").write_text(json.dumps({
        "ledger": result.ledger, "curves": result.curves, "policy_step": result.policy_step,
        "resumed_from": result.resumed_from, "verifier_calls": len(calls), "logged": logged,
        "version": result.policy_version}))  # (hashed from the gathered weights)


def sampled_by(work: str) -> dict[str, list]:
    """trajectory id -> (policy step, the servers that sampled its turns) from the loop's
    rollout shards under WORK (the passports)."""
    import pyarrow.parquet as pq

    out = {}
    for shard in sorted(Path(work).rglob("rollouts/**/*.parquet")):
        for row in pq.read_table(shard, columns=["trajectory_id", "policy_step",
                                                 "turns"]).to_pylist():
            out[row["trajectory_id"]] = [row["policy_step"],
                                         sorted({t["sampled_by"] for t in row["turns"]})]
    return out


def fleet(base: str, params_json: str, out: str, work: str, report_dir: str,
          sandbox_json: str) -> None:
    """`loop`, but verified by the real enclave on the sandbox params in SANDBOX_JSON (its
    tool sandboxes there too); reports the passports' sampling servers as well."""
    from rlvr.config import parse
    from rlvr.enclave.batch import VerifyParams, enclave_verifier
    from rlvr.sandbox.params import SandboxParams

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    params = parse_grpo_params(json.loads(params_json))
    sandbox = parse(SandboxParams, json.loads(sandbox_json), "sandbox")
    logged, engines = [], []
    force = forced(ChatCodec.from_model_dir(base))

    def wrap(engine):
        engines.append(engine)
        return force(engine)

    with enclave_verifier(VerifyParams(consensus_runs=1), sandbox) as (verifier, enclave):
        tasks = [verifiable(t, enclave) for t in (count_task(), take_task())]
        result = train_grpo(base, tasks, params,
                            small_rollout(**FORCED_BUDGETS), sandbox, out, work,
                            verifier=verifier, wrap_engine=wrap,
                            log=lambda step, m: logged.append(m))
    report = {"ledger": result.ledger, "policy_step": result.policy_step, "logged": logged,
              "version": result.policy_version}
    if rank == 0:  # the sampler's servers as the last sync left them
        engine = engines[0]
        report.update(sampled_by=sampled_by(work), sync_failures=engine.last_sync_failures,
                      servers=[ep.base_url for ep in engine.endpoints],
                      live=[ep.live for ep in engine.endpoints],
                      served_dirs=[str(ep.server.model_dir) for ep in engine.endpoints])
    Path(report_dir, f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    {"update": update, "loop": loop, "fleet": fleet}[sys.argv[1]](*sys.argv[2:])
