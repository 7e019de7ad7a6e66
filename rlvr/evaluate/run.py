"""The evaluation loop: checkpoint -> rollouts on the evaluation sets -> verdicts -> eval rows.

This is the trusted side (like `rlvr.enclave.batch`): the policy acts in its sandbox through
`rlvr.agent.rollout.roll_out`, and only the diff of each submitted rollout crosses into fresh
enclaves (`verify_patches`, with consensus); the verdicts come back and are applied to the
passports (`apply_verdicts`). The policy side (rlvr/agent, rlvr/engines, rlvr/train) never
imports this module or the enclave.

Pairing: every checkpoint is rolled out with the same rollout seed, sampling round 0 and
group size n, so sample i of task q has the same reset seed (`derive_seed(seed, q, i)`) and
the same trajectory id for every checkpoint, and its diff is verified with the same
verification seed (a function of the trajectory id). Two checkpoints therefore differ only in
their weights.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from rlvr.agent.passport import apply_verdicts, needs_verdict
from rlvr.agent.rollout import RolloutParams, patch_rows, roll_out
from rlvr.enclave.batch import VerifyParams, verify_patches
from rlvr.enclave.core import Enclave
from rlvr.evaluate.params import EvaluateParams
from rlvr.evaluate.report import check_pairing, eval_rows
from rlvr.evaluate.sets import EvalSet, tier_of
from rlvr.sandbox.params import SandboxParams
from rlvr.teachers.acting import open_engine


def rollout_params(params: EvaluateParams, model_dir: Path | str) -> RolloutParams:
    """The rollout knobs of an evaluation of `model_dir` (everything else the defaults: the
    reward shaping plays no part in a pass rate)."""
    return RolloutParams(
        engine=params.engine, model_dir=str(model_dir), policy_version="", split="",
        max_tasks=0, group_size=params.samples_per_task, seed=params.seed,
        workers=params.workers, groups_per_wave=params.groups_per_wave,
        schedule=params.schedule,
        decoding=params.decoding, budgets=params.budgets, repetition=params.repetition,
        engine_options=dict(params.engine_options))


def verify_params(params: EvaluateParams) -> VerifyParams:
    return VerifyParams(seed=params.verify_seed, consensus_runs=params.consensus_runs)


def evaluate_checkpoint(model_dir: Path | str, sets: Sequence[EvalSet], params: EvaluateParams,
                        sandbox_params: SandboxParams, *, checkpoint: str = "policy",
                        run: str = "", parts_root: Path | None = None, engine=None,
                        sandbox=None, enclave=None, stats: dict | None = None) -> list[dict]:
    """`schemas.EVAL` rows of one checkpoint: n samples of every task of every tier, each
    with its episode's timings beside it (`report.eval_rows`; `write_eval` puts them in the
    timings sidecar).

    `engine` / `sandbox` / `enclave`: live ones to use (a training loop's policy engine, an
    open policy sandbox, an open enclave) instead of building them from params for this
    call. `parts_root`: rollout checkpoint shards (resumable; None: a temporary directory).
    `stats` (if given) receives the rollout's spend (`roll_out`) and the number of verified
    diffs."""
    tasks = [t for s in sets for t in s.tasks]
    if not tasks:
        return []
    spent: dict = {}
    passports = roll_out(tasks, rollout_params(params, model_dir), sandbox_params, parts_root,
                         engine=engine, open_engine=open_engine, sandbox=sandbox, stats=spent)
    patches = patch_rows([r for r in passports if needs_verdict(r)])
    verdicts = verify_patches(tasks, patches, verify_params(params), sandbox_params,
                              enclave=enclave, where=f"evaluate[{checkpoint}]") \
        if patches else []
    scored = apply_verdicts(passports, verdicts, where=f"evaluate[{checkpoint}] verdicts")
    if stats is not None:
        stats.update(spent)
        stats["verified_patches"] = len(patches)
    return eval_rows(scored, checkpoint, tier_of(sets), run=run,
                     safety_flags={v["candidate_id"]: v["safety_flags"] for v in verdicts})


def evaluate_checkpoints(checkpoints: Mapping[str, Path | str], sets: Sequence[EvalSet],
                         params: EvaluateParams, sandbox_params: SandboxParams, *,
                         parts_root: Path | None = None,
                         stats: dict | None = None) -> list[dict]:
    """Every checkpoint (name -> model dir, in order) on the same sets, one enclave shared;
    the rows are checked to be paired (`check_pairing`) before they are returned."""
    rows: list[dict] = []
    with Enclave.for_sandbox(sandbox_params, consensus_runs=params.consensus_runs) as enclave:
        for name, model_dir in checkpoints.items():
            spent: dict = {}
            rows += evaluate_checkpoint(model_dir, sets, params, sandbox_params,
                                        checkpoint=name, parts_root=parts_root,
                                        enclave=enclave, stats=spent)
            if stats is not None:
                stats[name] = spent
    check_pairing(rows)
    return rows
