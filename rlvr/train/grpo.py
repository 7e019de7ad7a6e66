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

Async (`max_staleness` > 0): a producer thread makes the draws (select, roll out, verify)
ahead of the trainer into a bounded queue (`DrawProducer`); the trainer admits a group only
if Δv = v_trainer − v_rollout <= max_staleness (else `stale`, counted per difficulty band),
Δv counted in policy versions — one per loop step that updated the weights, whatever its
`epochs` x `mini_batches` optimizer steps (`versions_behind`) — and hands new weights to
the producer, which loads them between draws. π_old is then the trainer's current weights
(ρ ≡ 1 on the first pass still); TIS corrects the lag. The interleaving depends on
timing, so the resume-equals-uninterrupted guarantee below is the synchronous mode's; an
async resume restarts at the first draw the trainer had not taken.

Trust boundary: this module is the policy side's trainer and never imports the enclave.
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

Resumption: the run lives in `work_dir/<run key>/` (run key: everything the run depends on
except `steps` and the checkpoint cadence). A checkpoint is an HF directory (weights,
tokenizer, `training.json` with the update passport and `policy_step`) plus the optimizer
state and the loop state (step, draw counter, curriculum, entropy coefficient, curves, group
ledger). A killed run restarts from its newest checkpoint; the rollouts of the interrupted
step are reused from `roll_out`'s shards (same weights, policy step and sampling round), so
no group is duplicated or lost and the result equals an uninterrupted run.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import queue
import resource
import shutil
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from rlvr.agent.passport import apply_verdicts, needs_verdict, parse_error_rate
from rlvr.agent.rollout import RolloutParams, patch_rows, roll_out
from rlvr.artifacts import schemas
from rlvr.artifacts.io import temp_dir_beside
from rlvr.chat_format import TOOL_CALL
from rlvr.config import as_dict
from rlvr.engines.base import SamplingParams, WeightSource
from rlvr.engines.constraint import TokenGrammar
from rlvr.engines.model_dir import load_policy, weights_fingerprint
from rlvr.errors import ConfigError
from rlvr.rl.advantages import compute_advantages
from rlvr.rl.importance import logprob_mismatch
from rlvr.rl.loss import grpo_loss
from rlvr.sandbox.params import SandboxParams
from rlvr.tasks.model import Task
from rlvr.train import pathology
from rlvr.train.curriculum import BANDS, Curriculum
from rlvr.train.grpo_config import GRPOParams
from rlvr.engines.logprobs import sequence_logprobs
from rlvr.train.sampler import SYNC_DIR, open_sampler, save_hf_weights
from rlvr.train.sft import _backend, micro_batches

Verifier = Callable[[Sequence[Task], list[dict]], list[dict]]
LogFn = Callable[[int, dict[str, float]], None]
# Metric prefixes that hold clock or memory readings: logged, never in the model card.
UNSTABLE = ("time/", "memory/")
STATE = "state.json"
STATUSES = ("accepted", "identical_rewards", "stale", "infra_error", "surplus")
OPTIMIZER = "optimizer.pt"


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


@dataclass
class _State:
    step: int = 0
    policy_step: int = 0
    policy_version: str = ""
    draws: int = 0
    entropy_coef: float = 0.0
    published: list[int] = field(default_factory=list)
    """policy_step of every policy version the trainer published (one per loop step that
    updated the weights): Δv counts these, not optimizer steps (`versions_behind`)."""
    curves: list[dict[str, Any]] = field(default_factory=list)
    ledger: list[dict[str, Any]] = field(default_factory=list)
    curriculum: dict[str, Any] | None = None
    world: int = 1
    """Ranks that trained (a checkpoint holds one optimizer state per rank)."""


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
    log = log or (lambda step, metrics: None)
    started = time.perf_counter()
    base_dir = Path(base_dir)
    by_id = {t.task_id: t for t in tasks}
    run_dir = Path(work_dir) / run_key(base_dir, tasks, params, rollout, sandbox_params)
    state, ckpt = _load_state(run_dir, params.steps)
    policy = load_policy(ckpt or base_dir, device=params.device, dtype=params.dtype)
    model = policy.model
    backend = _backend(model, params.optimizer_params())
    lead = backend.rank == 0
    if ckpt is not None:
        if state.world != backend.world:
            raise ConfigError(f"grpo: checkpoint {ckpt} holds the optimizer state of "
                              f"{state.world} rank(s); this run has {backend.world} (resume "
                              "with the same number of ranks, or start a new work_dir)")
        backend.opt.load_state_dict(torch.load(ckpt / optimizer_file(backend.rank),
                                               weights_only=True))
    state.world = backend.world
    reference = (load_policy(base_dir, device=params.device, dtype=params.dtype).model
                 if params.loss.uses_reference else None)
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
    resumed_from, step_seconds = state.step, []
    lock = threading.Lock()
    acting = producer = next_draw = sampler = None
    if lead:  # the sampler, the rollouts and the verifier live on rank 0 alone
        # The sampler holds its own copy of the weights (in process, or a vLLM server's) and
        # gets the trainer's through the engine protocol after every update.
        sampler = open_sampler(params.engine, model, policy.tokenizer, ckpt or base_dir,
                               policy_version=state.policy_version,
                               policy_step=state.policy_step, options=params.engine_options,
                               sync_dir=run_dir / SYNC_DIR)
        engine = sampler.engine
        acting = wrap_engine(engine) if wrap_engine is not None else engine
        make = functools.partial(make_draw, curriculum=curriculum, by_id=by_id, engine=acting,
                                 rp=rp, sandbox_params=sandbox_params, sandbox=sandbox,
                                 verifier=verifier, params=params,
                                 parts_root=run_dir / "rollouts", lock=lock)
        producer = (DrawProducer(make, acting, state.draws, params.queue_size)
                    if params.max_staleness > 0 and state.step < params.steps else None)
        next_draw = producer.next if producer is not None else make
    try:
        state = _loop(state, params, model, backend, policy, base_dir, run_dir, reference,
                      curriculum, controller, sampler, acting, producer, next_draw, scoring,
                      grammar, lock, log, step_seconds)
    finally:
        if producer is not None:
            producer.close()
        if sampler is not None:
            sampler.close()
    found = pathology.detect(state.curves, params.pathology)
    model.eval()
    if lead:
        write_policy(out_dir, model, policy, base_dir,
                     card(base_dir, params, state, found, curriculum.report(),
                          decoding=rp.decoding.knobs()))
    backend.barrier()  # no rank returns before the policy directory exists
    return GRPOResult(out_dir=Path(out_dir), steps=state.step, policy_step=state.policy_step,
                      policy_version=state.policy_version, curves=state.curves,
                      flags=pathology.flags(found), findings=found, ledger=state.ledger,
                      curriculum=curriculum.report(), resumed_from=resumed_from,
                      seconds=time.perf_counter() - started, step_seconds=step_seconds,
                      model=model)


