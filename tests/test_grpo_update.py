"""The GRPO update's cost structure (rlvr.train.grpo_update.update_policy) without changing its
numbers: π_old is the first pass's own detached forward (no separate π_old pass), the
entropy enters the graph only when its coefficient is non-zero, and the behaviour metrics
of the trained rows come out of the update's forward. Each is checked against the plain
computation it replaces (a separate no-grad π_old forward, entropy with gradient, a
separate behaviour pass) on the tiny real policy."""
from __future__ import annotations

import copy

import pytest
import torch

from agentkit import record_grads, synthetic_groups, tiny_policy_dir
from grpokit import SCORING
from rlvr.engines import logprobs as logprobs_mod
from rlvr.engines.logprobs import sequence_logprobs
from rlvr.engines.model_dir import load_policy
from rlvr.rl.loss import grpo_loss
from rlvr.train import grpo_batch, grpo_behaviour, grpo_update
from rlvr.train.backend import BackendParams, build_backend
from rlvr.train.batching import micro_batches
from rlvr.train.grpo_config import parse_grpo_params

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _params(**kw):
    base = {"steps": 1, "group_size": 2, "groups_per_step": 2, "tasks_per_draw": 2,
            "max_draws": 1, "consensus_runs": 1, "learning_rate": 5e-2,
            "micro_batch_tokens": 100_000}
    return parse_grpo_params({**base, **kw})


def _groups(model, **kw):
    """Close lengths: one micro-batch per mini-batch."""
    return synthetic_groups(model, spread=(2, 1), **kw)




def _backend_of(model, params):
    return build_backend(model, BackendParams.of(params))


def _plain_update(model, groups, params, coef):
    """The computation update_policy replaces (one mini-batch, one micro-batch): a separate
    no-grad π_old forward, then per epoch a forward with entropy *with gradient*, the SPEC §7
    loss, backward, AdamW step. Returns each step's gradients."""
    backend = _backend_of(model, params)
    grads: list = []
    record_grads(model, backend, grads)
    seqs = grpo_batch.sequences(groups, params)
    (micro,) = micro_batches([len(s.ids) for s in seqs], range(len(seqs)),
                                  params.micro_batch_tokens)   # the update's row order
    batch = grpo_batch.collate(seqs, micro, "cpu")
    with torch.no_grad():
        old = sequence_logprobs(model, batch["ids"], None, SCORING, only=batch["mask"]).logprobs
    n_seq = sum(s.n_policy > 0 for s in seqs)
    denom = params.loss.denominator(n_seq, max(s.n_policy for s in seqs))
    for step in range(params.epochs):
        sc = sequence_logprobs(model, batch["ids"], None, SCORING, only=batch["mask"],
                               with_entropy=True)
        out = grpo_loss(sc.logprobs, old, batch["adv"], batch["mask"], params.loss,
                        behaviour_logprobs=batch["behaviour"], entropy=sc.entropy,
                        entropy_coef=coef, turn_ids=batch["turns"], denominator=denom,
                        num_tokens=sum(s.n_policy for s in seqs))
        backend.backward(out.loss, last=True)
        backend.step(grpo_update.lr_at(step, params))
    return grads


@pytest.mark.parametrize("epochs", [1, 2])
@pytest.mark.parametrize("coef", [0.0, 0.01])
def test_the_update_gives_the_gradients_of_the_plain_computation(epochs, coef):
    base = load_policy(tiny_policy_dir()).model
    base.train()
    params = _params(epochs=epochs, mini_batches=1, grad_clip=0.0)
    groups = _groups(base)
    plain_model, fast_model = copy.deepcopy(base), copy.deepcopy(base)
    plain = _plain_update(plain_model, groups, params, coef)
    backend = _backend_of(fast_model, params)
    fast: list = []
    record_grads(fast_model, backend, fast)
    out = grpo_update.update_policy(fast_model, backend, groups, params, SCORING, None, coef, 0)
    assert len(fast) == len(plain) == epochs
    for a, b in zip(plain, fast):
        assert set(a) == set(b)
        for k in a:
            assert torch.equal(b[k], a[k]), k    # bit for bit: the same arithmetic
    assert any(v.abs().max() > 0 for v in fast[0].values())
    assert out["train/first_pass_ratio_dev"] == 0.0
    for k, v in plain_model.state_dict().items():
        assert torch.equal(fast_model.state_dict()[k], v), k


