"""Percentages, taxes, discounts and related price calculations."""

from fractions import Fraction

from .rounding import HALF_EVEN, HALF_UP, to_fraction


def percentage(money, percent, mode=HALF_UP):
    """Return ``percent`` percent of ``money``, rounded to minor units."""
    return money.multiply(to_fraction(percent) / 100, mode)


def add_tax(net, rate, mode=HALF_UP):
    """Return the gross amount for a net amount and a tax ``rate`` in percent."""
    return net + percentage(net, rate, mode)


def remove_tax(gross, rate, mode=HALF_UP):
    """Return the net amount contained in a tax-inclusive ``gross`` amount."""
    rate = to_fraction(rate)
    if rate <= -100:
        raise ValueError("tax rate must be greater than -100%")
    return gross.multiply(Fraction(100) / (100 + rate), mode)


def tax_included(gross, rate, mode=HALF_UP):
    """Return the tax portion of a tax-inclusive ``gross`` amount."""
    return gross - remove_tax(gross, rate, mode)


def apply_discount(price, percent, mode=HALF_UP):
    """Reduce ``price`` by ``percent`` percent (0 to 100 inclusive)."""
    percent = to_fraction(percent)
    if percent < 0 or percent > 100:
        raise ValueError("discount must be between 0 and 100 percent")
    return price - percentage(price, percent, mode)


def discount_percent(original, discounted):
    """Return the discount from ``original`` to ``discounted`` in percent."""
    if original.cents == 0:
        raise ZeroDivisionError("original price is zero")
    saved = original - discounted
    return Fraction(saved.cents * 100, original.cents)


def percent_change(old, new):
    """Return the relative change from ``old`` to ``new`` in percent."""
    if old.cents == 0:
        raise ZeroDivisionError("old amount is zero")
    difference = new - old
    return Fraction(difference.cents * 100, abs(old.cents))


def markup(cost, percent, mode=HALF_UP):
    """Return the selling price after adding ``percent`` to ``cost``."""
    return cost + percentage(cost, percent, mode)


def margin_percent(cost, price):
    """Return the gross margin ``(price - cost) / price`` in percent."""
    if price.cents == 0:
        raise ZeroDivisionError("price is zero")
    profit = price - cost
    return Fraction(profit.cents * 100, price.cents)


def unit_price(amount, quantity, mode=HALF_UP):
    """Return the price of one unit out of ``quantity`` units."""
    if quantity <= 0:
        raise ValueError("quantity must be positive")
    return amount.divide(quantity, mode)


def line_total(price, quantity, discount=0, tax_rate=0, mode=HALF_UP):
    """Return ``price * quantity``, discounted and then taxed."""
    if quantity < 0:
        raise ValueError("quantity must not be negative")
    subtotal = price.multiply(quantity)
    discounted = apply_discount(subtotal, discount, mode)
    return add_tax(discounted, tax_rate, mode)


def compound(principal, rate, periods, mode=HALF_EVEN):
    """Apply ``rate`` percent interest ``periods`` times, rounding each period."""
    if periods < 0:
        raise ValueError("periods must not be negative")
    amount = principal
    for _ in range(periods):
        amount = amount + percentage(amount, rate, mode)
    return amount