def _loop(state, params, model, backend, policy, base_dir, run_dir, reference, curriculum,
          controller, sampler, acting, producer, next_draw, scoring, grammar, lock, log,
          step_seconds) -> _State:
    """Steps state.step + 1 .. params.steps of `train_grpo` (module docstring)."""
    model.train()
    call_token = call_token_id(policy.tokenizer)
    for step in range(state.step + 1, params.steps + 1):
        t0 = time.perf_counter()
        torch.manual_seed(params.seed * 1_000_003 + step)
        groups, timing = share_groups(step, state, curriculum, next_draw, params, lock, backend)
        with lock:
            metrics = {**timing, **rollout_metrics(groups, state, curriculum)}
        if timing["time/rollout_s"] > 0:  # share of rollout wall time the engine generated
            metrics["time/generate_busy_fraction"] = (timing["time/generate_s"]
                                                      / timing["time/rollout_s"])
        t1 = time.perf_counter()
        upd = train_on(model, backend, groups, params, scoring, reference, controller.coef,
                       state.policy_step, grammar=grammar,
                       call_token=call_token)
        if upd["train/optimizer_steps"]:
            state.policy_step += int(upd["train/optimizer_steps"])
            state.policy_version = state_version(model)  # the same weights on every rank
            state.published.append(state.policy_step)
            if sampler is not None:
                t_sync = time.perf_counter()
                source = sampler.source(model, state.policy_step)
                if producer is not None:  # loaded by the producer before its next draw
                    producer.publish(source, state.policy_version, state.policy_step)
                else:
                    acting.sync_weights(source, state.policy_version, state.policy_step)
                metrics["time/weight_sync_s"] = time.perf_counter() - t_sync
        metrics.update(upd)
        if controller.enabled and "train/entropy" in metrics:
            controller.step(metrics["train/entropy"])
        metrics["train/entropy_coef"] = controller.coef
        metrics["train/policy_step"] = float(state.policy_step)
        metrics["time/train_s"] = time.perf_counter() - t1
        stable = {k: v for k, v in metrics.items() if not k.startswith(UNSTABLE)}
        state.curves.append({"step": step, **stable})
        found = pathology.detect(state.curves, params.pathology)
        for f in found:
            metrics[f"flag/{f.name}"] = float(f.raised)
        state.step, state.entropy_coef = step, controller.coef
        with lock:
            state.curriculum = curriculum.state()
        if step % params.checkpoint_every == 0 or step == params.steps:
            save_checkpoint(run_dir, model, backend, policy, base_dir, params, state, found)
        metrics["time/step_s"] = time.perf_counter() - t0
        metrics["memory/peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        step_seconds.append(metrics["time/step_s"])
        if backend.rank == 0:  # global numbers (and rank 0's clocks): logged once
            log(step, metrics)
    return state


def train_on(model, backend, groups: Sequence[Mapping[str, Any]], params: GRPOParams,
             scoring: SamplingParams, reference, entropy_coef: float, policy_step: int,
             grammar: TokenGrammar | None = None,
             call_token: int | None = None) -> dict[str, float]:
    """The training half of a loop step on its drawn groups: the behaviour metrics of every
    drawn rollout at the pre-update weights (`behaviour_metrics`) and, if a group was
    accepted, the update on the accepted ones (`update_policy`; else
    `train/optimizer_steps` = 0). The rows the update trains on are measured inside its
    own first forward, the rest (dropped groups) by a no-grad pass before it, so no row is
    scored twice; a model whose train mode differs from eval mode (dropout) gets the
    separate eval-mode pass over every row instead. With several ranks each scores its share
    of those rows (and trains its groups) and the tallies are joined, so every rank returns
    the metrics of all of them. `grammar`: `scoring.grammar` compiled for the policy's
    tokenizer (rollouts sampled under it are scored under its masks). `call_token`: the
    policy's `<tool_call>` id (`call_token_id`): the entropy is also reported per region."""
    kept = [g for g in groups if g["status"] == "accepted"]
    fused = bool(kept) and same_in_train_mode(model)
    rest = [r for g in groups if not (fused and g["status"] == "accepted") for r in g["rows"]]
    # several ranks: each scores its share of the rows, the tallies are joined below
    tally = behaviour_tally(model, rest[backend.rank::backend.world], scoring, params,
                            grammar=grammar, call_token=call_token)
    if kept:
        out = update_policy(model, backend, kept, params, scoring, reference, entropy_coef,
                            policy_step, tally=tally if fused else None, grammar=grammar)
    else:
        out = {"train/optimizer_steps": 0.0}
    if backend.world > 1:
        tally = BehaviourTally.merged(_gather(tally))
    return {**out, **tally.metrics()}


def rollout_params(rollout: RolloutParams, params: GRPOParams, base_dir: Path) -> RolloutParams:
    """The environment of `rollout` with this loop's engine, model, G, seed and wave size."""
    return dataclasses.replace(rollout, engine=params.engine, model_dir=str(base_dir),
                               policy_version="", split=params.split, max_tasks=0,
                               group_size=params.group_size, seed=params.seed,
                               groups_per_wave=params.tasks_per_draw,
                               engine_options=params.engine_options)


# ---- dynamic sampling -------------------------------------------------------------------------
@dataclass
class Draw:
    """One draw: the tasks the curriculum chose, their G rollouts each, verified and scored."""

    index: int                        # global draw number = the rollouts' sampling round
    chosen: list[str]
    bands: dict[str, str]             # task -> band when it was chosen
    p_before: dict[str, float | None]  # task -> p̂ when it was chosen
    rows: list[dict]                  # scored passports, group then sample order
    timing: dict[str, float]


def make_draw(index: int, curriculum: Curriculum, by_id: Mapping[str, Task], engine,
              rp: RolloutParams, sandbox_params: SandboxParams, sandbox, verifier: Verifier,
              params: GRPOParams, parts_root: Path, lock: threading.Lock | None = None) -> Draw:
    """Select `tasks_per_draw` tasks, roll them out (G each, sampling round `index`), hand the
    submitted diffs to the verifier and apply its verdicts (SPEC §5 reward)."""
    with lock or contextlib.nullcontext():
        chosen = curriculum.select(params.tasks_per_draw, index)
        bands = {t: curriculum.band(t) for t in chosen}
        p_before = {t: curriculum.stats[t].p_hat for t in chosen}
    t0 = time.perf_counter()
    spent: dict = {}
    rows = roll_out([by_id[t] for t in chosen], rp, sandbox_params, parts_root, engine=engine,
                    sandbox=sandbox, sampling_round=index, stats=spent)
    t1 = time.perf_counter()
    patches = patch_rows([r for r in rows if needs_verdict(r)])
    verdicts = verifier([by_id[t] for t in chosen], patches) if patches else []
    rows = apply_verdicts(rows, verdicts, where=f"grpo draw {index}")
    return Draw(index, chosen, bands, p_before, rows,
                {"time/rollout_s": t1 - t0, "time/verify_s": time.perf_counter() - t1,
                 "time/generate_s": float(spent.get("generate_seconds", 0.0))})


def admit(rewards: list[float] | None, staleness: int, accepted: int, params: GRPOParams) -> str:
    """A group's status: `infra_error` (a rollout has no reward), `identical_rewards` (no
    signal), `stale` (Δv = v_trainer − v_rollout > max_staleness), `accepted` (while the
    batch needs groups) or `surplus`."""
    if rewards is None:
        return "infra_error"
    if max(rewards) == min(rewards):
        return "identical_rewards"
    if staleness > params.max_staleness:
        return "stale"
    return "accepted" if accepted < params.groups_per_step else "surplus"


def versions_behind(state: _State, rollout_step: int) -> int:
    """Δv of SPEC §7 = v_trainer − v_rollout in policy versions: how many weight versions the
    trainer published after the one (identified by its `policy_step`) that sampled the
    rollout. One loop step's update is one version, however many optimizer steps
    (`epochs` x `mini_batches`) it took, so `max_staleness: 1` admits a draw made with the
    weights one update behind."""
    return sum(rollout_step < p <= state.policy_step for p in state.published)


def share_groups(step: int, state: _State, curriculum: Curriculum,
                 next_draw: Callable[[int], Draw] | None, params: GRPOParams,
                 lock: threading.Lock, backend) -> tuple[list[dict], dict[str, float]]:
    """`collect_groups` on rank 0; with several ranks, its groups, the new ledger entries,
    the draw counter and the curriculum state are broadcast, so every rank trains on the same
    step batch and holds the same loop state (module docstring: data-parallel)."""
    if backend.world == 1:
        return collect_groups(step, state, curriculum, next_draw, params, lock)
    payload = None
    if backend.rank == 0:
        before = len(state.ledger)
        groups, timing = collect_groups(step, state, curriculum, next_draw, params, lock)
        with lock:
            payload = (groups, timing, state.draws, state.ledger[before:], curriculum.state())
    groups, timing, draws, entries, cur = backend.from_rank0(payload)
    if backend.rank != 0:
        state.draws = draws
        state.ledger.extend(entries)
        curriculum.load_state(cur)
    return groups, timing


def collect_groups(step: int, state: _State, curriculum: Curriculum,
                   next_draw: Callable[[int], Draw], params: GRPOParams,
                   lock: threading.Lock | None = None) -> tuple[list[dict], dict[str, float]]:
    """Draw groups until `groups_per_step` informative ones are kept or `max_draws` draws
    were made (SPEC §7 dynamic sampling). `next_draw(index)`: the draw with that index
    (made now, or taken from the async producer's queue). Every drawn group is returned and
    entered in the ledger with its status (`admit`) and staleness."""
    groups: list[dict] = []
    timing = {"time/rollout_s": 0.0, "time/verify_s": 0.0, "time/generate_s": 0.0}
    accepted = 0
    for _ in range(params.max_draws):
        if accepted >= params.groups_per_step:
            break
        draw = next_draw(state.draws)
        for k in timing:
            timing[k] += draw.timing[k]
        state.draws = draw.index + 1
        rows = draw.rows
        for gid in dict.fromkeys(r["group_id"] for r in rows):
            members = [r for r in rows if r["group_id"] == gid]
            task_id = members[0]["task_id"]
            with lock or contextlib.nullcontext():
                curriculum.update(task_id, [r["reward_outcome"] for r in members])
            rewards = final_rewards(members, params)
            staleness = versions_behind(state, min(int(r["policy_step"]) for r in members))
            status = admit(rewards, staleness, accepted, params)
            accepted += status == "accepted"
            group = {"step": step, "draw": draw.index, "group_id": gid, "task_id": task_id,
                     "band": draw.bands[task_id], "p_hat_before": draw.p_before[task_id],
                     "policy_step": int(members[0]["policy_step"]), "staleness": staleness,
                     "status": status, "rewards": rewards, "rows": members}
            groups.append(group)
            state.ledger.append({k: v for k, v in group.items() if k != "rows"}
                                | {"trajectory_ids": [r["trajectory_id"] for r in members]})
    return groups, timing


class DrawProducer:
    """Async mode (max_staleness > 0): a thread makes draws ahead of the trainer into a
    bounded queue (`queue_size` draws), so generation overlaps the update. New weights are
    handed over with `publish` and loaded into the sampler between draws (never during
    one), so every group comes from one policy version, which its rows record."""

    def __init__(self, make: Callable[[int], Draw], engine, start: int, queue_size: int):
        self.make, self.engine = make, engine
        self.queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self.stop = threading.Event()
        self.pending: tuple | None = None
        self.pending_lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, args=(start,), name="grpo-producer",
                                       daemon=True)
        self.thread.start()

    def publish(self, source: WeightSource, version: str, step: int) -> None:
        """Hand over the weights of `version` (a state dict is copied now: the trainer
        goes on updating it in place; a directory is already a snapshot)."""
        if isinstance(source, Mapping):
            source = {k: v.detach().clone() for k, v in source.items()}
        with self.pending_lock:
            self.pending = (source, version, step)

    def _run(self, index: int) -> None:
        try:
            while not self.stop.is_set():
                with self.pending_lock:
                    pending, self.pending = self.pending, None
                if pending is not None:
                    self.engine.sync_weights(*pending)
                item: Any = self.make(index)
                index += 1
                while not self.stop.is_set():
                    try:
                        self.queue.put(item, timeout=0.2)
                        break
                    except queue.Full:
                        continue
        except BaseException as exc:  # handed to the trainer, which re-raises it
            self.queue.put(exc)

    def next(self, index: int) -> Draw:
        item = self.queue.get()
        if isinstance(item, BaseException):
            raise item
        if item.index != index:
            raise RuntimeError(f"async producer delivered draw {item.index}, expected {index}")
        return item

    def close(self) -> None:
        self.stop.set()
        while self.thread.is_alive():
            try:
                self.queue.get(timeout=0.2)
            except queue.Empty:
                pass
        self.thread.join()