def _count_calls(monkeypatch):
    """Record every sequence_logprobs call of the update (grad on?, entropy asked?) and every
    entropy computation (did its input carry a graph?)."""
    forwards, entropies = [], []
    real_seq, real_ent = grpo_update.sequence_logprobs, logprobs_mod.processed_entropy

    def seq(*a, **kw):
        forwards.append((torch.is_grad_enabled(), kw.get("with_entropy", False)))
        return real_seq(*a, **kw)

    def ent(lp):
        entropies.append(lp.requires_grad)
        return real_ent(lp)

    monkeypatch.setattr(grpo_update, "sequence_logprobs", seq)
    monkeypatch.setattr(logprobs_mod, "processed_entropy", ent)
    return forwards, entropies


def test_one_forward_per_mini_batch_and_no_entropy_graph_at_coefficient_zero(monkeypatch):
    model = load_policy(tiny_policy_dir()).model
    model.train()
    forwards, entropies = _count_calls(monkeypatch)
    params = _params(epochs=2, mini_batches=1)
    grpo_update.update_policy(model, _backend_of(model, params), _groups(model),
                       params, SCORING, None, 0.0, 0)
    assert forwards == [(True, False), (True, False)]   # no π_old pass, no entropy
    assert entropies == []
    forwards.clear()
    grpo_update.update_policy(model, _backend_of(model, params), _groups(model),
                       params, SCORING, None, 0.0, 0, tally=grpo_behaviour.BehaviourTally())
    assert forwards == [(True, True), (True, False)]    # entropy logged from epoch 0's pass
    assert entropies == [False]                          # ... without a graph
    forwards.clear()
    entropies.clear()
    grpo_update.update_policy(model, _backend_of(model, params), _groups(model),
                       params, SCORING, None, 0.01, 0)
    assert forwards == [(True, True), (True, True)]
    assert entropies == [True, True]                     # a bonus: the entropy is in the loss


def test_later_mini_batches_get_their_pi_old_before_the_first_step(monkeypatch):
    """Two mini-batches: the second is trained after one optimizer step, so its π_old is a
    no-grad forward at the pre-update weights (the only extra pass)."""
    model = load_policy(tiny_policy_dir()).model
    model.train()
    forwards, _ = _count_calls(monkeypatch)
    params = _params(epochs=2, mini_batches=2)
    out = grpo_update.update_policy(model, _backend_of(model, params), _groups(model),
                             params, SCORING, None, 0.0, 0)
    assert forwards == [(False, False)] + [(True, False)] * 4
    assert out["train/optimizer_steps"] == 4.0 and out["train/first_pass_ratio_dev"] == 0.0


@pytest.mark.parametrize("mini_batches", [1, 2])
def test_behaviour_metrics_from_the_update_equal_a_separate_pass(mini_batches):
    """`train_on` measures the trained rows inside update_policy and only the dropped
    groups' rows in a separate pass: the same entropy and mismatch numbers as one pass over
    every drawn row at the pre-update weights."""
    model = load_policy(tiny_policy_dir()).model
    model.train()
    assert grpo_behaviour.same_in_train_mode(model)
    params = _params(epochs=2, mini_batches=mini_batches)
    trained, other = _groups(model, seed=0), _groups(model, n_groups=1, seed=1)
    for g in trained:
        g["status"] = "accepted"
    other[0]["status"] = "stale"
    rows = [r for g in trained + other for r in g["rows"]]
    separate = grpo_behaviour.behaviour_metrics(copy.deepcopy(model), rows, SCORING, params)
    out = grpo_update.train_on(model, _backend_of(model, params), trained + other,
                        params, SCORING, None, 0.0, 0)
    assert out["train/optimizer_steps"] == 2.0 * mini_batches
    assert set(separate) <= set(out) and "train/entropy" in separate
    for k, v in separate.items():
        assert out[k] == pytest.approx(v, rel=1e-5, abs=1e-7), k
    assert separate["train/mismatch/logprob_abs_diff_mean"] > 0.1   # not a vacuous comparison


