"""Loss-masked SFT: only policy tokens are trained and counted, micro-batching changes
nothing, the model learns, full and LoRA checkpoints load back as plain HF directories with
the trained logits, DeepSpeed and torch take the same step, bad params are named."""
from __future__ import annotations

import json

import pytest
import torch

from rlvr.config import parse
from rlvr.engines.logprobs import logprobs_from_logits, sequence_logprobs
from rlvr.engines.model_dir import load_policy, load_tokenizer, weights_fingerprint
from rlvr.errors import ConfigError
from rlvr.train.batching import micro_batches
from rlvr.train.curves import LossCurves, write_loss_csv
from rlvr.train.demos import data_hash
from rlvr.train.sft import EarlyStopper, collate, masked_nll, to_examples, train_sft
from rlvr.train.sft_config import EarlyStopParams, LoraParams, SFTParams, parse_sft_params
from sftkit import rows, transcript  # noqa: F401  (rows: the fixture)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


FAST = dict(max_steps=4, batch_size=4, warmup_steps=0, learning_rate=3e-3, eval_every=2,
            early_stop=EarlyStopParams(parse_error_stop=None))


# ---- the loss mask -------------------------------------------------------------------------------
def test_40_policy_tokens_of_330_normaliser_40_and_masked_tokens_get_zero_gradient(policy_dir):
    model = load_policy(policy_dir).model
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, V, (1, 330), generator=g)
    mask = torch.zeros(1, 330, dtype=torch.bool)
    mask[0, 100:120] = True   # two policy turns of 20 tokens each
    mask[0, 250:270] = True
    ex = to_examples([{"token_ids": ids[0].tolist(), "loss_mask": mask[0].int().tolist()}])[0]
    assert ex.n_policy == 40  # the normaliser: loss_mask == 1 tokens, nothing else
    only = mask[:, 1:]
    # per-token loss gradient w.r.t. the logits: exactly 0 at every masked position
    logits = model(input_ids=ids).logits.detach()[:, :-1].clone().requires_grad_(True)
    lp, _ = logprobs_from_logits(logits[0], ids[0, 1:])
    loss = masked_nll(lp[None], only, ex.n_policy)
    loss.backward()
    grad = logits.grad[0]
    assert torch.count_nonzero(grad[~only[0]]) == 0
    assert bool((grad[only[0]].abs().sum(-1) > 0).all())
    manual = -lp[only[0]].sum() / 40
    assert torch.allclose(loss, manual)
    # the trainer's path (head on policy positions only) gives the same loss
    scored = sequence_logprobs(model, ids, None, only=only).logprobs
    assert torch.allclose(masked_nll(scored, only, 40), manual, atol=1e-5)
    # changing a masked *target* changes nothing but the context it is part of: the loss
    # over policy positions before it is unchanged
    ids2 = ids.clone()
    ids2[0, 300] = 5 + (int(ids[0, 300]) - 4) % (V - 5)
    assert torch.allclose(sequence_logprobs(model, ids2, None, only=only).logprobs,
                          scored, atol=1e-6)


def test_the_trainer_normalises_by_the_policy_tokens_of_the_global_batch(policy_dir, rows,
                                                                         tmp_path):
    """One step on one batch: logged loss == sum of policy NLL / policy-token count under
    the base weights; logged trainable tokens == that count."""
    model = load_policy(policy_dir).model
    ex = to_examples(rows[:4])
    n = sum(e.n_policy for e in ex)
    with torch.no_grad():
        ids, only = collate(ex, range(4), "cpu")
        expect = float(masked_nll(sequence_logprobs(model, ids, None, only=only).logprobs, only, n))
    seen = LossCurves()
    train_sft(policy_dir, rows[:4], [], SFTParams(**{**FAST, "max_steps": 1}), tmp_path / "o",
              log=seen)
    first = seen.rows[0]
    assert first["train/trainable_tokens"] == n == sum(r["n_trainable_tokens"] - r["loss_mask"][0]
                                                        for r in rows[:4])
    assert abs(first["train/loss"] - expect) < 1e-5