def final_rewards(rows: Sequence[Mapping[str, Any]], params: GRPOParams) -> list[float] | None:
    """R_final of each rollout of a group: SPEC §5 reward (from the verdict) with the overlong
    penalty; None if any rollout has no reward (an infra error: the group is not trained)."""
    if any(r["reward"] is None for r in rows):
        return None
    rewards = torch.tensor([float(r["reward"]) for r in rows], dtype=torch.float64)
    lengths = torch.tensor([int(r["n_trainable_tokens"]) for r in rows])
    return [float(x) for x in params.overlong.apply(rewards, lengths)]


# ---- the SPEC §7 update -----------------------------------------------------------------------
@dataclass
class _Seq:
    ids: torch.Tensor        # [L] long
    mask: torch.Tensor       # [L] bool, policy tokens
    behaviour: torch.Tensor  # [L] fp32, recorded sampler logprobs (index t = token t)
    turns: torch.Tensor      # [L] long, turn ids (-1 on the prompt)
    advantage: float
    n_turns: int             # turns with >= 1 predicted policy token (turn_mean's T_i)
    allowed: torch.Tensor | None = None  # [n_policy, W] int32 grammar masks, token order

    @property
    def n_policy(self) -> int:
        return int(self.mask[1:].sum())  # token 0 is never predicted