def test_a_model_with_dropout_is_not_measured_in_train_mode():
    model = load_policy(tiny_policy_dir()).model
    assert grpo_behaviour.same_in_train_mode(model)
    model.model.layers[0].add_module("drop", torch.nn.Dropout(0.1))
    assert not grpo_behaviour.same_in_train_mode(model)


def test_call_region_starts_at_a_sampled_call_token_and_ends_with_its_turn():
    CALL = 9
    # tokens:    0  1  2  3  4  5  6  7  8  9  10      (positions j = token j+1 below)
    ids = torch.tensor([[5, 9, 1, 2, 9, 3, 4, 6, 7, 9, 8]])
    #          prompt has a 9 (token 1): never opens the region
    mask = torch.tensor([[False, True, True, True, True, False, True, True, True, True]])
    turns = torch.tensor([[0, 0, 0, 0, 0, 0, 1, 1, 1, 1]])
    got = grpo_behaviour.call_region(ids, mask, turns, CALL)
    # policy tokens 2..5 (turn 0: 1 2 9 3 -> call from token 4), 7..10 (turn 1: 6 7 9 8)
    assert got.tolist() == [[False, False, False, True, True, False, False, False, True, True]]


def test_the_entropy_split_by_region_is_measured_in_the_update_like_a_separate_pass():
    """With the policy's call token, the tally splits the entropy into the call region and
    the rest; the update's in-pass measurement equals a separate pass, and the token-weighted
    mean of the two regions is the all-token entropy."""
    model = load_policy(tiny_policy_dir()).model
    model.train()
    params = _params(epochs=1, mini_batches=1)
    groups = _groups(model, seed=0)
    for g in groups:
        g["status"] = "accepted"
    row = groups[0]["rows"][0]
    call = next(t for t, m in zip(row["token_ids"][5:], row["loss_mask"][5:]) if m)
    rows = [r for g in groups for r in g["rows"]]
    tally = grpo_behaviour.behaviour_tally(copy.deepcopy(model), rows, SCORING, params, call_token=call)
    separate = tally.metrics()
    out = grpo_update.train_on(model, _backend_of(model, params), groups, params,
                        SCORING, None, 0.0, 0, call_token=call)
    for k in ("train/entropy", "train/entropy_call", "train/entropy_reasoning"):
        assert out[k] == pytest.approx(separate[k], rel=1e-5), k
    assert 0 < tally.call_tokens < tally.tokens
    mixed = (separate["train/entropy_call"] * tally.call_tokens
             + separate["train/entropy_reasoning"] * (tally.tokens - tally.call_tokens)) / tally.tokens
    assert mixed == pytest.approx(separate["train/entropy"], rel=1e-6)
    plain = grpo_update.train_on(copy.deepcopy(model), _backend_of(model, params),
                          groups, params, SCORING, None, 0.0, 0)
    assert "train/entropy_call" not in plain and "train/entropy" in plain


def test_the_call_token_is_read_from_the_tokenizer():
    tok = load_policy(tiny_policy_dir()).tokenizer
    assert grpo_behaviour.call_token_id(tok) == tok.convert_tokens_to_ids("<tool_call>")
    assert grpo_behaviour.call_token_id(None) is None
