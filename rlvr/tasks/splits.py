"""Split hygiene: train / heldout / regression are disjoint at the *family* level (SPEC §1).

A held-out family's code, tests or reference must never reach training artifacts, so the
split is a property of the family, decided by params before any task exists.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from rlvr.errors import ConfigError, RlvrError


@dataclass(frozen=True)
class SplitParams:
    heldout_families: list[str] = field(default_factory=list)
    regression_families: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        both = sorted(set(self.heldout_families) & set(self.regression_families))
        if both:
            raise ConfigError(f"split: family '{both[0]}' is both heldout and regression")


def assign_split(family: str, params: SplitParams) -> str:
    if family in params.heldout_families:
        return "heldout"
    if family in params.regression_families:
        return "regression"
    return "train"


class SplitLeak(RlvrError):
    """Content of an evaluation family would reach the training split."""


def check_split_hygiene(tasks: Sequence) -> dict:
    """Raise SplitLeak if a family spans splits or a held-out snapshot/suite/reference is
    also in train; else counts per split."""
    split_of: dict[str, str] = {}
    for t in tasks:
        if split_of.setdefault(t.family, t.split) != t.split:
            raise SplitLeak(f"family '{t.family}' appears in splits "
                            f"'{split_of[t.family]}' and '{t.split}'")
    train_hashes = set()
    for t in tasks:
        if t.split == "train":
            h = t.hashes()
            train_hashes |= {h["snapshot_hash"], h["hidden_hash"], h["reference_hash"]}
    for t in tasks:
        if t.split != "train":
            h = t.hashes()
            hit = train_hashes & {h["snapshot_hash"], h["hidden_hash"], h["reference_hash"]}
            if hit:
                raise SplitLeak(f"task '{t.task_id}' ({t.split}) shares content with the "
                                "train split")
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t.split] = counts.get(t.split, 0) + 1
    return counts