def test_micro_batching_does_not_change_the_gradient(policy_dir, rows):
    model = load_policy(policy_dir).model
    model.train()
    ex = to_examples(rows[:6])
    lengths = [len(e.ids) for e in ex]
    n = sum(e.n_policy for e in ex)
    grads = []
    for budget in (10**6, max(lengths)):  # one pass vs one row per pass
        model.zero_grad(set_to_none=True)
        cuts = micro_batches(lengths, range(6), budget, max_padding=1.0)
        for micro in cuts:
            ids, only = collate(ex, micro, "cpu")
            masked_nll(sequence_logprobs(model, ids, None, only=only).logprobs, only, n).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        assert len(cuts) == (1 if budget == 10**6 else 6)
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-4) for a, b in zip(*grads))


def test_micro_batches_respect_the_padded_token_budget():
    lengths = [50, 10, 30, 30, 45, 5, 29, 28]
    cuts = micro_batches(lengths, range(8), 100, max_padding=0.1)
    assert sorted(i for c in cuts for i in c) == list(range(8))
    assert all(len(c) * max(lengths[i] for i in c) <= 100 or len(c) == 1 for c in cuts)
    assert cuts[0] == [0, 4]  # longest first; 45 is within 10% of 50
    assert [2, 3, 6] in cuts  # 30, 30, 29 (28 would break the 100-token budget)
    assert micro_batches(lengths, range(8), 10**6, max_padding=1.0) == [[0, 4, 2, 3, 6, 7, 1, 5]]