def _seq(row: Mapping[str, Any], advantage: float, grammar: TokenGrammar | None) -> _Seq:
    ids = torch.tensor(row["token_ids"], dtype=torch.long)
    mask = torch.tensor(row["loss_mask"], dtype=torch.bool)
    turns = torch.tensor(row["turn_ids"], dtype=torch.long)
    return _Seq(ids, mask, torch.tensor(row["logprobs"], dtype=torch.float32), turns,
                advantage, len(set(turns[1:][mask[1:]].tolist())),
                grammar_masks(ids, mask, turns, grammar))


def grammar_masks(ids: torch.Tensor, mask: torch.Tensor, turns: torch.Tensor,
                  grammar: TokenGrammar | None) -> torch.Tensor | None:
    """[n_policy, W] int32: the grammar mask the sampler applied before each predicted policy
    token (tokens 1.. with `mask`, in order), replayed turn by turn from the grammar's start
    (a grammar constrains one turn: each turn was its own generate call, whose prompt was
    every token before it). None without a grammar."""
    if grammar is None:
        return None
    pos = torch.nonzero(mask[1:]).squeeze(1) + 1
    if not len(pos):
        return torch.zeros(0, grammar.words, dtype=torch.int32)
    owner = turns[pos]
    starts = [0] + (torch.nonzero(owner[1:] != owner[:-1]).squeeze(1) + 1).tolist() + [len(pos)]
    return torch.cat([grammar.replay(ids[pos[a:b]].tolist(), ids[:pos[a]].tolist())
                      for a, b in zip(starts[:-1], starts[1:])])


def check_scoring(scoring: SamplingParams, grammar: TokenGrammar | None) -> None:
    """Rollouts sampled under a grammar are scored under its masks, and only then."""
    have = grammar.name if grammar is not None else ""
    if scoring.grammar != have:
        raise ConfigError(f"grpo: scoring under decoding.grammar {scoring.grammar!r} needs that "
                          f"grammar compiled for the policy's tokenizer (given: {have!r})")


def _sequences(groups: Sequence[Mapping[str, Any]], params: GRPOParams,
               grammar: TokenGrammar | None = None) -> list[_Seq]:
    rewards = torch.tensor([g["rewards"] for g in groups], dtype=torch.float64)  # [N, G]
    adv = compute_advantages(rewards, params.loss.advantage)                     # [N, G]
    out = []
    for gi, g in enumerate(groups):
        for si, r in enumerate(g["rows"]):
            if r["logprobs_kind"] != "behaviour":
                raise ConfigError(f"grpo: rollout {r['trajectory_id']} has no behaviour "
                                  "logprobs (a text teacher's tokens are never trained by RL)")
            out.append(_seq(r, float(adv[gi, si]), grammar))
    return out


def _collate(seqs: Sequence[_Seq], idx: Sequence[int], device) -> dict[str, torch.Tensor]:
    """Right-padded next-token tensors of `idx`: ids [b, L]; mask, behaviour, turns
    [b, L-1] (position j = token j+1); adv [b]; allowed [N, W] (the grammar masks of the
    mask's N positions, row-major: `sequence_logprobs`' order) or None."""
    L = max(len(seqs[i].ids) for i in idx)
    b = len(idx)
    ids = torch.zeros(b, L, dtype=torch.long)
    mask = torch.zeros(b, L, dtype=torch.bool)
    beh = torch.zeros(b, L, dtype=torch.float32)
    turns = torch.zeros(b, L, dtype=torch.long)
    for row, i in enumerate(idx):
        s, n = seqs[i], len(seqs[i].ids)
        ids[row, :n], mask[row, :n] = s.ids, s.mask
        beh[row, :n], turns[row, :n] = s.behaviour, s.turns
    return {"ids": ids.to(device), "mask": mask[:, 1:].to(device),
            "behaviour": beh[:, 1:].to(device), "turns": turns[:, 1:].clamp(min=0).to(device),
            "adv": torch.tensor([seqs[i].advantage for i in idx], dtype=torch.float32,
                                device=device),
            "allowed": (torch.cat([seqs[i].allowed for i in idx]).to(device)
                        if seqs[idx[0]].allowed is not None else None)}


