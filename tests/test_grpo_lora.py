"""LoRA in GRPO (issue 37): only the adapters train, are checkpointed, resume and reach the
sampler; the KL reference is the base with the adapters disabled; the output is the merged
model (what the gate registers: the release gate run on it registers that directory, and it
loads as plain weights) with the adapter beside it. On the CPU default's tiny
policy and on the tiny Qwen3 under the real 151,669-token vocabulary (Hermes calls)."""
from __future__ import annotations

import copy
import json

import pytest
import torch

from agentkit import count_task, take_task, tiny_policy_dir
from grpokit import FORCED_BUDGETS, SANDBOX, ForcedFix, fake_verifier, forced, small_params, small_rollout
from rlvr.agent.codecs import load_codec
from rlvr.agent.episode import Budgets
from rlvr.agent.rollout import RolloutParams
from rlvr.engines.base import AdapterWeights, Decoding
from rlvr.engines.model_dir import load_policy
from rlvr.engines.torch_engine import TorchEngine
from rlvr.errors import ConfigError
from rlvr.train import grpo
from rlvr.train.grpo_config import parse_grpo_params
from rlvr.train.lora import (ADAPTER_DIR, AdaptersOff, RLLoraParams, adapter_weights, apply_lora,
                             reference_model)

pytestmark = pytest.mark.usefixtures("one_torch_thread")
LORA = {"enabled": True, "r": 4, "alpha": 8}


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("RLVR_PROGRESS", "0")


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    from rlvr.engines.tiny_model import build_tiny_qwen

    return build_tiny_qwen(tmp_path_factory.mktemp("lora") / "tiny-qwen3")


def _run(tmp_path, base, params, *, tasks=None, rollout=None, name="run", wrap=None):
    return grpo.train_grpo(base, tasks or [count_task()], params, rollout or small_rollout(),
                           SANDBOX, tmp_path / f"{name}-out", tmp_path / f"{name}-work",
                           verifier=fake_verifier, wrap_engine=wrap)


def _assert_only_adapters_moved(base_dir, out_dir, params):
    """The merged output equals base + the adapter's delta on the target modules, and the
    base exactly everywhere else; the adapter is a non-zero update."""
    base = load_policy(base_dir).model.state_dict()
    merged = load_policy(out_dir).model.state_dict()
    from safetensors.torch import load_file

    adapter = load_file(str(out_dir / ADAPTER_DIR / "adapter_model.safetensors"))
    b_mats = [v for k, v in adapter.items() if "lora_B" in k]
    assert b_mats and any(float(v.abs().max()) > 0 for v in b_mats)   # B starts at 0
    targets = tuple(f".{m}." for m in params.lora.target_modules)
    moved = [k for k in base if not torch.equal(base[k], merged[k])]
    assert moved and all(any(t in f".{k}" for t in targets) for k in moved), moved


def _gate_registers(tmp_path, monkeypatch, base_dir, out_dir):
    """The release gate run as the DAG runs it (`stages.gate`, candidate and champion
    directories hashed and checked against their evaluation) on evidence that favours the
    LoRA output: the registry's new version is that directory, and it loads as a plain model
    equal to what was written."""
    import gatekit as gk
    from rlvr.engines.model_dir import weights_fingerprint
    from rlvr.evaluate.report import write_eval
    from rlvr.tracking.registry import client, find_version
    from stages.gate import main

    uri = f"sqlite:///{tmp_path / 'registry.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("RLVR_TRACKING", "off")
    ev = tmp_path / "eval.parquet"
    write_eval(ev, gk.rows("champ", version=weights_fingerprint(base_dir)) +
               gk.rows("cand", {"heldout_function": gk.better_on_target},
                       version=weights_fingerprint(out_dir)))
    params = tmp_path / "gate-params.yaml"
    params.write_text(json.dumps({"gate": {"candidate": "cand", "champion": "champ",
                                           "candidate_dir": str(out_dir),
                                           "champion_dir": str(base_dir), "bootstrap": 200}}))
    out = tmp_path / "gate"
    main(["--params", str(params), "--eval", str(ev), "--out", str(out / "gate.json"),
          "--report", str(out / "gate.md"), "--metrics", str(out / "metrics.json")])
    gate = json.loads((out / "gate.json").read_text())
    assert gate["decision"] == "promote" and gate["registry"]["alias_moved"] is True
    version = find_version(client(uri), "rlvr-policy", weights_fingerprint(out_dir))
    assert version is not None and version.source == str(out_dir.resolve())
    loaded = load_policy(version.source).model.state_dict()
    assert not any("lora_" in k for k in loaded)                      # plain HF weights
    written = load_policy(out_dir).model.state_dict()
    assert all(torch.equal(loaded[k], written[k]) for k in written)


def test_two_lora_steps_train_the_adapters_only_on_the_cpu_default(tmp_path, bwrap_sandbox,
                                                                   monkeypatch):
    base = tiny_policy_dir()
    params = small_params(steps=2, lora=LORA)
    result = _run(tmp_path, base, params, rollout=small_rollout(**FORCED_BUDGETS),
                  wrap=forced(load_codec(base)))
    assert result.policy_step >= 2
    out = tmp_path / "run-out"
    _assert_only_adapters_moved(base, out, params)
    assert not any("lora_" in k for k in result.model.state_dict())   # returned merged
    card = json.loads((out / "training.json").read_text())
    assert card["passport"]["update"].startswith("LoRA r=4")
    # checkpoints hold the adapter and the optimizer over the adapters, not the model
    ckpt = sorted((tmp_path / "run-work").glob("*/checkpoints/step-*"))[-1]
    assert (ckpt / ADAPTER_DIR / "adapter_model.safetensors").is_file()
    assert not (ckpt / "model.safetensors").exists()
    from safetensors.torch import load_file

    opt = torch.load(ckpt / "optimizer.pt", weights_only=True)
    adapter = load_file(str(ckpt / ADAPTER_DIR / "adapter_model.safetensors"))
    assert sum(len(g["params"]) for g in opt["param_groups"]) == len(adapter)
    _gate_registers(tmp_path, monkeypatch, base, out)   # the merged output is what registers


