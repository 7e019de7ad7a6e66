"""How a trainer cuts a global batch into the micro-batches of its forward/backward passes
(SFT and GRPO alike): the cut changes memory and speed, never the update, because every loss
is divided by a normaliser counted over the whole batch before the first micro-batch."""
from __future__ import annotations

from typing import Sequence

# A row joins a micro-batch only if it is at most this much shorter than the longest row in it.
MAX_PADDING = 0.1


def micro_batches(lengths: Sequence[int], batch: Sequence[int], budget: int,
                  max_padding: float = MAX_PADDING, packed: bool = False) -> list[list[int]]:
    """Cut one global batch (indices into `lengths`) into micro-batches: longest first; a row
    joins the current micro-batch while the batch stays within `budget` padded tokens (rows x
    longest row) and the row is at most `max_padding` shorter than that longest row (a
    longer single row goes alone). On CPU a forward pass costs ~ its padded tokens, and
    rows of a few hundred tokens already fill the matmuls, so padding is pure waste.
    `packed`: the rows run packed (no padding), so a row joins while the micro-batch's real
    tokens stay within `budget`, whatever its length."""
    order = sorted(batch, key=lambda i: -lengths[i])
    out: list[list[int]] = []
    used = 0
    for i in order:
        if out:
            head = lengths[out[-1][0]]
            fits = (used + lengths[i] <= budget if packed else
                    (len(out[-1]) + 1) * head <= budget
                    and lengths[i] >= (1 - max_padding) * head)
            if fits:
                out[-1].append(i)
                used += lengths[i]
                continue
        out.append([i])
        used = lengths[i]
    return out