def rank_groups(part: Sequence[int], rank: int, world: int) -> list[int]:
    """This rank's whole groups of one mini-batch (group indices `part`): group `part[i]` goes
    to rank i % world. Every rank holds the same groups (rank 0 drew them and broadcast
    them), so the shards partition the mini-batch and a group's G rollouts stay together."""
    return list(part)[rank::world]


def split_groups(n_groups: int, parts: int) -> list[list[int]]:
    """Group indices cut into `parts` contiguous, near-equal mini-batches (whole groups)."""
    parts = min(parts, n_groups)
    bounds = [round(i * n_groups / parts) for i in range(parts + 1)]
    return [list(range(bounds[i], bounds[i + 1])) for i in range(parts)]


@dataclass
class BehaviourTally:
    """Running sums of the behaviour-policy metrics (`behaviour_metrics`) over the policy
    tokens scored so far, so the rows the update trains on can be measured inside the
    update's own first forward pass (no second forward) and the other drawn rows by a
    no-grad pass; `metrics()` gives the same numbers as one pass over all of them.

    With `call_token` (the policy's `<tool_call>` id) the entropy is also split by region:
    `train/entropy_call` over the tool-call tokens of each turn (`call_region`), and
    `train/entropy_reasoning` over the rest. The reward is decided by the few call tokens
    while the free text around them drifts, so the all-token mean can rise while the actions
    collapse (LEARNING.md, "Where the entropy went")."""

    entropy_sum: float = 0.0
    tokens: float = 0.0
    trainer: list[torch.Tensor] = field(default_factory=list)    # [n] logprobs per batch
    behaviour: list[torch.Tensor] = field(default_factory=list)  # [n] recorded, same tokens
    call_token: int | None = None
    call_entropy_sum: float = 0.0
    call_tokens: float = 0.0

    def add(self, entropy: torch.Tensor, logprobs: torch.Tensor, behaviour: torch.Tensor,
            mask: torch.Tensor, ids: torch.Tensor, turns: torch.Tensor) -> None:
        """One scored batch: [b, T] entropy, trainer and behaviour logprobs, policy mask (the
        `_collate` layout); `ids` [b, T+1] and `turns` [b, T] for the region split."""
        ent = entropy.detach()
        self.entropy_sum += float(ent[mask].sum())
        self.tokens += float(mask.sum())
        self.trainer.append(logprobs.detach()[mask])
        self.behaviour.append(behaviour[mask])
        if self.call_token is not None:
            region = call_region(ids, mask, turns, self.call_token)
            self.call_entropy_sum += float(ent[region].sum())
            self.call_tokens += float(region.sum())

    @classmethod
    def merged(cls, tallies: Sequence[BehaviourTally]) -> BehaviourTally:
        """One tally of the rows several (ranks') tallies scored."""
        return cls(sum(t.entropy_sum for t in tallies), sum(t.tokens for t in tallies),
                   [x for t in tallies for x in t.trainer],
                   [x for t in tallies for x in t.behaviour],
                   tallies[0].call_token if tallies else None,
                   sum(t.call_entropy_sum for t in tallies), sum(t.call_tokens for t in tallies))

    def metrics(self) -> dict[str, float]:
        if not self.trainer:
            return {}
        t, beh = torch.cat(self.trainer)[None], torch.cat(self.behaviour)[None]
        mm = logprob_mismatch(t, beh, torch.ones_like(t, dtype=torch.bool))
        out = {"train/entropy": self.entropy_sum / self.tokens if self.tokens else 0.0,
               **{f"train/mismatch/{k}": v for k, v in mm.items()}}
        if self.call_token is not None:  # a region without tokens has no mean: no key
            if self.call_tokens:
                out["train/entropy_call"] = self.call_entropy_sum / self.call_tokens
            if self.tokens > self.call_tokens:
                out["train/entropy_reasoning"] = ((self.entropy_sum - self.call_entropy_sum)
                                                  / (self.tokens - self.call_tokens))
        return out


def call_token_id(tokenizer) -> int | None:
    """The id of the chat format's `<tool_call>` token in `tokenizer`, or None where it has
    no such single token (then the entropy is not split by region)."""
    if tokenizer is None:
        return None
    tid = tokenizer.convert_tokens_to_ids(TOOL_CALL)
    if tid is None or tid == tokenizer.unk_token_id:
        return None
    return int(tid)


def call_region(ids: torch.Tensor, mask: torch.Tensor, turns: torch.Tensor,
                call_token: int) -> torch.Tensor:
    """[b, T] bool, `_collate`'s next-token layout (position j = token j+1): the policy
    tokens from their turn's `<tool_call>` on (the call, `</tool_call>`, end of turn).
    ids: [b, T+1]; mask, turns: [b, T]. Only a sampled (policy) `<tool_call>` opens the
    region, so the token in a prompt or an observation never does."""
    is_call = (ids[:, 1:] == call_token) & mask
    pos = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = torch.where(is_call, pos, torch.full_like(pos, -1)).cummax(dim=1).values
    same_turn = turns.gather(1, last.clamp(min=0)) == turns
    return mask & (last >= 0) & same_turn


def same_in_train_mode(model) -> bool:
    """Whether the model computes the same function in train and eval mode (no active
    dropout), so a forward of the update (train mode) can stand in for the behaviour
    policy's (eval mode) in the logged metrics."""
    cfg = getattr(model, "config", None)
    for key in ("attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop",
                "attn_pdrop", "dropout"):
        if float(getattr(cfg, key, 0.0) or 0.0) > 0:
            return False
    return not any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0
                   for m in model.modules())


