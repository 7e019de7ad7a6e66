"""Every seed the project derives, from one function.

A derived seed is a hash of labelled parts, never arithmetic on a base seed (`seed + i`
makes run 7's sample 1 the same stream as run 8's sample 0): the rollout's reset and turn
seeds, the collector's per-call seeds and the enclave's consensus-run and per-item seeds all
come from here, so their streams cannot collide by accident and do not depend on the order
in which work is scheduled.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed from any parts: sha256 of the JSON list of their `str()`, so it is stable
    across processes, machines and Python versions (no `hash()` randomisation), and fits a
    signed int64 column. Label parts by position or with a word ("turn", t) so that two
    derivations cannot meet."""
    blob = json.dumps([str(p) for p in parts]).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "big") >> 1
