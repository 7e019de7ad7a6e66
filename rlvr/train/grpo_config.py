"""The `grpo:` section of params.yaml (SPEC §7): the online GRPO loop (rlvr/train/grpo.py).

Names follow TRL `GRPOConfig` / verl where one exists (num_generations -> group_size,
num_iterations -> epochs, learning_rate, max_grad_norm -> grad_clip, beta, epsilon ->
loss.eps_low, epsilon_high -> loss.eps_high, scale_rewards -> loss.advantage.scale_rewards,
loss_type -> loss.loss_aggregation, importance_sampling cap -> loss.tis_cap; verl
filter_groups.max_num_gen_batches -> max_draws), so a reader who knows those reads these
without a glossary. Every key is typed (rlvr.config: an unknown or mistyped key is a
ConfigError naming it) and `GRPOParams.check` refuses values without meaning, naming the
dotted key. The agent environment (budgets, decoding, repetition guard, reward weights,
warm tools) is the `rollout` section, shared with the SFT demonstrations and kept equal to
the deployment budgets of `evaluate` (SPEC §7 "Truncation").
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rlvr.config import DEFAULT_PARAMS, parse, read_params
from rlvr.errors import ConfigError
from rlvr.rl.entropy import EntropyController
from rlvr.rl.loss import GRPOLossConfig
from rlvr.rl.overlong import OverlongParams
from rlvr.train.backend import check_adamw, check_backend
from rlvr.train.curriculum import CurriculumParams
from rlvr.train.lora import RLLoraParams
from rlvr.train.pathology import PathologyParams


@dataclass(frozen=True)
class GRPOParams:
    """The online GRPO loop: sample tasks -> G rollouts each -> enclave verdicts -> reward
    -> dynamic sampling (+ staleness admission) -> SPEC §7 loss -> optimizer step -> sync."""

    seed: int = 0
    """Task pool sample, curriculum draws, rollout seeds (every draw is its own sampling
    round of the same seed), torch init of anything random."""
    split: str = "train"
    """Split the task pool is taken from (never a held-out one: the evaluation's)."""
    max_tasks: int = 0
    """Task pool size: a seeded sample of the split; 0 = every task of the split."""
    steps: int = 8
    """Loop iterations. Each one fills (or, at the draw cap, tries to fill) a batch and
    runs `epochs` x `mini_batches` optimizer steps on it — none if no group was
    informative (the weights and policy_step then stay)."""
    group_size: int = 4
    """G, rollouts per task and group (TRL num_generations)."""
    groups_per_step: int = 4
    """B, informative groups that fill a step's batch (dynamic sampling's target)."""
    tasks_per_draw: int = 4
    """Groups rolled out together per draw (one engine wave); draws repeat until B
    informative groups are collected or `max_draws` is reached."""
    max_draws: int = 2
    """Cap on draws per step (verl max_num_gen_batches): a step never samples more than
    max_draws x tasks_per_draw groups; with fewer informative groups it trains on those."""
    epochs: int = 1
    """Passes over each batch (TRL num_iterations; multi-epoch reuse, recorded). The first
    pass's ratio is exactly 1 (old logprobs = the trainer's own forward)."""
    mini_batches: int = 1
    """Optimizer steps per epoch: the batch's groups cut into this many parts (whole
    groups: a group's advantages are computed together)."""
    learning_rate: float = 1e-4
    """Constant AdamW learning rate (after `warmup_steps`)."""
    warmup_steps: int = 0
    """Optimizer steps of linear warmup from 0 to `learning_rate`."""
    grad_clip: float = 1.0
    """Max global grad norm (TRL max_grad_norm); 0 = off."""
    weight_decay: float = 0.0
    """AdamW decay on matrices only (never norms / biases)."""
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_eps: float = 1e-8
    micro_batch_tokens: int = 16384
    """Padded tokens per forward/backward pass (memory; the update does not depend on it:
    every loss normaliser is the mini-batch's, fixed before the first micro-batch)."""
    packed: bool = False
    """Padding-free micro-batches for the update's (and the behaviour pass's) forwards: the
    rows of each run packed into one row, up to `micro_batch_tokens` real tokens
    (rlvr/engines/logprobs.py). The loss, its masks and normalisers (SPEC §7) are unchanged,
    so are the gradients; the model must take packed positions (checked at load)."""
    head_chunk_tokens: int = 4096
    """Rows of logits per LM-head chunk (peak memory of the head; results unchanged)."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    device: str = "cpu"
    engine: Literal["torch", "vllm"] = "torch"
    """The sampler the rollouts come from (rlvr/train/sampler.py): torch = an in-process
    copy of the trained weights, synced from the state dict after every update; vllm = a
    vLLM server, synced through a policy directory written after every update."""
    engine_options: dict[str, Any] = field(default_factory=dict)
    """vllm: VllmEngineParams fields (`server:` nested, e.g. `{server: {update: reload}}`),
    validated like `rollout.engine_options`; torch: none."""
    backend: Literal["torch", "deepspeed"] = "torch"
    """torch: AdamW; deepspeed: the same AdamW under a DeepSpeed engine (ZeRO `zero_stage`;
    rlvr/train/backend.py, shared with SFT). Started by a launcher with several ranks
    (`torchrun`, `deepspeed`) the deepspeed backend trains data-parallel over whole groups;
    rank 0 rolls out (rlvr/train/grpo.py, data-parallel)."""
    zero_stage: int = 0
    """0-3 under `backend: deepspeed`: 1-2 shard the optimizer state and gradients over the
    ranks, 3 the parameters too (each forward then needs every rank; rank 0 samples from a
    whole copy with the torch engine — use `engine: vllm` for a model that needs ZeRO-3; not
    with `lora`). rlvr/train/grpo.py, ZeRO-3."""
    activation_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward instead of keeping them
    (HF gradient checkpointing, rlvr/train/backend.py): activation memory ~one layer's for
    ~30% more update compute; the gradients are the same."""
    lora: RLLoraParams = field(default_factory=RLLoraParams)
    """LoRA (peft) instead of a full fine-tune (`enabled`; r, alpha, dropout, target_modules
    as SFT's, rlvr/train/lora.py; RL's rank 8-32, SPEC §6): only the adapters train, are
    checkpointed and reach the sampler (the torch engine loads them in place, a vLLM server
    with `server.update: lora` hot-loads an adapter directory); the KL reference is the base
    with the adapters disabled; the output directory holds the merged model (what `gate`
    registers) and the adapter under `adapter/`."""
    loss: GRPOLossConfig = field(default_factory=GRPOLossConfig)
    """The SPEC §7 loss: advantage estimator and reward scaling, ratio level, clip range
    (eps_low <= eps_high), beta (k3 KL to the frozen initial policy; 0 = no reference
    loaded), aggregation and its denominator, TIS cap (rlvr/rl/loss.py documents each)."""
    overlong: OverlongParams = field(default_factory=OverlongParams)
    """SPEC §5 overlong penalty on the reward (none | threshold | dapo; rlvr/rl/overlong.py);
    lengths are generated (policy) tokens per rollout."""
    entropy: EntropyController = field(default_factory=lambda: EntropyController(eta=0.0))
    """SPEC §7 adaptive entropy controller (coef = α_0, eta, h_min, h_max, coef_min,
    coef_max; rlvr/rl/entropy.py). Default off (coef 0, eta 0): measured entropy is logged."""
    curriculum: CurriculumParams = field(default_factory=CurriculumParams)
    """Difficulty-band task sampler (rlvr/train/curriculum.py)."""
    pathology: PathologyParams = field(default_factory=PathologyParams)
    """Thresholds of the named pathology flags (rlvr/train/pathology.py)."""
    max_staleness: int = 0
    """Δv_max (SPEC §7 staleness): a group is trained on only if v_trainer − v_rollout <= this
    (else dropped as `stale`, logged by difficulty band). v counts policy versions: one per
    loop step that updated the weights, however many optimizer steps (`epochs` x
    `mini_batches`) that update took, so 1 admits a draw sampled one update behind (the
    normal case of a producer one draw ahead). 0 = synchronous: every draw is made
    inline with the current weights. > 0: a producer thread draws ahead into a bounded queue
    while the trainer updates (prime-rl max_off_policy_steps, AReaL max_head_offpolicyness);
    the truncated-IS weights correct the residual lag."""
    queue_size: int = 2
    """Async only: draws buffered between the rollout producer and the trainer (the bound
    on how far generation runs ahead)."""
    rollout_workers: int = 0
    """0: rank 0 rolls the draws out itself. N: N Ray actors do (rlvr/train/rollout_workers.py),
    one group at a time each, with their own collector, workspaces, tool sandboxes and a
    client of the sampler's vLLM servers (`engine: vllm`); a worker that dies has its groups
    re-queued on the others. Same groups as 0 for the same seeds."""
    ray_address: str = ""
    """With rollout_workers: the Ray cluster to place them on ("" = start one on this host;
    "auto" or ray://HEAD:10001 = join a running one, whose hosts then run the workers)."""
    consensus_runs: int = 3
    """R fresh enclaves for a first-time pass (SPEC §4 flaky-test consensus)."""
    verify_seed: int = 1234
    """Verification seed of every candidate (a function of it and the trajectory id)."""
    checkpoint_every: int = 1
    """Loop steps between resumable checkpoints (HF dir + optimizer + sampler state);
    the last step always writes one."""
    keep_checkpoints: int = 2
    """Newest checkpoints kept in the work directory (older ones are removed)."""

    def check(self, where: str = "grpo") -> "GRPOParams":
        """Refuse values without meaning, naming the key; returns self."""
        def bad(key: str, why: str, value: Any) -> None:
            raise ConfigError(f"{where}.{key}: {why}, got {value!r}")

        for key in ("steps", "groups_per_step", "tasks_per_draw", "max_draws", "epochs",
                    "mini_batches", "micro_batch_tokens", "head_chunk_tokens",
                    "checkpoint_every", "keep_checkpoints"):
            if getattr(self, key) < 1:
                bad(key, "must be >= 1", getattr(self, key))
        if self.group_size < 2:
            bad("group_size", "must be >= 2 (a group of one has no relative advantage)",
                self.group_size)
        if self.rollout_workers < 0:
            bad("rollout_workers", "must be >= 0", self.rollout_workers)
        if self.rollout_workers and self.engine != "vllm":
            bad("rollout_workers", "needs engine: vllm (the workers are clients of the "
                "sampler's servers)", self.rollout_workers)
        for key in ("max_tasks", "warmup_steps"):
            if getattr(self, key) < 0:
                bad(key, "must be >= 0", getattr(self, key))
        if self.mini_batches > self.groups_per_step:
            bad("mini_batches", f"must be <= groups_per_step ({self.groups_per_step}): a "
                "mini-batch holds whole groups", self.mini_batches)
        if not self.learning_rate > 0:
            bad("learning_rate", "must be > 0", self.learning_rate)
        check_adamw(self, bad)
        if self.max_staleness < 0:
            bad("max_staleness", "must be >= 0 (0 = synchronous)", self.max_staleness)
        if self.queue_size < 1:
            bad("queue_size", "must be >= 1", self.queue_size)
        if self.consensus_runs < 1:
            bad("consensus_runs", "must be >= 1", self.consensus_runs)
        if self.split in ("heldout", "heldout_function", "regression"):
            bad("split", "GRPO never trains on an evaluation split", self.split)
        check_backend(self, bad)
        self.lora.check(bad)
        if self.engine == "torch" and self.engine_options:
            bad("engine_options", "the torch sampler is the trainer's model in process and "
                "takes none", self.engine_options)
        if self.engine == "vllm":  # a typo is named here, before any server starts
            # lazy: vllm_engine pulls in httpx (~0.13 s); only a vllm run needs it
            from rlvr.engines.vllm_engine import VllmEngineParams

            served = parse(VllmEngineParams, self.engine_options, f"{where}.engine_options")
            served.urls(f"{where}.engine_options")
            if self.lora.enabled:
                if served.server.update != "lora":
                    bad("engine_options.server.update", "must be 'lora' with lora.enabled (the "
                        "server hot-loads each update's adapter)", served.server.update)
                if self.lora.r > served.server.max_lora_rank:
                    bad("lora.r", f"exceeds the vLLM server's max_lora_rank "
                        f"({served.server.max_lora_rank}: engine_options.server.max_lora_rank)",
                        self.lora.r)
        return self

    def passport(self, loss_denominator: float | None = None) -> dict[str, Any]:
        """The SPEC §7 update passport of this run (the loss's fields + the trainer's)."""
        return {
            **self.loss.passport(),
            "loss_denominator_used": loss_denominator,
            "epochs_per_batch": self.epochs,
            "mini_batches_per_epoch": self.mini_batches,
            "group_size": self.group_size,
            "groups_per_step": self.groups_per_step,
            "tasks_per_draw": self.tasks_per_draw,
            "max_draws": self.max_draws,
            "dynamic_sampling": "drop identical-reward groups; keep drawing to "
                                "groups_per_step or max_draws",
            "grad_accumulation": ("micro-batches of <= micro_batch_tokens "
                                  + ("real tokens, packed" if self.packed else "padded tokens")
                                  + "; normaliser fixed per mini-batch"),
            "entropy_coef": self.entropy.coef,
            "entropy_band": [self.entropy.h_min, self.entropy.h_max],
            "entropy_eta": self.entropy.eta,
            "entropy_control": "adaptive" if self.entropy.enabled else "off",
            "overlong": self.overlong.mode,
            "staleness_bound": self.max_staleness,
            "mode": "synchronous" if self.max_staleness == 0 else
                    f"async (producer thread, queue of {self.queue_size} draws)",
            "kl_reference": ("none" if not self.loss.uses_reference else
                             "the base (adapters disabled)" if self.lora.enabled else
                             "frozen initial policy"),
            "update": (f"LoRA r={self.lora.r} alpha={self.lora.alpha} on "
                       f"{', '.join(self.lora.target_modules)}" if self.lora.enabled
                       else "full fine-tune"),
            "learning_rate": self.learning_rate,
            "optimizer": f"AdamW ({self.backend})",
        }


SUBSECTIONS = {"lora": RLLoraParams, "loss": GRPOLossConfig, "overlong": OverlongParams, "entropy": EntropyController,
               "curriculum": CurriculumParams, "pathology": PathologyParams}


def parse_grpo_params(value: dict, where: str = "grpo") -> GRPOParams:
    """A mapping (the YAML section) -> checked GRPOParams; a sub-section's own validation
    error is re-raised with its dotted key (`grpo.loss.eps_high: ...`)."""
    try:
        return parse(GRPOParams, value, where).check(where)
    except ConfigError as exc:
        raise _named(exc, value, where) from None


def _named(exc: ConfigError, value: Any, where: str) -> ConfigError:
    msg = str(exc)
    if msg.startswith(f"{where}.") or not isinstance(value, dict):
        return exc
    for name, cls in SUBSECTIONS.items():
        if isinstance(value.get(name), dict):
            try:
                parse(cls, value[name], f"{where}.{name}")
            except ConfigError as inner:
                text = str(inner)
                if text.startswith(f"{where}."):
                    return inner
                short = text.split(".", 1)[1] if text.startswith(f"{name}.") else text
                return ConfigError(f"{where}.{name}.{short}")
    return ConfigError(f"{where}: {msg}")


def load_grpo_params(path: Path | str = DEFAULT_PARAMS, section: str = "grpo") -> GRPOParams:
    data = read_params(path)
    if section not in data:
        raise ConfigError(f"{path}: missing section '{section}'")
    return parse_grpo_params(data[section], section)
