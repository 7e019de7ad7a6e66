"""Named line rewrites (rlvr.agent.fixes): the copy-free edit. Each fix is the repair of a
one-token bug and has its inverse in the vocabulary, so a wrong guess can be undone."""
from __future__ import annotations

import pytest

from rlvr.agent.fixes import FIXES, FixError, apply_fix, fix_for, sites


@pytest.mark.parametrize("line, fix, nth, fixed", [
    ("    if a < b:", "<=", 1, "    if a <= b:"),
    ("    if a <= b < c:", "<", 1, "    if a < b < c:"),       # the first site that differs
    ("    if a < b <= c:", ">", 2, "    if a < b > c:"),
    ("    return x is not None", "is", 1, "    return x is None"),
    ("    return [x for x in xs if x in s]", "not in", 1, "    return [x for x in xs if x not in s]"),
    ("    return x - 1", "+", 1, "    return x + 1"),
    ("    y = -x + 2", "*", 1, "    y = -x * 2"),                 # unary minus is no site
    ("    total //= n", "*", 1, "    total *= n"),
    ("    if a and b:", "or", 1, "    if a or b:"),
    ("    return False", "True", 1, "    return True"),
    ("    k = -2", "+1", 1, "    k = -1"),                        # the sign belongs to the literal
    ("    return s[i:j + 1]", "-1", 1, "    return s[i:j + 0]"),
    ("    for i in range(1, n):", "-1", 1, "    for i in range(0, n):"),
    ("    if not (a and b):", "not", 1, "    if a and b:"),
    ("    if not done:", "not", 1, "    if done:"),
    ("    while x > 0:", "not", 1, "    while not (x > 0):"),
    ("    return a if not (t) else b", "not", 1, "    return a if t else b"),
    ("    y = f(a, g(b, c))", "swap", 1, "    y = f(g(b, c), a)"),
    ("    y = f(a, g(b, c))", "swap", 2, "    y = f(a, g(c, b))"),
    ("    return f(*args, a, b)", "swap", 1, "    return f(*args, b, a)"),
])
def test_a_fix_rewrites_its_nth_site(line, fix, nth, fixed):
    assert apply_fix(line, fix, nth) == fixed
    assert fix_for(line, fixed) == (fix, nth) or apply_fix(line, *fix_for(line, fixed)) == fixed


def test_every_fix_can_be_undone_by_a_fix():
    for line in ("    if a < b and c != d:", "    x += 3 * y", "    return f(a, b) or False",
                 "    while not (n % 2 == 0):", "    for i in range(1, n - 1):"):
        for fix in FIXES:
            for nth in range(1, len(sites(line, fix)) + 1):
                changed = apply_fix(line, fix, nth)
                assert changed != line
                assert fix_for(changed, line) is not None, (line, fix, nth, changed)


def test_strings_and_comments_hold_no_sites():
    line = '    msg = "a < b and c" + x  # x < 3 or y'
    assert sites(line, "<=") == [] and sites(line, "or") == []
    assert apply_fix(line, "-", 1) == '    msg = "a < b and c" - x  # x < 3 or y'


def test_a_fix_that_does_not_apply_names_what_the_line_has():
    with pytest.raises(FixError, match="no site.*the line is: return x"):
        apply_fix("    return x", "<=")
    with pytest.raises(FixError, match=r"1 site for it \(nth 1-1\)"):
        apply_fix("    if a < b:", "<=", 2)
    with pytest.raises(FixError, match="unknown fix"):
        apply_fix("    if a < b:", "<==")
    assert fix_for("    return x", "    return None") is None   # needs a copied `old`


def test_a_line_of_a_multiline_statement_still_has_its_sites():
    assert apply_fix("    if (a < b and", "<=") == "    if (a <= b and"
    assert sites('    text = """x < 1', "<=") == []          # inside an open string