def update_policy(model, backend, groups: Sequence[Mapping[str, Any]], params: GRPOParams,
                  scoring: SamplingParams, reference, entropy_coef: float,
                  policy_step: int, tally: BehaviourTally | None = None,
                  grammar: TokenGrammar | None = None) -> dict[str, float]:
    """`epochs` x `mini_batches` optimizer steps of the SPEC §7 loss on the accepted groups.

    π_old (the weights before this update) costs no forward of its own where it need not:
    the first mini-batch's gradient forward of epoch 0 runs at exactly those weights, so its
    detached logprobs are π_old (ρ ≡ 1 bit for bit on that pass) and are reused by later
    epochs; only mini-batches after the first (whose epoch-0 forward comes after an
    optimizer step) get a no-grad π_old forward, before the first step. So with one
    mini-batch every optimizer step is one forward + backward per micro-batch.

    The entropy enters the graph only when its coefficient is non-zero; at 0 it is not
    computed here at all (unless `tally` asks for the behaviour metrics, then without a
    graph). `tally`: receives the entropy and trainer-vs-behaviour logprobs of every trained
    token at the pre-update weights (from the forwards above), so the loop needs no extra
    behaviour pass over these rows (valid when `same_in_train_mode(model)`).

    Normalisers are the mini-batch's and fixed before its first micro-batch: `constant`
    uses C = loss.loss_denominator or G·L (sequences × max policy tokens of the
    mini-batch), `token_mean` the mini-batch's policy tokens; `seq_mean` / `turn_mean`
    micro-batch means are weighted by their share of sequences / turns. So the update does
    not depend on `micro_batch_tokens`.

    Data-parallel (`backend.world` > 1, the deepspeed backend under a launcher): every rank
    is handed the same `groups`, forwards and back-propagates only its whole groups of each
    mini-batch (`rank_groups`), and divides by the normalisers above, which it counts over
    the whole mini-batch it holds (the global G·L, token and sequence counts: no count
    needs a collective). DeepSpeed averages the ranks' gradients, so each rank's loss is
    multiplied by the world size: the reduced gradient, its pre-clip norm and the step are
    the one-process ones on the whole batch. The logged metrics are merged over the ranks;
    `tally` gets this rank's rows only (`BehaviourTally.merged` joins them)."""
    cfg, G = params.loss, params.group_size
    rank, world = backend.rank, backend.world
    check_scoring(scoring, grammar)
    seqs = _sequences(groups, params, grammar)
    lengths = [len(s.ids) for s in seqs]
    device = params.device
    parts = split_groups(len(groups), params.mini_batches)
    minis = [[gi * G + k for gi in part for k in range(G)] for part in parts]

    def shard_layout(r: int) -> list[list[list[int]]]:
        return [micro_batches(lengths, [gi * G + k for gi in rank_groups(part, r, world)
                                        for k in range(G)], params.micro_batch_tokens)
                for part in parts]

    layouts = [shard_layout(r) for r in range(world)]
    layout = layouts[rank]
    # ZeRO >= 2 reduces gradients at every backward, so every rank makes as many backward
    # calls per optimizer step as the busiest one (the extra ones back-propagate 0).
    n_backward = [max(len(lay[j]) for lay in layouts) for j in range(len(parts))]

    def score(m, batch, grad: bool, entropy: bool = False):
        with torch.set_grad_enabled(grad):
            return sequence_logprobs(m, batch["ids"], None, scoring, only=batch["mask"],
                                     allowed=batch["allowed"], with_entropy=entropy,
                                     entropy_grad=grad and bool(entropy_coef),
                                     chunk_tokens=params.head_chunk_tokens)

    def idle_loss(mb: Sequence[int]) -> torch.Tensor:
        """0 x the loss of the mini-batch's shortest sequence: the backward a rank whose
        shard ran out of micro-batches still makes. A real forward, so the parameters'
        gradients become ready in the order of every other backward — ZeRO-2 fills its
        reduce buckets in that order and would pair mismatched gradients otherwise."""
        i = min((i for i in mb if seqs[i].n_policy > 0), key=lambda i: len(seqs[i].ids))
        batch = _collate(seqs, [i], device)
        return score(model, batch, True).logprobs.sum() * 0.0

    old, ref = {}, {}
    for j, micros in enumerate(layout):
        for micro in micros:
            batch = _collate(seqs, micro, device)
            if j > 0:  # π_old of a mini-batch trained after the first optimizer step
                sc = score(model, batch, False, entropy=tally is not None)
                old[tuple(micro)] = sc.logprobs
                if tally is not None:
                    tally.add(sc.entropy, sc.logprobs, batch["behaviour"], batch["mask"],
                              batch["ids"], batch["turns"])
            if reference is not None:
                ref[tuple(micro)] = score(reference, batch, False).logprobs.detach()
    sums: dict[str, float] = {}
    weights: dict[str, float] = {}
    first_dev, steps, losses, norms = None, 0, [], []
    denominators = []
    for epoch in range(params.epochs):
        for j, (mb, micros) in enumerate(zip(minis, layout)):
            n_seq = sum(seqs[i].n_policy > 0 for i in mb)
            n_tok = sum(seqs[i].n_policy for i in mb)
            n_turns = sum(seqs[i].n_turns for i in mb)
            max_resp = max(seqs[i].n_policy for i in mb)
            denom = cfg.denominator(n_seq, max_resp)
            if denom is not None:
                denominators.append(denom)
            fresh = epoch == 0 and j == 0  # at the pre-update weights: this forward is π_old
            loss_step = 0.0
            for k, micro in enumerate(micros):
                batch = _collate(seqs, micro, device)
                sc = score(model, batch, True,
                           entropy=bool(entropy_coef) or (fresh and tally is not None))
                if fresh:
                    old[tuple(micro)] = sc.logprobs.detach()
                    if tally is not None:
                        tally.add(sc.entropy, sc.logprobs, batch["behaviour"], batch["mask"],
                                  batch["ids"], batch["turns"])
                out = grpo_loss(sc.logprobs, old[tuple(micro)], batch["adv"], batch["mask"], cfg,
                                ref_logprobs=ref.get(tuple(micro)),
                                behaviour_logprobs=batch["behaviour"],
                                entropy=sc.entropy if entropy_coef else None,
                                entropy_coef=entropy_coef, turn_ids=batch["turns"],
                                denominator=denom, num_tokens=n_tok)
                share = 1.0
                if cfg.loss_aggregation == "seq_mean":
                    share = sum(seqs[i].n_policy > 0 for i in micro) / max(1, n_seq)
                elif cfg.loss_aggregation == "turn_mean":
                    share = sum(seqs[i].n_turns for i in micro) / max(1, n_turns)
                loss = out.loss * share
                # ranks' gradients are averaged: x world makes the average their sum
                backend.backward(loss * world, last=k == len(micros) - 1
                                 and n_backward[j] == len(micros))
                loss_step += float(loss.detach())
                w = out.metrics.get("policy_tokens", 0.0)
                for key, v in out.metrics.items():
                    if key in ("policy_tokens", "loss_denominator", "entropy"):
                        continue
                    if key in ("ratio_min", "ratio_max"):
                        pick = min if key == "ratio_min" else max
                        sums[key] = pick(sums.get(key, v), v)
                        continue
                    sums[key] = sums.get(key, 0.0) + v * w
                    weights[key] = weights.get(key, 0.0) + w
                if epoch == 0 and steps == 0 and "ratio_min" in out.metrics:
                    dev = max(abs(out.metrics["ratio_max"] - 1), abs(out.metrics["ratio_min"] - 1))
                    first_dev = dev if first_dev is None else max(first_dev, dev)
            for k in range(len(micros), n_backward[j]):  # this rank's shard ran out
                backend.backward(idle_loss(mb), last=k == n_backward[j] - 1)
            lr = lr_at(policy_step + steps, params)
            norms.append(backend.step(lr))
            losses.append(backend.all_sum(loss_step))
            steps += 1
    if world > 1:  # the global batch's metrics, not this rank's share
        sums, weights, first_dev = _merge_metrics(_gather((sums, weights, first_dev)))
    out_metrics = {f"train/{k}": (v / weights[k] if k in weights and weights[k] else v)
                   for k, v in sums.items()}
    out_metrics.update({
        "train/loss_mean": statistics.fmean(losses),
        "train/grad_norm": statistics.fmean(norms),
        "train/lr": lr_at(policy_step + steps - 1, params),
        "train/optimizer_steps": float(steps),
        "train/batch_sequences": float(len(seqs)),
        "train/batch_policy_tokens": float(sum(s.n_policy for s in seqs)),
        "train/first_pass_ratio_dev": float(first_dev) if first_dev is not None else 0.0,
    })
    if denominators:
        out_metrics["train/loss_denominator"] = float(denominators[-1])
    return out_metrics


