"""GRPO's checkpoints and output: a run's work directory (`run_key`), resumable checkpoints
(an HF policy directory plus every rank's optimizer state and the loop state, `save_checkpoint`
/ `load_state`), and the final policy directory with its `training.json` card — what the gate
reads (`curves`, `flags`) and the update passport (`card`, `write_policy`)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shutil
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from rlvr.agent.rollout import RolloutParams
from rlvr.config import as_dict
from rlvr.engines.model_dir import weights_fingerprint
from rlvr.errors import ConfigError
from rlvr.sandbox.params import SandboxParams
from rlvr.tasks.model import Task
from rlvr.train import pathology
from rlvr.train.grpo_config import GRPOParams
from rlvr.train.grpo_state import LoopState
from rlvr.train.lora import ADAPTER_DIR, is_lora
from rlvr.train.policy_dir import save_hf_weights, staged_dir

STATE = "state.json"
OPTIMIZER = "optimizer.pt"


def run_key(base_dir: Path, tasks: Sequence[Task], params: GRPOParams, rollout: RolloutParams,
            sandbox_params: SandboxParams) -> str:
    """What a resumable run depends on: params (less `steps` and the checkpoint cadence,
    so a longer run continues a shorter one), environment, sandbox, base weights, tasks."""
    p = {k: v for k, v in as_dict(params).items()
         if k not in ("steps", "checkpoint_every", "keep_checkpoints")}
    h = hashlib.sha256(json.dumps({"grpo": p, "rollout": as_dict(rollout),
                                   "sandbox": as_dict(sandbox_params),
                                   "base": weights_fingerprint(base_dir)},
                                  sort_keys=True, default=str).encode())
    for t in sorted(tasks, key=lambda t: t.task_id):
        h.update(f"{t.task_id}\0{t.hashes()['content_hash']}\0".encode())
    return h.hexdigest()[:16]


def state_version(model) -> str:
    """The policy version of in-memory weights: sha256 over names, shapes, dtypes, bytes."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}\0{tuple(t.shape)}\0{t.dtype}\0".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return f"sha256-state:{h.hexdigest()[:32]}"


def checkpoints(run_dir: Path) -> list[Path]:
    """A run's complete checkpoints, oldest first (one without its state file is unfinished)."""
    root = run_dir / "checkpoints"
    return sorted(p for p in root.glob("step-*") if (p / STATE).is_file()) if root.is_dir() else []


def load_state(run_dir: Path, max_step: int) -> tuple[LoopState, Path | None]:
    """The newest checkpoint of at most `max_step` steps (a run asked for fewer steps than
    an earlier one made starts from an earlier checkpoint, or afresh: the synchronous loop
    is deterministic, so either way it reproduces those steps)."""
    ckpts = [c for c in checkpoints(run_dir) if int(c.name.split("-")[1]) <= max_step]
    if not ckpts:
        return LoopState(), None
    data = json.loads((ckpts[-1] / STATE).read_text())
    return LoopState(**data), ckpts[-1]


def load_optimizer(ckpt: Path, state: LoopState, backend) -> None:
    """This rank's optimizer state from checkpoint `ckpt`, which must have been written by as
    many ranks as this run has (ZeRO partitions the state by rank)."""
    if state.world != backend.world:
        raise ConfigError(f"grpo: checkpoint {ckpt} holds the optimizer state of "
                          f"{state.world} rank(s); this run has {backend.world} (resume "
                          "with the same number of ranks, or start a new work_dir)")
    backend.load_optimizer_state(torch.load(ckpt / optimizer_file(backend.rank),
                                            weights_only=True))


def save_checkpoint(run_dir: Path, model, backend, policy, base_dir: Path, params: GRPOParams,
                    state: LoopState, found) -> Path:
    """An HF directory with the update passport and policy_step, plus the optimizer and loop
    state, written to a temp dir and renamed into place; older ones beyond
    `keep_checkpoints` (and any of a longer earlier run, past this step) are removed."""
    dest = run_dir / "checkpoints" / f"step-{state.step:06d}"
    # ZeRO >= 1 partitions the optimizer state: every rank's part is kept (rank 0 writes)
    opts = backend.gather(backend.optimizer_state())
    with backend.full_weights():  # (ZeRO-3: the weights gathered on every rank)
        if backend.rank == 0:
            extra = {**{optimizer_file(r): o for r, o in enumerate(opts)},
                     STATE: json.dumps(dataclasses.asdict(state), sort_keys=True)}
            write_policy(dest, model, policy, base_dir,
                         card(base_dir, params, state, found, None), extra=extra,
                         adapter_only=is_lora(model))
    if backend.rank == 0:
        ckpts = checkpoints(run_dir)
        later = [c for c in ckpts if int(c.name.split("-")[1]) > state.step]  # of a longer run
        mine = [c for c in ckpts if c not in later]
        for old in mine[:-params.keep_checkpoints] + later:
            shutil.rmtree(old, ignore_errors=True)
    backend.barrier()  # no rank goes on (or may be killed) before the checkpoint is whole
    return dest


