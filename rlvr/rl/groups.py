"""Group statistics behind dynamic sampling (SPEC §1 difficulty, §7 dynamic sampling).

A group is the G rollouts of one task from one policy version; its rewards are one row of a
`[N, G]` tensor (N groups). A group whose rewards are all equal carries no signal: every
advantage estimator of `advantages.py` gives it exactly zero, and dynamic sampling drops it.
How often that happens is a property of the task's success rate p, not of the learning rate.
"""

from __future__ import annotations

from torch import Tensor


def informative_groups(rewards: Tensor) -> Tensor:
    """`[N]` bool: True where a group's rewards are not all equal (max > min).

    rewards: `[N, G]`. Equality is exact: a group of identical floats is uninformative even
    when its float mean would round to something else (the advantage code relies on this to
    return exact zeros for it).
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [N, G], got shape {tuple(rewards.shape)}")
    return rewards.amax(dim=-1) > rewards.amin(dim=-1)


def p_info(p: float | Tensor, group_size: int) -> float | Tensor:
    """SPEC §1: `P_info(p, G) = 1 − p^G − (1−p)^G`, the probability that G binary rewards of a
    task with success rate p are not all equal (the group is informative).

    p: a float or a tensor of any shape (one success rate per task); returns the same shape.
    P_info(0.01, 8) ≈ 0.0773, P_info(0.5, 8) ≈ 0.9922. Average it over tasks (`mean_p_info`),
    never compute it from a pooled rate: a pooled 0.5 can be tasks at 0.01 and 0.99.
    """
    if group_size < 1:
        raise ValueError(f"group size must be >= 1, got {group_size}")
    return 1 - p**group_size - (1 - p) ** group_size


def mean_p_info(p_per_task: Tensor, group_size: int) -> Tensor:
    """SPEC §7: the batch's informative probability = mean over tasks of P_info(p̂_task, G).

    p_per_task: `[K]` success rates of the K tasks a batch draws from; returns a 0-d tensor.
    """
    return p_info(p_per_task, group_size).mean()


def expected_draws(informative_target: int, p_inf: float | Tensor) -> float | Tensor:
    """SPEC §7: `E[N_draw] = B / P_info`, the expected number of groups drawn to collect B
    informative ones (p = 0.01, G = 8: ≈ 12.94 draws per informative group).

    p_inf = 0 (a task never or always solved) gives infinity: such a task never fills a batch.
    """
    if isinstance(p_inf, Tensor):
        return informative_target / p_inf
    return informative_target / p_inf if p_inf > 0 else float("inf")