def _gather(obj) -> list:
    """`obj` of every rank, in rank order (torch.distributed, already initialised by the
    deepspeed backend)."""
    import torch.distributed as dist

    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def _merge_metrics(per_rank: Sequence[tuple[dict, dict, float | None]]
                   ) -> tuple[dict[str, float], dict[str, float], float | None]:
    """The ranks' token-weighted metric sums added, ratio extremes and first-pass ratio
    deviation taken over all of them: the numbers one process would log for the batch."""
    sums: dict[str, float] = {}
    weights: dict[str, float] = {}
    devs = [d for _, _, d in per_rank if d is not None]
    for s, w, _ in per_rank:
        for key, v in s.items():
            if key in ("ratio_min", "ratio_max"):
                pick = min if key == "ratio_min" else max
                sums[key] = pick(sums.get(key, v), v)
            else:
                sums[key] = sums.get(key, 0.0) + v
        for key, v in w.items():
            weights[key] = weights.get(key, 0.0) + v
    return sums, weights, (max(devs) if devs else None)


def lr_at(optimizer_step: int, params: GRPOParams) -> float:
    """Linear warmup over `warmup_steps` optimizer steps, then constant."""
    if optimizer_step < params.warmup_steps:
        return params.learning_rate * (optimizer_step + 1) / (params.warmup_steps + 1)
    return params.learning_rate


def behaviour_metrics(model, rows: Sequence[Mapping[str, Any]], scoring: SamplingParams,
                      params: GRPOParams, tally: BehaviourTally | None = None,
                      grammar: TokenGrammar | None = None) -> dict[str, float]:
    """Entropy of the processed next-token distribution on every drawn rollout's policy
    tokens (the behaviour policy: synchronous, so the trainer's weights before the update)
    and the sampler/trainer logprob mismatch over the same tokens (logged, never assumed
    zero). No gradient. `tally`: sums already gathered for other rows (the update's own
    forward, `update_policy`), to which these rows are added."""
    return behaviour_tally(model, rows, scoring, params, tally, grammar).metrics()


def behaviour_tally(model, rows: Sequence[Mapping[str, Any]], scoring: SamplingParams,
                    params: GRPOParams, tally: BehaviourTally | None = None,
                    grammar: TokenGrammar | None = None,
                    call_token: int | None = None) -> BehaviourTally:
    """`behaviour_metrics`' no-grad pass (eval mode) over `rows`, into `tally` (or a new one,
    splitting the entropy at `call_token` when given)."""
    check_scoring(scoring, grammar)
    tally = tally if tally is not None else BehaviourTally(call_token=call_token)
    rows = [r for r in rows if r["logprobs_kind"] == "behaviour" and sum(r["loss_mask"]) > 0]
    if not rows:
        return tally
    seqs = [_seq(r, 0.0, grammar) for r in rows]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for micro in micro_batches([len(s.ids) for s in seqs], range(len(seqs)),
                                       params.micro_batch_tokens):
                b = _collate(seqs, micro, params.device)
                sc = sequence_logprobs(model, b["ids"], None, scoring, only=b["mask"],
                                       allowed=b["allowed"], with_entropy=True,
                                       chunk_tokens=params.head_chunk_tokens)
                tally.add(sc.entropy, sc.logprobs, b["behaviour"], b["mask"], b["ids"], b["turns"])
    finally:
        model.train(was_training)
    return tally


