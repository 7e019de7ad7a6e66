"""money: exact integer-cents money arithmetic."""

from .allocation import (
    allocate,
    allocate_fractions,
    allocate_percentages,
    installments,
    proportion,
    split_bill,
    split_evenly,
)
from .currency import Currency, get_currency, known_currencies, register_currency
from .exchange import ExchangeError, RateTable
from .formatting import format_code, format_money, group_digits, parse_amount, parse_money
from .money import CurrencyMismatch, Money, largest, total
from .pricing import (
    add_tax,
    apply_discount,
    compound,
    discount_percent,
    line_total,
    margin_percent,
    markup,
    percent_change,
    percentage,
    remove_tax,
    tax_included,
    unit_price,
)
from .rounding import (
    CEILING,
    DOWN,
    FLOOR,
    HALF_DOWN,
    HALF_EVEN,
    HALF_UP,
    ROUNDING_MODES,
    UP,
    divide,
    round_fraction,
    to_fraction,
)
