"""Split hygiene (SPEC §1, §8): which tasks may be trained on and which only evaluated.

Two levels:

- **family level** — train / heldout / regression are disjoint by family (repository). A
  held-out family's code, tests or reference must never reach training artifacts, so that
  split is a property of the family, decided by params before any task exists.
- **function level, inside training families** — a seeded share of each training family's
  functions is held out: a task whose mutation touches any of them gets split
  `heldout_function`, never `train`. This is the SPEC §8 tier "held-out tasks of training
  families". Whether a function is held out is a stable hash of (seed, family, function
  qualname) against the share, so it does not depend on which tasks exist, on the order they
  are built, or on which other functions were mutated: adding operators or families never
  moves a function across the line.

What the function tier shares with training, by construction: the family's code (every
train snapshot contains the *correct* held-out functions) and its hidden suite (one suite per
family). That is the point of the tier — it measures generalisation to unseen *bugs* in seen
code — so `check_split_hygiene` allows a shared hidden suite there and forbids only what
would leak a held-out bug: an identical buggy snapshot or reference fix in train.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from rlvr.errors import ConfigError, RlvrError

TRAIN = "train"
HELDOUT = "heldout"
REGRESSION = "regression"
HELDOUT_FUNCTION = "heldout_function"

# Bump when the hash below changes: every function would move to a new side.
_HASH_VERSION = "rlvr.split/1"


@dataclass(frozen=True)
class SplitParams:
    # Families evaluated only as "held-out families" (SPEC §8 tier 3).
    heldout_families: list[str] = field(default_factory=list)
    # Families of the out-of-distribution regression suite (SPEC §8 gate rule 2).
    regression_families: list[str] = field(default_factory=list)
    # Expected share of each training family's functions whose mutants never reach train
    # (tier "held-out tasks of training families"). Per function a Bernoulli draw by hash,
    # so a small family may hold out more or fewer; 0 turns the tier off.
    heldout_function_share: float = 0.2
    # Seed of that hash: a different seed holds out a different set of functions.
    seed: int = 0

    def __post_init__(self) -> None:
        both = sorted(set(self.heldout_families) & set(self.regression_families))
        if both:
            raise ConfigError(f"split: family '{both[0]}' is both heldout and regression")
        share = self.heldout_function_share
        if isinstance(share, bool) or not isinstance(share, (int, float)) \
                or not 0.0 <= share < 1.0:
            raise ConfigError(f"split.heldout_function_share: must be in [0, 1), got {share!r}")


def function_unit(seed: int, family: str, function: str) -> float:
    """A uniform number in [0, 1) fixed by (seed, family, function qualname)."""
    ident = json.dumps([_HASH_VERSION, seed, family, function])
    return int(hashlib.sha256(ident.encode()).hexdigest()[:16], 16) / float(1 << 64)


def is_heldout_function(family: str, function: str, params: SplitParams) -> bool:
    """Whether mutants of `function` (a qualname: "f", "Class.method") of a training family
    are held out of training."""
    return function_unit(params.seed, family, function) < params.heldout_function_share


def mutated_functions(provenance: Mapping[str, Any] | None) -> list[str]:
    """Qualnames of every function a task's bug touches, from its generation provenance:
    each part of a combined (two-bug) task (`params.parts[*].function`), else the top-level
    `function`. Empty when the provenance names none (e.g. a hand-authored task that only
    gives a file). Same reading as `rlvr.teachers.scripted.Hints.from_provenance`."""
    prov = provenance or {}
    params = prov.get("params") if isinstance(prov.get("params"), dict) else {}
    parts = params.get("parts") if isinstance(params.get("parts"), list) else None
    names: list[str] = []
    if parts:
        for p in parts:
            if isinstance(p, dict):
                name = p.get("function") or prov.get("function")
                if isinstance(name, str) and name:
                    names.append(name)
    elif isinstance(prov.get("function"), str) and prov["function"]:
        names.append(prov["function"])
    return list(dict.fromkeys(names))


def assign_split(family: str, params: SplitParams,
                 provenance: Mapping[str, Any] | None = None) -> str:
    """The task's split: the family's, and inside a training family `heldout_function` when
    its bug touches any held-out function (by `provenance`), else `train`."""
    if family in params.heldout_families:
        return HELDOUT
    if family in params.regression_families:
        return REGRESSION
    if any(is_heldout_function(family, f, params) for f in mutated_functions(provenance)):
        return HELDOUT_FUNCTION
    return TRAIN


class SplitLeak(RlvrError):
    """Content of an evaluation task would reach the training split."""


# Splits a single family may hold together: a training family's train and held-out-function
# tasks. Any other mix means a family's code is both trained on and evaluated as unseen.
_FAMILY_SPLITS_ALLOWED = frozenset({TRAIN, HELDOUT_FUNCTION})
# Hashes an evaluation task must not share with any train task, per split. The function tier
# shares its family's hidden suite by construction (see the module docstring).
_GUARDED = {HELDOUT_FUNCTION: ("snapshot_hash", "reference_hash")}
_ALL = ("snapshot_hash", "hidden_hash", "reference_hash")


def check_split_hygiene(tasks: Sequence) -> dict:
    """Raise SplitLeak if a family spans splits (other than train + heldout_function), or an
    evaluation task shares a buggy snapshot, reference fix or (families only) hidden suite
    with a train task; else counts per split."""
    splits_of: dict[str, set[str]] = {}
    for t in tasks:
        seen = splits_of.setdefault(t.family, set())
        seen.add(t.split)
        if len(seen) > 1 and not seen <= _FAMILY_SPLITS_ALLOWED:
            a, b = sorted(seen)[:2]
            raise SplitLeak(f"family '{t.family}' appears in splits '{a}' and '{b}'")
    train_hashes: dict[str, set[str]] = {k: set() for k in _ALL}
    for t in tasks:
        if t.split == TRAIN:
            h = t.hashes()
            for k in _ALL:
                train_hashes[k].add(h[k])
    for t in tasks:
        if t.split != TRAIN:
            h = t.hashes()
            hit = [k for k in _GUARDED.get(t.split, _ALL) if h[k] in train_hashes[k]]
            if hit:
                raise SplitLeak(f"task '{t.task_id}' ({t.split}) shares its "
                                f"{hit[0].removesuffix('_hash')} with the train split")
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t.split] = counts.get(t.split, 0) + 1
    return counts