# ---- learning and checkpoints --------------------------------------------------------------------
def test_loss_decreases_on_a_tiny_overfit_set(policy_dir, rows, tmp_path):
    seen = LossCurves()
    p = SFTParams(max_steps=25, batch_size=4, warmup_steps=2, learning_rate=2e-2, eval_every=0,
                  early_stop=EarlyStopParams(parse_error_stop=None))
    res = train_sft(policy_dir, rows[:4], rows[4:6], p, tmp_path / "o", log=seen)
    losses = [r["train/loss"] for r in seen.rows if "train/loss" in r]
    assert len(losses) == 25 and res.steps == 25 and res.stop_reason == "max_steps"
    assert losses[-1] < 0.5 * losses[0]
    assert res.val_loss is not None and res.evals[-1]["step"] == 25


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_full_checkpoint_loads_back_with_the_trained_logits_and_a_card(policy_dir, rows, tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "policy-sft"
    res = train_sft(policy_dir, rows[:8], rows[8:], SFTParams(**FAST), out)
    loaded = AutoModelForCausalLM.from_pretrained(out)
    ids = torch.tensor([rows[0]["token_ids"]])
    assert torch.allclose(_logits(loaded, ids), _logits(res.model, ids), atol=1e-5)
    assert not torch.allclose(_logits(loaded, ids), _logits(load_policy(policy_dir).model, ids),
                              atol=1e-3)
    card = json.loads((out / "training.json").read_text())
    assert card["base_model_hash"] == weights_fingerprint(policy_dir)
    assert card["data_hash"] == data_hash(rows[:8] + rows[8:])
    assert card["params"]["learning_rate"] == 3e-3 and card["metrics"]["steps"] == 4
    assert card["metrics"]["val_loss"] == pytest.approx(res.val_loss, abs=1e-5)
    assert "data hash" in (out / "README.md").read_text()
    assert load_tokenizer(out)("def f").input_ids == load_tokenizer(policy_dir)("def f").input_ids
    assert load_policy(out).version == weights_fingerprint(out)
    assert not list(tmp_path.glob(".policy-sft*"))  # no temp dir left behind


def test_lora_checkpoint_loads_back_merged_and_as_an_adapter(policy_dir, rows, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = tmp_path / "lora"
    p = SFTParams(**{**FAST, "learning_rate": 2e-2},
                  lora=LoraParams(enabled=True, r=8, alpha=16))
    res = train_sft(policy_dir, rows[:8], rows[8:], p, out)
    ids = torch.tensor([rows[1]["token_ids"]])
    merged = AutoModelForCausalLM.from_pretrained(out)
    assert torch.allclose(_logits(merged, ids), _logits(res.model, ids), atol=1e-5)
    base_model = load_policy(policy_dir).model
    assert not torch.allclose(_logits(merged, ids), _logits(base_model, ids), atol=1e-4)
    adapted = PeftModel.from_pretrained(base_model, out / "adapter")
    assert torch.allclose(_logits(adapted, ids), _logits(merged, ids), atol=1e-5)
    # LoRA touched only the targeted matrices: embeddings and norms are the base's
    sd, sd0 = merged.state_dict(), load_policy(policy_dir).model.state_dict()
    assert torch.equal(sd["model.embed_tokens.weight"], sd0["model.embed_tokens.weight"])
    assert not torch.equal(sd["model.layers.0.mlp.down_proj.weight"],
                           sd0["model.layers.0.mlp.down_proj.weight"])


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_one_deepspeed_step_equals_one_torch_step(policy_dir, rows, tmp_path, stage):
    p = dict(max_steps=1, batch_size=6, warmup_steps=0, learning_rate=1e-2, eval_every=0,
             micro_batch_tokens=600, grad_clip=0.5, weight_decay=0.1,
             early_stop=EarlyStopParams(parse_error_stop=None))
    from transformers import AutoModelForCausalLM

    train_sft(policy_dir, rows[:6], [], SFTParams(**p), tmp_path / "torch")
    train_sft(policy_dir, rows[:6], [], SFTParams(**p, backend="deepspeed", zero_stage=stage),
              tmp_path / "ds")
    # compared as written (under ZeRO-3 the in-memory weights are partitioned)
    ref, ds = (AutoModelForCausalLM.from_pretrained(tmp_path / d) for d in ("torch", "ds"))
    b = load_policy(policy_dir).model.state_dict()
    for (name, a), (_, d) in zip(ref.state_dict().items(), ds.state_dict().items()):
        assert not torch.equal(a, b[name]), name  # the step moved every weight
        assert torch.allclose(a, d, atol=1e-6, rtol=1e-5), name


# ---- stopping ----------------------------------------------------------------------------------
def test_early_stopper_stops_when_validation_worsens_while_train_loss_falls():
    s = EarlyStopper(SFTParams(early_stop=EarlyStopParams(patience=2, parse_error_stop=None)))
    assert s.update(10, 3.0, 2.0, None) is None and s.improved
    assert s.update(20, 2.5, 2.1, None) is None
    assert s.update(30, 2.0, 2.2, None) == "val_worsening"
    # validation worsening while the train loss rises too is not over-fitting: go on
    s = EarlyStopper(SFTParams(early_stop=EarlyStopParams(patience=1, parse_error_stop=None)))
    s.update(10, 3.0, 2.0, None)
    assert s.update(20, 3.5, 2.5, None) is None


def test_early_stopper_stops_once_the_format_is_stable_after_min_steps():
    s = EarlyStopper(SFTParams(early_stop=EarlyStopParams(parse_error_stop=0.05,
                                                          parse_error_evals=2, min_steps=15)))
    assert s.update(5, 3.0, None, 0.01) is None     # before min_steps
    assert s.update(10, 2.0, None, 0.30) is None    # resets the streak
    assert s.update(20, 1.5, None, 0.04) is None
    assert s.update(30, 1.4, None, 0.02) == "format_stable"


def test_on_eval_numbers_are_logged_and_drive_the_stop(policy_dir, rows, tmp_path):
    calls = []

    def on_eval(step, model):
        assert not model.training
        calls.append(step)
        return {"parse_error_rate": 0.5 if step < 4 else 0.01}

    seen = LossCurves()
    p = SFTParams(max_steps=20, batch_size=4, eval_every=2, warmup_steps=0,
                  early_stop=EarlyStopParams(parse_error_stop=0.05))
    res = train_sft(policy_dir, rows[:8], rows[8:], p, tmp_path / "o", log=seen, on_eval=on_eval)
    assert res.stop_reason == "format_stable" and res.steps == 4 and calls == [2, 4]
    assert [r["eval/parse_error_rate"] for r in seen.rows if "eval/parse_error_rate" in r] == [0.5, 0.01]
    assert json.loads((tmp_path / "o" / "training.json").read_text())["metrics"]["stop_reason"] \
        == "format_stable"


def test_loss_csv_has_one_row_per_step(tmp_path):
    rows = [{"step": 1, "train/loss": 2.0}, {"step": 2, "train/loss": 1.5},
            {"step": 2, "val/loss": 1.7}]
    write_loss_csv(tmp_path / "loss.csv", rows)
    assert (tmp_path / "loss.csv").read_text().splitlines() == [
        "step,train_loss,val_loss", "1,2,", "2,1.5,1.7"]


# ---- params ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("section, key", [
    ({"learning_rate": 0}, "sft.learning_rate"),
    ({"learning_rte": 1e-3}, "sft.learning_rte"),
    ({"batch_size": "16"}, "sft.batch_size"),
    ({"backend": "jax"}, "sft.backend"),
    ({"zero_stage": 2}, "sft.zero_stage"),                      # ZeRO without deepspeed
    ({"backend": "deepspeed", "zero_stage": 5}, "sft.zero_stage"),
    ({"backend": "deepspeed", "zero_stage": 3, "lora": {"enabled": True}}, "sft.zero_stage"),
    ({"epochs": 0, "max_steps": 0}, "sft.max_steps"),
    ({"lr_scheduler_type": "step"}, "sft.lr_scheduler_type"),
    ({"lora": {"enabled": True, "r": 0}}, "sft.lora.r"),
    ({"lora": {"rank": 8}}, "sft.lora.rank"),
    ({"demos": {"val_fraction": 1.0}}, "sft.demos.val_fraction"),
    ({"demos": {"max_per_task": -1}}, "sft.demos.max_per_task"),
    ({"early_stop": {"parse_error_stop": 2.0}}, "sft.early_stop.parse_error_stop"),
    ({"early_stop": {"patience": -1}}, "sft.early_stop.patience"),
])
def test_bad_params_are_a_config_error_naming_the_key(section, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.") + r"\b"):
        parse_sft_params(section)


def test_a_lora_target_the_model_lacks_is_named(policy_dir, rows, tmp_path):
    p = SFTParams(**FAST, lora=LoraParams(enabled=True, target_modules=("q_proj", "c_attn")))
    with pytest.raises(ConfigError, match=r"sft\.lora\.target_modules.*c_attn"):
        train_sft(policy_dir, rows[:4], [], p, tmp_path / "o")


def test_params_yaml_sft_section_parses():
    from rlvr.config import read_params

    p = parse_sft_params(read_params("params.yaml")["sft"])
    assert p == parse(SFTParams, read_params("params.yaml")["sft"], "sft")
    assert set(p.lora.target_modules) >= {"q_proj", "gate_proj", "up_proj", "down_proj"}


def test_validation_worsening_while_train_falls_stops_and_writes_the_best_weights(policy_dir,
                                                                                  tmp_path):
    """Over-fit 2 transcripts at a high rate; validate on transcripts whose actions differ:
    validation gets worse while the train loss falls -> stop, and the written weights are
    those of the best validation evaluation."""
    tok = load_tokenizer(policy_dir)
    train_rows = [transcript(tok, i) for i in range(2)]
    val_rows = []
    for i in range(2):
        r = transcript(tok, 100 + i)
        act = tok.encode('<tool_call>{"name": "submit", "args": {}}</tool_call>')
        r = {**r, "trajectory_id": f"v{i}", "token_ids": r["token_ids"] + act,
             "loss_mask": [0] * len(r["loss_mask"]) + [1] * len(act)}
        val_rows.append(r)
    p = SFTParams(max_steps=60, batch_size=2, warmup_steps=0, learning_rate=3e-2, eval_every=3,
                  lr_scheduler_type="constant",
                  early_stop=EarlyStopParams(patience=2, parse_error_stop=None))
    res = train_sft(policy_dir, train_rows, val_rows, p, tmp_path / "o")
    vals = [e["val/loss"] for e in res.evals]
    assert res.stop_reason == "val_worsening" and res.steps < 60
    assert res.val_loss == pytest.approx(min(vals)) and vals[-1] > min(vals)
    from transformers import AutoModelForCausalLM

    written = AutoModelForCausalLM.from_pretrained(tmp_path / "o")
    ex = to_examples(val_rows)
    with torch.no_grad():
        ids, only = collate(ex, range(2), "cpu")
        n = sum(e.n_policy for e in ex)
        loss = float(masked_nll(sequence_logprobs(written, ids, None, only=only).logprobs, only, n))
    assert loss == pytest.approx(min(vals), abs=1e-4)