# ---- the dashboard ------------------------------------------------------------------------
def rollout_metrics(groups: Sequence[Mapping[str, Any]], state: _State,
                    curriculum: Curriculum) -> dict[str, float]:
    """Per-step SPEC §7 dashboard numbers of everything drawn this step (kept or not).
    Rollout age is in policy versions (Δv, `versions_behind`), the staleness bound's unit."""
    rows = [r for g in groups for r in g["rows"]]
    n = len(rows)
    graded = [r for r in rows if r["reward_outcome"] is not None]
    lengths = sorted(int(r["n_trainable_tokens"]) for r in rows)
    statuses = [g["status"] for g in groups]
    informative = sum(s in ("accepted", "surplus") for s in statuses)
    accepted = statuses.count("accepted")
    final = [x for g in groups if g["rewards"] is not None for x in g["rewards"]]
    m: dict[str, float] = {
        "train/groups_drawn": float(len(groups)),
        "train/groups_accepted": float(accepted),
        "train/groups_dropped": float(len(groups) - accepted),
        "train/informative_fraction": informative / len(groups) if groups else 0.0,
        "train/reward": statistics.fmean(final) if final else 0.0,
        "train/pass_at_1": (sum(r["reward_outcome"] >= 1 for r in graded) / len(graded)
                            if graded else 0.0),
        "train/parse_error_rate": parse_error_rate(rows) if rows else 0.0,
        "train/truncated_rate": sum(bool(r["truncated"]) for r in rows) / n if n else 0.0,
        "train/infra_error_rate": (sum(bool(r["infra_error"]) or r["verdict_reason"] ==
                                       "infra_error" for r in rows) / n if n else 0.0),
        "train/length_mean": statistics.fmean(lengths) if lengths else 0.0,
        "train/length_median": float(statistics.median(lengths)) if lengths else 0.0,
        "train/length_p90": float(lengths[min(n - 1, int(0.9 * n))]) if lengths else 0.0,
        "train/length_max": float(lengths[-1]) if lengths else 0.0,
        "train/turns_mean": statistics.fmean(r["n_turns"] for r in rows) if rows else 0.0,
    }
    for key in ("reward_outcome", "reward_format", "reward_length"):
        vals = [float(r[key]) for r in rows if r[key] is not None]
        m[f"train/{key}"] = statistics.fmean(vals) if vals else 0.0
    for reason in schemas.STOP_REASONS:
        m[f"train/stop/{reason}"] = (sum(r["stop_reason"] == reason for r in rows) / n
                                     if n else 0.0)
    for reason in ("timeout", "resource_limit"):
        m[f"train/verdict_{reason}_rate"] = (sum(r["verdict_reason"] == reason for r in rows)
                                             / n if n else 0.0)
    by_group = [g for g in groups if any(r["reward_outcome"] is not None for r in g["rows"])]
    m["train/pass_at_k"] = (sum(any((r["reward_outcome"] or 0) >= 1 for r in g["rows"])
                                for g in by_group) / len(by_group) if by_group else 0.0)
    m["train/group_distinct_fraction"] = (statistics.fmean(
        len({tuple(r["token_ids"]) for r in g["rows"]}) / len(g["rows"]) for g in groups)
        if groups else 0.0)
    ages = [versions_behind(state, int(r["policy_step"])) for r in rows]
    m["train/rollout_age_mean"] = statistics.fmean(ages) if ages else 0.0
    m["train/rollout_age_max"] = float(max(ages)) if ages else 0.0
    gen = sum(int(r["n_trainable_tokens"]) for r in rows)
    if accepted:
        m["train/tokens_per_effective_prompt"] = gen / accepted
    drawn = [g["task_id"] for g in groups]
    pim = curriculum.p_info_mean()
    pim_drawn = curriculum.p_info_mean(drawn)
    if pim is not None:
        m["train/p_info_mean"] = pim
    if pim_drawn:
        m["train/p_info_drawn"] = pim_drawn
        m["train/expected_draws"] = 1.0 / pim_drawn
    for band in BANDS:
        m[f"curriculum/drawn_{band}"] = float(sum(g["band"] == band for g in groups))
    for status in STATUSES:
        m[f"groups/{status}"] = float(statuses.count(status))
    for band in BANDS:  # SPEC §7: staleness drops by difficulty (strict bounds drop hard tasks)
        m[f"groups/stale_{band}"] = float(sum(g["status"] == "stale" and g["band"] == band
                                              for g in groups))
    kept = [g["staleness"] for g in groups if g["status"] == "accepted"]
    m["train/staleness_accepted_max"] = float(max(kept)) if kept else 0.0
    return m


# ---- checkpoints and output ---------------------------------------------------------------
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


def _checkpoints(run_dir: Path) -> list[Path]:
    root = run_dir / "checkpoints"
    return sorted(p for p in root.glob("step-*") if (p / STATE).is_file()) if root.is_dir() else []


def _load_state(run_dir: Path, max_step: int) -> tuple[_State, Path | None]:
    """The newest checkpoint of at most `max_step` steps (a run asked for fewer steps than
    an earlier one made starts from an earlier checkpoint, or afresh: the synchronous loop
    is deterministic, so either way it reproduces those steps)."""
    ckpts = [c for c in _checkpoints(run_dir) if int(c.name.split("-")[1]) <= max_step]
    if not ckpts:
        return _State(), None
    data = json.loads((ckpts[-1] / STATE).read_text())
    return _State(**data), ckpts[-1]


def save_checkpoint(run_dir: Path, model, backend, policy, base_dir: Path, params: GRPOParams,
                    state: _State, found) -> Path:
    """An HF directory with the update passport and policy_step, plus the optimizer and loop
    state, written to a temp dir and renamed into place; older ones beyond
    `keep_checkpoints` (and any of a longer earlier run, past this step) are removed."""
    dest = run_dir / "checkpoints" / f"step-{state.step:06d}"
    # ZeRO >= 1 partitions the optimizer state: every rank's part is kept (rank 0 writes)
    opts = _gather(backend.opt.state_dict()) if backend.world > 1 else [backend.opt.state_dict()]
    if backend.rank == 0:
        extra = {**{optimizer_file(r): o for r, o in enumerate(opts)},
                 STATE: json.dumps(dataclasses.asdict(state), sort_keys=True)}
        write_policy(dest, model, policy, base_dir, card(base_dir, params, state, found, None),
                     extra=extra)
        ckpts = _checkpoints(run_dir)
        later = [c for c in ckpts if int(c.name.split("-")[1]) > state.step]  # of a longer run
        mine = [c for c in ckpts if c not in later]
        for old in mine[:-params.keep_checkpoints] + later:
            shutil.rmtree(old, ignore_errors=True)
    backend.barrier()  # no rank goes on (or may be killed) before the checkpoint is whole
    return dest


def optimizer_file(rank: int) -> str:
    """A checkpoint's optimizer state of `rank` (rank 0's name is that of one process)."""
    return OPTIMIZER if rank == 0 else f"optimizer-rank{rank}.pt"


def card(base_dir: Path, params: GRPOParams, state: _State, found, curriculum_report,
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
                 extra: Mapping[str, Any] | None = None) -> None:
    """Weights + tokenizer + `training.json` + README (and `extra` files: a tensor state
    goes through torch.save, a string is written as text) to a temp dir, renamed into
    place."""
    from rlvr.artifacts.io import replace_dir

    out_dir = Path(out_dir)
    tmp = temp_dir_beside(out_dir)
    try:
        save_hf_weights(tmp, model, base_dir)
        (tmp / "training.json").write_text(json.dumps(card_, indent=1, sort_keys=True) + "\n")
        (tmp / "README.md").write_text(readme(card_))
        for name, value in (extra or {}).items():
            if isinstance(value, str):
                (tmp / name).write_text(value)
            else:
                torch.save(value, tmp / name)
        replace_dir(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


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
