"""The generic decode path of `TorchEngine`: the model's own forward with a `DynamicCache`
(any causal LM; `backend="hf"`, or an architecture the fast decoder does not know), and the
left padding its prefill and `TorchEngine.score` share.
"""
from __future__ import annotations

import inspect

import torch


def left_pad(seqs: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ids, attention mask and position ids of `seqs`, left-padded: every sequence's last
    token sits in the last column, where a forward's next-token logits are read."""
    L = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), L, dtype=torch.long)
    mask = torch.zeros(len(seqs), L, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, L - len(s):] = torch.tensor(s)
        mask[i, L - len(s):] = 1
    pos = (mask.cumsum(-1) - 1).clamp_(min=0)
    return ids.to(device), mask.to(device), pos.to(device)


def _cache_kwarg(model) -> str:
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class HFDecoder:
    """Generic path: the model's own forward with a DynamicCache (any causal LM)."""

    def __init__(self, model):
        from transformers import DynamicCache

        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.cache_kw = _cache_kwarg(model)

    def prefill(self, prompts: list[list[int]]) -> torch.Tensor:
        dev = next(self.model.parameters()).device
        ids, self.mask, pos = left_pad(prompts, dev)
        self.pos = pos[:, -1] + 1
        out = self.model(input_ids=ids, attention_mask=self.mask, position_ids=pos,
                         use_cache=True, logits_to_keep=1, **{self.cache_kw: self.cache})
        return out.logits[:, -1].float()

    def start(self, G: int, T: int) -> None:
        if G > 1:
            self.cache.batch_repeat_interleave(G)
            self.mask = self.mask.repeat_interleave(G, dim=0)
            self.pos = self.pos.repeat_interleave(G, dim=0)

    def select(self, U: int, G: int, src: torch.Tensor) -> None:
        self.cache.batch_select_indices(src)
        self.mask, self.pos = self.mask[src], self.pos[src]

    def step(self, tok: torch.Tensor, t: int) -> torch.Tensor:
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(tok), 1)], dim=1)
        out = self.model(input_ids=tok[:, None], attention_mask=self.mask,
                         position_ids=(self.pos + t)[:, None], use_cache=True,
                         **{self.cache_kw: self.cache})
        return out.logits[:, -1].float()

