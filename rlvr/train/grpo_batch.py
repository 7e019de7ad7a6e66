"""A GRPO batch as tensors: each scored rollout becomes a `Seq` (tokens, policy mask,
behaviour logprobs, turn ids, advantage, the grammar masks it was sampled under), collated
right-padded in the next-token layout the loss and the behaviour metrics read, and cut into
mini-batches and rank shards of whole groups (a group's advantages are computed together)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from rlvr.engines.base import SamplingParams
from rlvr.engines.constraint import TokenGrammar
from rlvr.errors import ConfigError
from rlvr.rl.advantages import compute_advantages
from rlvr.train.grpo_config import GRPOParams


@dataclass
class Seq:
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


def seq_of(row: Mapping[str, Any], advantage: float, grammar: TokenGrammar | None) -> Seq:
    ids = torch.tensor(row["token_ids"], dtype=torch.long)
    mask = torch.tensor(row["loss_mask"], dtype=torch.bool)
    turns = torch.tensor(row["turn_ids"], dtype=torch.long)
    return Seq(ids, mask, torch.tensor(row["logprobs"], dtype=torch.float32), turns,
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


def sequences(groups: Sequence[Mapping[str, Any]], params: GRPOParams,
              grammar: TokenGrammar | None = None) -> list[Seq]:
    """Every rollout of `groups` (group then sample order) with its group-relative advantage."""
    rewards = torch.tensor([g["rewards"] for g in groups], dtype=torch.float64)  # [N, G]
    adv = compute_advantages(rewards, params.loss.advantage)                     # [N, G]
    out = []
    for gi, g in enumerate(groups):
        for si, r in enumerate(g["rows"]):
            if r["logprobs_kind"] != "behaviour":
                raise ConfigError(f"grpo: rollout {r['trajectory_id']} has no behaviour "
                                  "logprobs (a text teacher's tokens are never trained by RL)")
            out.append(seq_of(r, float(adv[gi, si]), grammar))
    return out


def collate(seqs: Sequence[Seq], idx: Sequence[int], device) -> dict[str, torch.Tensor]:
    """Right-padded next-token tensors of `idx`: ids [b, L]; mask, behaviour, turns
    [b, L-1] (position j = token j+1); adv [b]; allowed [N, W] (the grammar masks of the
    mask's N positions, row-major: `sequence_logprobs`' order) or None; and the rows' real
    lengths (a list: what a packed forward takes)."""
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
            "lengths": [len(seqs[i].ids) for i in idx],
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