def test_a_killed_lora_run_resumes_to_the_same_adapters(tmp_path, bwrap_sandbox):
    base = tiny_policy_dir()
    codec = load_codec(base)
    params = small_params(steps=2, lora=LORA)
    rollout = small_rollout(**FORCED_BUDGETS)
    tasks = [count_task(), take_task()]
    whole = _run(tmp_path, base, params, tasks=tasks, rollout=rollout, name="whole",
                 wrap=forced(codec))
    wrappers = []

    def killing(engine):  # step 2's first group: step 1's checkpoint is on disk
        wrappers.append(ForcedFix(engine, codec, kill_at_start=2 if not wrappers else None))
        return wrappers[-1]

    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, base, params, tasks=tasks, rollout=rollout, name="killed", wrap=killing)
    resumed = _run(tmp_path, base, params, tasks=tasks, rollout=rollout, name="killed",
                   wrap=killing)
    assert resumed.resumed_from == 1
    assert resumed.policy_version == whole.policy_version
    a, b = whole.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    from safetensors.torch import load_file

    ad = [load_file(str(tmp_path / f"{n}-out" / ADAPTER_DIR / "adapter_model.safetensors"))
          for n in ("whole", "killed")]
    assert ad[0].keys() == ad[1].keys() and all(torch.equal(ad[0][k], ad[1][k]) for k in ad[0])


def test_two_lora_steps_on_the_real_vocabulary_model_in_hermes(tmp_path, qwen_dir, bwrap_sandbox):
    params = small_params(steps=2, groups_per_step=1, tasks_per_draw=1, lora=LORA,
                          loss={"beta": 0.01})   # with the KL term: the adapters-off reference
    rollout = RolloutParams(workers=1, budgets=Budgets(max_turns=2, max_new_tokens_per_turn=48,
                                                       max_new_tokens_per_episode=96),
                            decoding=Decoding(temperature=1.0, grammar="tool_call.hermes"))
    result = _run(tmp_path, qwen_dir, params, rollout=rollout, wrap=forced(load_codec(qwen_dir)))
    assert result.policy_step >= 1
    _assert_only_adapters_moved(qwen_dir, tmp_path / "run-out", params)


def test_the_kl_reference_is_the_base_with_adapters_off_and_the_sampler_gets_adapters_only():
    base = tiny_policy_dir()
    policy = load_policy(base)
    ids = torch.tensor([[1, 5, 9, 12, 7]])
    want = policy.model(input_ids=ids).logits
    torch.manual_seed(0)
    model = apply_lora(load_policy(base).model, RLLoraParams(enabled=True, r=4, alpha=8), "grpo")
    engine = TorchEngine.from_model(copy.deepcopy(model), policy.tokenizer,
                                    policy_version="v0", policy_step=0)
    with torch.no_grad():
        for k, q in model.named_parameters():
            if "lora_B" in k:
                q.add_(0.5)                          # the adapters moved
    assert not torch.allclose(model(input_ids=ids).logits, want)
    with reference_model(AdaptersOff(model)) as ref:
        assert torch.equal(ref(input_ids=ids).logits, want)
    assert torch.allclose(model(input_ids=ids).logits, model(input_ids=ids).logits)  # back on
    update = adapter_weights(model)
    assert update and all("lora_" in k for k in update)
    engine.sync_weights(update, "v1", 1)
    assert torch.equal(engine.model(input_ids=ids).logits, model(input_ids=ids).logits)
    with pytest.raises(ValueError, match="adapter tensors this model lacks"):
        engine.sync_weights(AdapterWeights({"nope.lora_A.weight": torch.zeros(1)}), "v2", 2)


@pytest.mark.parametrize("value,key", [
    ({"lora": {"enabled": True, "r": 0}}, "grpo.lora.r"),
    ({"lora": {"enabled": True, "alpha": 0}}, "grpo.lora.alpha"),
    ({"lora": {"enabled": True, "r": 32}, "engine": "vllm",
      "engine_options": {"server": {"update": "lora", "max_lora_rank": 16}}}, "grpo.lora.r"),
    ({"lora": {"enabled": True}, "engine": "vllm",
      "engine_options": {"server": {"update": "reload"}}}, "grpo.engine_options.server.update"),
    ({"lora": {"rank": 8}}, "grpo.lora.rank"),
])
def test_bad_lora_params_name_the_key(value, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        parse_grpo_params(value)


def test_target_modules_the_model_lacks_are_refused_before_any_work(tmp_path):
    params = small_params(lora={"enabled": True, "target_modules": ["q_proj", "w_pack"]})
    with pytest.raises(ConfigError, match=r"grpo\.lora\.target_modules: \['w_pack'\]"):
        _run(tmp_path, tiny_policy_dir(), params, wrap=lambda e: pytest.fail("sampled"))
