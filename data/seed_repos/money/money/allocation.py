"""Splitting money without creating or losing minor units."""

from math import lcm

from .money import Money
from .rounding import to_fraction


def allocate(money, ratios):
    """Split ``money`` proportionally to non-negative integer ``ratios``.

    Every share is first rounded down; the leftover minor units are then
    handed out one at a time to the shares with the largest remainders,
    earliest share first on ties.  The shares always sum to ``money``.
    """
    if not ratios:
        raise ValueError("at least one ratio is required")
    if any(ratio < 0 for ratio in ratios):
        raise ValueError("ratios must be non-negative")
    weight = sum(ratios)
    if weight == 0:
        raise ValueError("ratios must not all be zero")
    shares = []
    remainders = []
    for ratio in ratios:
        share, remainder = divmod(money.cents * ratio, weight)
        shares.append(share)
        remainders.append(remainder)
    leftover = money.cents - sum(shares)
    order = sorted(range(len(ratios)), key=lambda i: (-remainders[i], i))
    for index in order[:leftover]:
        shares[index] += 1
    return [Money(cents, money.currency) for cents in shares]


def split_evenly(money, parts):
    """Split ``money`` into ``parts`` shares that differ by at most one unit."""
    if parts < 1:
        raise ValueError("parts must be at least 1")
    return allocate(money, [1] * parts)


def allocate_fractions(money, weights):
    """Like :func:`allocate` but accepting Fractions or decimal strings."""
    fractions = [to_fraction(weight) for weight in weights]
    if not fractions:
        raise ValueError("at least one weight is required")
    common = lcm(*(fraction.denominator for fraction in fractions))
    ratios = [int(fraction * common) for fraction in fractions]
    return allocate(money, ratios)


def allocate_percentages(money, percentages):
    """Split by percentages, which must add up to exactly 100."""
    fractions = [to_fraction(percent) for percent in percentages]
    if sum(fractions) != 100:
        raise ValueError("percentages must add up to 100")
    return allocate_fractions(money, fractions)


def split_bill(total, shares):
    """Split a bill among people by their share weights.

    ``shares`` maps names to integer weights; the result maps each name to
    the amount owed, preserving the mapping's order.
    """
    names = list(shares)
    amounts = allocate(total, [shares[name] for name in names])
    return dict(zip(names, amounts))


def installments(money, count, remainder_first=True):
    """Split ``money`` into ``count`` installments.

    Extra minor units go to the first installments, or to the last ones
    when ``remainder_first`` is False.
    """
    if count < 1:
        raise ValueError("count must be at least 1")
    base, extra = divmod(money.cents, count)
    amounts = [base + 1 if i < extra else base for i in range(count)]
    if not remainder_first:
        amounts.reverse()
    return [Money(cents, money.currency) for cents in amounts]


def proportion(part, whole):
    """Return what fraction of ``whole`` the amount ``part`` represents."""
    return part.ratio(whole)
