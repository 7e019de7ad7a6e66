"""Online GRPO against the enclave (SPEC §7): synchronous (Δv_max = 0) or async.

The loop, per step k (`train_grpo`):

    tasks   = curriculum.select(tasks_per_draw)                 difficulty bands (curriculum.py)
    rows    = roll_out(tasks, G, engine=sampler of θ_k)         multi-turn episodes, passports
    verdict = verifier(diffs)                                    only diffs cross; consensus R
    rows    = apply_verdicts(rows, verdicts)                     SPEC §5 reward, overlong penalty
    groups  = informative groups (identical rewards dropped, logged); repeat the draw until
              groups_per_step are kept or max_draws were drawn
    for epoch, mini-batch: forward ; loss = grpo_loss(§7) ; backward per micro-batch ; step
              (π_old = epoch 0's own detached forward → ρ ≡ 1 on the first pass; entropy
              and sampler mismatch of the trained rows measured in that same forward)
    engine.sync_weights(θ_{k+1})                                 the sampler serves new weights
                                                                 (sampler.py: torch in process
                                                                 or a vLLM server)
    dashboard + pathology flags → log(step, metrics) ; checkpoint

One room per concern: the draws and their admission (`grpo_draws.py`; async producer
`grpo_producer.py`), the batch as tensors (`grpo_batch.py`), the update (`grpo_update.py`),
the behaviour metrics (`grpo_behaviour.py`), the dashboard (`grpo_metrics.py`), checkpoints
and the card (`grpo_checkpoint.py`), the loop state (`grpo_state.py`); this module opens a
run and loops (`loop`, over one `Run`).

Async (`max_staleness` > 0): a producer thread makes the draws (select, roll out, verify)
ahead of the trainer into a bounded queue (`DrawProducer`); the trainer admits a group only
if Δv = v_trainer − v_rollout <= max_staleness (else `stale`, counted per difficulty band),
Δv counted in policy versions — one per loop step that updated the weights, whatever its
`epochs` x `mini_batches` optimizer steps (`versions_behind`) — and hands new weights to
the producer, which loads them between draws. π_old is then the trainer's current weights
(ρ ≡ 1 on the first pass still); TIS corrects the lag. The interleaving depends on
timing, so the resume-equals-uninterrupted guarantee below is the synchronous mode's; an
async resume restarts at the first draw the trainer had not taken.

Trust boundary: this trainer is the policy side's and never imports the enclave.
The caller hands it a `verifier(tasks, patch_rows) -> verdict rows` (the stage binds
`rlvr.enclave.batch.verify_patches` to an open `Enclave`); only each submitted diff crosses,
only verdicts come back.

Ratio self-check: π_old is the trainer's own forward pass on exactly the micro-batches the
update uses (for the first mini-batch, the detached logprobs of its epoch-0 gradient
forward; for later mini-batches a no-grad forward before the first optimizer step), so on
the first optimizer step of fresh data ρ ≡ 1 bit for bit (`train/first_pass_ratio_dev` is
logged; it must be 0). The recorded behaviour logprobs
(sampler side) feed the truncated-IS weights and the mismatch metrics, never the ratio.

Data-parallel (`backend: deepspeed` started by a launcher with WORLD_SIZE > 1): rank 0
alone holds the sampler, rolls out, calls the verifier and keeps the curriculum; it
broadcasts each step's groups (with the new ledger entries, draw counter and curriculum
state, `share_groups`), and every rank trains its whole groups of every mini-batch against
the global normalisers (`update_policy`), so the update, the logged metrics (merged over the
ranks, logged by rank 0) and the weights equal one process's on the whole batch. Why rank 0
rolls out rather than each rank its share: the rollouts decide the batch (dynamic sampling
keeps drawing until `groups_per_step` informative groups are in, the curriculum picks the
next tasks from every outcome), so sharded rollouts would need a collective per draw to
agree on when to stop and what the curriculum saw, and the resume guarantee below would
rest on every rank's shards; one sampler keeps the draw sequence exactly the one-process
one, at the cost of the other ranks waiting through generation (the update is what they
share). Rank 0 writes checkpoints (every rank's optimizer state: ZeRO partitions it) and
the policy while the others wait at a barrier; a checkpoint resumes only on as many ranks
as wrote it, and every rank reads it from the same path (a shared file system). The
waiting ranks sit in a broadcast through rank 0's rollouts and verification, so a step must
finish within the process group's timeout (torch.distributed's default, 30 minutes).

ZeRO-3 (`zero_stage: 3`): the trained parameters live in shards across the ranks and each
layer gathers its own inside its forward, a collective. So (1) every rank makes as many
forwards of the trained model as the busiest (`TorchBackend.extra_forwards`: idle no-grad
forwards in the behaviour pass and the π_old pass; the update's idle backward calls already
existed for ZeRO-2) and as many LM-head chunks as the busiest (`backend.head_calls`); (2) rank 0
samples from weights that are whole: the in-process torch engine starts from a copy taken
before the model was sharded and, after each update, every rank gathers the weights
(`full_weights`, a collective) while rank 0 hands them over — the same gather writes a
vLLM sync directory, the checkpoints and the policy. A whole copy on rank 0 costs the model
once more there: with a model that needs ZeRO-3, sample with `engine: vllm`.

LoRA (`lora.enabled`, rlvr/train/lora.py): peft adapters on the base's target modules are
the only trainable weights; the optimizer, the checkpoints (`adapter/` + optimizer + loop
state) and every sync carry the adapters alone (the in-process engine loads them over its
own adapters; a vLLM server with `server.update: lora` hot-loads the adapter directory). The
base never changes, so the KL reference (β > 0) is the trained model with its adapters
disabled, and a resumed run rebuilds the model from the base plus the checkpoint's adapter.
The output directory holds the merged model (plain HF weights: what `evaluate` loads and
`gate` registers) and the adapter under `adapter/`.

Resumption: the run lives in `work_dir/<run key>/` (run key: everything the run depends on
except `steps` and the checkpoint cadence). A checkpoint is an HF directory (weights,
tokenizer, `training.json` with the update passport and `policy_step`) plus the optimizer
state and the loop state (step, draw counter, curriculum, entropy coefficient, curves, group
ledger). A killed run restarts from its newest checkpoint; the rollouts of the interrupted
step are reused from `roll_out`'s shards (same weights, policy step and sampling round), so
no group is duplicated or lost and the result equals an uninterrupted run.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import resource
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from rlvr.agent.rollout import RolloutParams, roll_out
from rlvr.engines.base import SamplingParams
from rlvr.engines.constraint import TokenGrammar
from rlvr.engines.model_dir import load_policy
from rlvr.errors import ConfigError
from rlvr.rl.entropy import EntropyController
from rlvr.sandbox.params import SandboxParams
from rlvr.tasks.model import Task
from rlvr.train import pathology
from rlvr.train.backend import (BackendParams, TorchBackend, build_backend, launch_rank,
                                require_packing, shards_parameters)
from rlvr.train.curriculum import Curriculum
from rlvr.train.curves import LogFn
from rlvr.train.grpo_behaviour import call_token_id
from rlvr.train.grpo_checkpoint import (card, load_optimizer, load_state, run_key,
                                        save_checkpoint, state_version, write_policy)
from rlvr.train.grpo_config import GRPOParams
from rlvr.train.grpo_draws import Draw, Verifier, make_draw, share_groups
from rlvr.train.grpo_metrics import rollout_metrics
from rlvr.train.grpo_producer import DrawProducer
from rlvr.train.grpo_state import LoopState
from rlvr.train.grpo_update import train_on
from rlvr.train.lora import ADAPTER_DIR, AdaptersOff, apply_lora, load_adapter
from rlvr.train.sampler import SYNC_DIR, Sampler, open_sampler

# Metric prefixes that hold clock or memory readings: logged, never in the model card.
UNSTABLE = ("time/", "memory/")


@dataclass
class GRPOResult:
    out_dir: Path
    steps: int                       # loop steps done (this run + resumed ones)
    policy_step: int                 # optimizer steps applied to the weights
    policy_version: str
    curves: list[dict[str, Any]]     # per-step dashboard (stable metrics)
    flags: dict[str, bool]
    findings: list[pathology.Finding]
    ledger: list[dict[str, Any]]     # every group drawn: accepted or dropped with a reason
    curriculum: dict[str, Any]
    resumed_from: int = 0            # step of the checkpoint this process started from
    seconds: float = 0.0
    step_seconds: list[float] = field(default_factory=list)
    model: Any = None


@dataclass(kw_only=True)
class Run:
    """One GRPO run as its loop sees it: the loop state it advances and what it acts with.
    The sampler, its (wrapped) acting engine, the async producer and `next_draw` are rank
    0's alone (None on the other ranks, which receive each step's groups)."""

    state: LoopState
    params: GRPOParams
    model: Any
    backend: TorchBackend
    policy: Any                      # the loaded policy: tokenizer, version
    base_dir: Path
    run_dir: Path
    reference: Any                   # the frozen initial policy of the KL term, or None
    curriculum: Curriculum
    controller: EntropyController
    scoring: SamplingParams
    grammar: TokenGrammar | None
    lock: threading.Lock             # the curriculum, shared with the async producer
    log: LogFn
    sampler: Sampler | None = None
    acting: Any = None
    producer: DrawProducer | None = None
    workers: Any = None              # RolloutWorkers (grpo.rollout_workers), or None
    next_draw: Callable[[int], Draw] | None = None
    step_seconds: list[float] = field(default_factory=list)


# ---- the loop -------------------------------------------------------------------------------
def train_grpo(base_dir: Path | str, tasks: Sequence[Task], params: GRPOParams,
               rollout: RolloutParams, sandbox_params: SandboxParams, out_dir: Path | str,
               work_dir: Path | str, *, verifier: Verifier, log: LogFn | None = None,
               sandbox=None, wrap_engine: Callable[[Any], Any] | None = None
               ) -> GRPOResult:
    """GRPO on `tasks` from the policy `base_dir`; the final policy goes to `out_dir`.

    `rollout`: the agent environment (budgets, decoding, repetition, reward weights, tools)
    — engine, model, group size and seed are this loop's. `verifier(tasks, patch_rows)`:
    verdict rows for the submitted diffs. `work_dir`: checkpoints and rollout shards (kept
    across a kill). `wrap_engine`: wraps the sampling engine (tests script actions through
    it; the wrapped engine must keep the `TokenEngine` protocol)."""
    params.check()
    if not tasks:
        raise ConfigError("grpo: no tasks to train on")
    started = time.perf_counter()
    base_dir = Path(base_dir)
    by_id = {t.task_id: t for t in tasks}
    run_dir = Path(work_dir) / run_key(base_dir, tasks, params, rollout, sandbox_params)
    state, ckpt = load_state(run_dir, params.steps)
    lora = params.lora.enabled  # LoRA: the base's weights, adapters fresh or from the checkpoint
    start_dir = base_dir if lora else ckpt or base_dir  # the weights the model is loaded with
    policy = load_policy(start_dir, device=params.device, dtype=params.dtype)
    model = policy.model
    if lora:
        torch.manual_seed(params.seed)  # the adapters' init
        model = apply_lora(model, params.lora, "grpo")
        if ckpt is not None:
            load_adapter(model, ckpt / ADAPTER_DIR)
    if params.packed:
        require_packing(model, "grpo")
    # ZeRO-3 cuts the trained weights into shards across the ranks (a forward needs all of
    # them), so rank 0's in-process sampler starts from a whole copy taken before the cut and
    # is sent gathered weights after each update (`_publish`)
    whole = (copy.deepcopy(model) if shards_parameters(params) and params.engine == "torch"
             and launch_rank() == 0 else model)
    backend = build_backend(model, BackendParams.of(params), "grpo")
    if ckpt is not None:
        load_optimizer(ckpt, state, backend)
    state.world = backend.world
    reference = (None if not params.loss.uses_reference else AdaptersOff(model) if lora
                 else load_policy(base_dir, device=params.device, dtype=params.dtype).model)
    curriculum = Curriculum(list(by_id), params.curriculum, params.group_size, params.seed)
    if state.curriculum is not None:
        curriculum.load_state(state.curriculum)
    controller = dataclasses.replace(params.entropy)
    controller.coef = state.entropy_coef if ckpt is not None else params.entropy.coef
    if not state.policy_version:
        state.policy_version = policy.version
    rp = rollout_params(rollout, params, base_dir)
    scoring = SamplingParams.of(rp.decoding, max_new_tokens=1)
    grammar = (TokenGrammar(scoring.grammar, policy.tokenizer, model.config.vocab_size)
               if scoring.grammar else None)
    resumed_from = state.step
    run = Run(state=state, params=params, model=model, backend=backend, policy=policy,
              base_dir=base_dir, run_dir=run_dir, reference=reference, curriculum=curriculum,
              controller=controller, scoring=scoring, grammar=grammar, lock=threading.Lock(),
              log=log or (lambda step, metrics: None))
    if backend.rank == 0:  # the sampler, the rollouts and the verifier live on rank 0 alone
        _open_sampling(run, whole, start_dir, by_id=by_id, rp=rp,
                       sandbox_params=sandbox_params, sandbox=sandbox, verifier=verifier,
                       wrap_engine=wrap_engine)
    if lora and ckpt is not None:  # a sampler started on the base: the resumed adapters
        with backend.full_weights():  # (ZeRO-3: every rank gathers, rank 0 reads)
            if backend.rank == 0:
                run.acting.sync_weights(run.sampler.source(model, state.policy_step),
                                        state.policy_version, state.policy_step)
    try:
        state = loop(run)
    finally:
        if run.producer is not None:
            run.producer.close()
        if run.workers is not None:
            run.workers.close()
        if run.sampler is not None:
            run.sampler.close()
    found = pathology.detect(state.curves, params.pathology)
    model.eval()
    with backend.full_weights():  # (ZeRO-3: gathered on every rank, written by rank 0)
        if backend.rank == 0:  # (LoRA: the merged model is written, and returned)
            model = write_policy(out_dir, model, policy, base_dir,
                                 card(base_dir, params, state, found, curriculum.report(),
                                      decoding=rp.decoding.knobs()),
                                 adapter=params.lora.save_adapter)
    backend.finish()  # no rank returns before the policy directory exists
    return GRPOResult(out_dir=Path(out_dir), steps=state.step, policy_step=state.policy_step,
                      policy_version=state.policy_version, curves=state.curves,
                      flags=pathology.flags(found), findings=found, ledger=state.ledger,
                      curriculum=curriculum.report(), resumed_from=resumed_from,
                      seconds=time.perf_counter() - started, step_seconds=run.step_seconds,
                      model=model)


def loop(run: Run) -> LoopState:
    """Steps state.step + 1 .. params.steps of `train_grpo` (module docstring): draw, verify
    and admit (`share_groups`), update (`train_on`), sync the sampler (`_publish`), record
    the dashboard and flags (`_record`), checkpoint, log."""
    state, params, backend = run.state, run.params, run.backend
    run.model.train()
    call_token = call_token_id(run.policy.tokenizer)
    for step in range(state.step + 1, params.steps + 1):
        t0 = time.perf_counter()
        torch.manual_seed(params.seed * 1_000_003 + step)
        groups, timing = share_groups(step, state, run.curriculum, run.next_draw, params,
                                      run.lock, backend)
        with run.lock:
            metrics = {**timing, **rollout_metrics(groups, state, run.curriculum)}
        if timing["time/rollout_s"] > 0:  # share of rollout wall time the engine generated
            metrics["time/generate_busy_fraction"] = (timing["time/generate_s"]
                                                      / timing["time/rollout_s"])
        t1 = time.perf_counter()
        upd = train_on(run.model, backend, groups, params, run.scoring, run.reference,
                       run.controller.coef, state.policy_step, grammar=run.grammar,
                       call_token=call_token)
        if upd["train/optimizer_steps"]:
            _publish(run, int(upd["train/optimizer_steps"]), metrics)
        metrics.update(upd)
        if run.controller.enabled and "train/entropy" in metrics:
            run.controller.step(metrics["train/entropy"])
        metrics["train/entropy_coef"] = run.controller.coef
        metrics["train/policy_step"] = float(state.policy_step)
        metrics["time/train_s"] = time.perf_counter() - t1
        found = _record(run, step, metrics)
        if step % params.checkpoint_every == 0 or step == params.steps:
            save_checkpoint(run.run_dir, run.model, backend, run.policy, run.base_dir, params,
                            state, found)
        metrics["time/step_s"] = time.perf_counter() - t0
        metrics["memory/peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        run.step_seconds.append(metrics["time/step_s"])
        if backend.rank == 0:  # global numbers (and rank 0's clocks): logged once
            run.log(step, metrics)
    return state


def _publish(run: Run, optimizer_steps: int, metrics: dict[str, float]) -> None:
    """The updated weights become the next policy version; rank 0 hands them to the sampler
    (loaded now, or by the async producer before its next draw)."""
    state = run.state
    state.policy_step += optimizer_steps
    t_sync = time.perf_counter()
    with run.backend.full_weights():  # (ZeRO-3: gathered on every rank, for this block)
        state.policy_version = state_version(run.model)  # the same weights on every rank
        if run.sampler is not None:
            source = run.sampler.source(run.model, state.policy_step)
            if run.producer is not None:  # loaded by the producer before its next draw
                run.producer.publish(source, state.policy_version, state.policy_step)
            else:
                run.acting.sync_weights(source, state.policy_version, state.policy_step)
    state.published.append(state.policy_step)
    if run.sampler is not None:
        metrics["time/weight_sync_s"] = time.perf_counter() - t_sync


def _record(run: Run, step: int, metrics: dict[str, float]) -> list[pathology.Finding]:
    """The step's stable numbers onto the curves, the pathology flags over the curves so far
    into `metrics`, and the loop state advanced to `step`; the findings."""
    state = run.state
    stable = {k: v for k, v in metrics.items() if not k.startswith(UNSTABLE)}
    state.curves.append({"step": step, **stable})
    found = pathology.detect(state.curves, run.params.pathology)
    for f in found:
        metrics[f"flag/{f.name}"] = float(f.raised)
    state.step, state.entropy_coef = step, run.controller.coef
    with run.lock:
        state.curriculum = run.curriculum.state()
    return found


def _open_sampling(run: Run, whole, start_dir: Path, *, by_id: Mapping[str, Task], rp: RolloutParams,
                   sandbox_params: SandboxParams, sandbox, verifier: Verifier,
                   wrap_engine: Callable[[Any], Any] | None) -> None:
    """Rank 0's sampler (its own copy of the weights, in process or a vLLM server's, given
    the trainer's through the engine protocol after every update), the acting engine, and
    how draws are made: inline, or ahead by the async producer (`max_staleness` > 0).
    `whole`: the trained model with its weights whole (its copy before ZeRO-3 sharded it)."""
    state, params = run.state, run.params
    run.sampler = open_sampler(params.engine, whole, run.policy.tokenizer, start_dir,
                               policy_version=state.policy_version,
                               policy_step=state.policy_step, options=params.engine_options,
                               sync_dir=run.run_dir / SYNC_DIR)
    engine = run.sampler.engine
    run.acting = wrap_engine(engine) if wrap_engine is not None else engine
    roll = roll_out
    if params.rollout_workers:  # the draws' groups go to Ray actors (their own engine clients)
        # lazy: Ray (~1 s to import) only for a run that places workers
        from rlvr.train.rollout_workers import RolloutWorkers

        run.workers = RolloutWorkers(params.rollout_workers, tasks=by_id, rp=rp,
                                     sandbox_params=sandbox_params, engine=engine,
                                     wrap=wrap_engine, address=params.ray_address)
        roll = run.workers.roll_out
    make = functools.partial(make_draw, curriculum=run.curriculum, by_id=by_id,
                             engine=run.acting, rp=rp, sandbox_params=sandbox_params,
                             sandbox=sandbox, verifier=verifier, params=params,
                             parts_root=run.run_dir / "rollouts", lock=run.lock, roll=roll)
    run.producer = (DrawProducer(make, run.acting, state.draws, params.queue_size)
                    if params.max_staleness > 0 and state.step < params.steps else None)
    run.next_draw = run.producer.next if run.producer is not None else make


def rollout_params(rollout: RolloutParams, params: GRPOParams, base_dir: Path) -> RolloutParams:
    """The environment of `rollout` with this loop's engine, model, G, seed and wave size."""
    return dataclasses.replace(rollout, engine=params.engine, model_dir=str(base_dir),
                               policy_version="", split=params.split, max_tasks=0,
                               group_size=params.group_size, seed=params.seed,
                               groups_per_wave=params.tasks_per_draw,
                               engine_options=params.engine_options)