def optimizer_file(rank: int) -> str:
    """A checkpoint's optimizer state of `rank` (rank 0's name is that of one process)."""
    return OPTIMIZER if rank == 0 else f"optimizer-rank{rank}.pt"


def card(base_dir: Path, params: GRPOParams, state: LoopState, found, curriculum_report,
         decoding: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`training.json`: what the gate reads (`curves`, `flags`) and the update passport;
    `decoding`: the behaviour distribution's knobs (grammar included) the ratio was taken
    under."""
    statuses: dict[str, int] = {}
    for g in state.ledger:
        statuses[g["status"]] = statuses.get(g["status"], 0) + 1
    denominator = next((c["train/loss_denominator"] for c in reversed(state.curves)
                        if "train/loss_denominator" in c), None)
    return {
        "trainer": "rlvr.train.grpo",
        "base_model": str(base_dir),
        "base_model_hash": weights_fingerprint(base_dir),
        "policy_step": state.policy_step,
        "policy_version_in_memory": state.policy_version,
        "steps": state.step,
        "passport": {**params.passport(denominator),
                     **({"decoding": dict(decoding)} if decoding is not None else {})},
        "params": as_dict(params),
        "curves": [_clean(c) for c in state.curves],
        "flags": pathology.flags(found),
        "findings": [dataclasses.asdict(f) for f in found],
        "groups": {"drawn": len(state.ledger), "by_status": dict(sorted(statuses.items())),
                   "draws": state.draws},
        **({"curriculum": curriculum_report} if curriculum_report is not None else {}),
        "ledger": state.ledger,
    }


def _clean(rec: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else
                (round(v, 8) if isinstance(v, float) else v)) for k, v in rec.items()}


def write_policy(out_dir: Path | str, model, policy, base_dir: Path, card_: dict[str, Any], *,
                 extra: Mapping[str, Any] | None = None, adapter: bool = True,
                 adapter_only: bool = False):
    """Weights + tokenizer + `training.json` + README (and `extra` files: a tensor state
    goes through torch.save, a string is written as text) to a temp dir, renamed into
    place. A LoRA model: its adapter under `adapter/` (with `adapter`), then the merged
    weights, unless `adapter_only` (a checkpoint: the base is the run's own). Returns the
    model written (a LoRA model merged: the adapters are gone from it)."""
    with staged_dir(out_dir) as tmp:
        if is_lora(model):
            if adapter or adapter_only:
                model.save_pretrained(tmp / ADAPTER_DIR)
            if not adapter_only:
                model = model.merge_and_unload()
                save_hf_weights(tmp, model, base_dir)
        else:
            save_hf_weights(tmp, model, base_dir)
        (tmp / "training.json").write_text(json.dumps(card_, indent=1, sort_keys=True) + "\n")
        (tmp / "README.md").write_text(readme(card_))
        for name, value in (extra or {}).items():
            if isinstance(value, str):
                (tmp / name).write_text(value)
            else:
                torch.save(value, tmp / name)
    return model


def readme(c: Mapping[str, Any]) -> str:
    p = c["passport"]
    raised = [k for k, v in c["flags"].items() if v]
    return (
        "# GRPO policy\n\n"
        f"Online GRPO (synchronous, SPEC §7) of `{c['base_model']}` (`{c['base_model_hash']}`): "
        f"{c['steps']} loop steps, {c['policy_step']} optimizer steps (`policy_step`).\n\n"
        f"- groups drawn: {c['groups']['drawn']} ({c['groups']['by_status']})\n"
        f"- advantage: {p['advantage_method']} (scaling {p['reward_scaling']}); ratio "
        f"{p['ratio_level']}, clip [{p['clip_low']}, {p['clip_high']}]; aggregation "
        f"{p['loss_aggregation']} (denominator {p['loss_denominator_used']}); KL "
        f"{p['kl_estimator']} x {p['kl_coef']}; epochs {p['epochs_per_batch']}; staleness "
        f"bound {p['staleness_bound']}\n"
        f"- pathology flags raised: {', '.join(raised) if raised else 'none'}\n\n"
        "Update passport, per-step curves (`curves`), flags and the group ledger: "
        "`training.json`. Load with `AutoModelForCausalLM.from_pretrained`.\n")
