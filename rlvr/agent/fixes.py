"""Named rewrites of one source line: the edit that needs nothing copied.

The CPU-default policy does not copy text out of its context (LEARNING.md: after pretraining
and SFT it names the bug's line by rank, yet the `old` characters of an edit are right in
≤ 13% of held-out cases). So its edit can be a *choice* instead: which suspicious line
(`suspect`, a rank in the last run_tests listing) and which rewrite (`fix`, one word of the
closed vocabulary below), optionally which of the line's sites (`nth`). Nothing in such an
action is copied, and a wrong guess is cheap to undo: every rewrite has an inverse in the
vocabulary (`<` ↔ `<=`, `+1` ↔ `-1`, `not` toggles, `swap` swaps back).

The vocabulary is the token-level repair space of common one-token bugs, not a list of this
repo's bug injectors; a fix names the *result* (`"<="`: make a comparison `<=`), so the same
word repairs `<` → `<=` and `>=` → `<=`.

| fix | changes | sites (left to right) |
|---|---|---|
| `<` `<=` `>` `>=` `==` `!=` | an ordering / equality comparison into this one | comparisons of that kind that differ |
| `in` `not in`, `is` `is not` | a membership / identity test into this one | those tests that differ |
| `+` `-` `*` `/` `//` `%` `**` | a binary or augmented arithmetic operator into this one | those that differ (unary minus is not one) |
| `and` `or` | a boolean operator into this one | those that differ |
| `True` `False` | a boolean literal into this one | the other literal |
| `+1` `-1` | an integer literal k into k ± 1 (sign included: `-2` + 1 = `-1`) | every int literal |
| `not` | drops a `not (…)` / `not x`; on an `if`/`elif`/`while`/`return` line without one, negates the condition / value | one site per line |
| `swap` | two adjacent positional arguments of a call trade places | adjacent pairs, outer call first |

Tokens come from `tokenize`, so operators inside strings and comments are never sites; a
line of a multi-line statement tokenizes as far as it goes.
"""
from __future__ import annotations

import functools
import io
import keyword
import tokenize
from dataclasses import dataclass

ORDERING = ("<", "<=", ">", ">=", "==", "!=")
MEMBERSHIP = ("in", "not in")
IDENTITY = ("is", "is not")
ARITHMETIC = ("+", "-", "*", "/", "//", "%", "**")
BOOLEAN = ("and", "or")
LITERALS = ("True", "False")
SHIFTS = ("+1", "-1")
FIXES: tuple[str, ...] = (*ORDERING, *MEMBERSHIP, *IDENTITY, *ARITHMETIC, *BOOLEAN, *LITERALS,
                          *SHIFTS, "not", "swap")

_OPEN, _CLOSE = "([{", ")]}"
_HEADERS = ("if", "elif", "while")


class FixError(ValueError):
    """A fix that does not apply to the line; the message says what the line offers."""


@dataclass(frozen=True)
class Site:
    """A replaceable span [start, end) of the line (character columns) and its new text."""
    start: int
    end: int
    text: str


@dataclass(frozen=True)
class _Tok:
    kind: int
    text: str
    start: int
    end: int


@functools.lru_cache(maxsize=4096)
def _tokens(line: str) -> tuple[_Tok, ...]:
    """The line's significant tokens (no comments, newlines, indents), as far as it
    tokenizes on its own. Cached: a teacher asks `fix_for` about the same lines over and
    over (every fix, every nth, every candidate of a suspect function)."""
    out: list[_Tok] = []
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(line).readline):
            if tok.type in skip or tok.start[0] != 1:
                continue
            out.append(_Tok(tok.type, tok.string, tok.start[1], tok.end[1]))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # a line of a multi-line statement: keep what tokenized
    return tuple(out)


def _is_operand_end(tok: _Tok | None) -> bool:
    """Does `tok` end an operand (so a following `-` is binary, a `(` a call)?"""
    if tok is None:
        return False
    if tok.kind == tokenize.NAME:
        return not keyword.iskeyword(tok.text) or tok.text in ("True", "False", "None")
    return tok.kind in (tokenize.NUMBER, tokenize.STRING) or tok.text in _CLOSE


def _merged_comparisons(toks: list[_Tok]) -> list[tuple[str, int, int]]:
    """(operator, start, end) of every comparison, `not in` / `is not` as one operator."""
    out = []
    i = 0
    while i < len(toks):
        t = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if t.text == "not" and nxt is not None and nxt.text == "in":
            out.append(("not in", t.start, nxt.end))
            i += 2
            continue
        if t.text == "is" and nxt is not None and nxt.text == "not":
            out.append(("is not", t.start, nxt.end))
            i += 2
            continue
        if t.kind == tokenize.OP and t.text in ORDERING or t.text in ("in", "is"):
            out.append((t.text, t.start, t.end))
        i += 1
    return out


def _in_for_header(toks: list[_Tok], start: int) -> bool:
    """Is the `in` at column `start` the one of a `for … in` (not a membership test)?"""
    depth_for = [t for t in toks if t.start < start and t.text == "for"]
    return bool(depth_for) and not any(
        t.text == "in" for t in toks if depth_for[-1].start < t.start < start)


def _comparison_sites(toks: list[_Tok], fix: str) -> list[Site]:
    group = next(g for g in (ORDERING, MEMBERSHIP, IDENTITY) if fix in g)
    return [Site(s, e, fix) for op, s, e in _merged_comparisons(toks)
            if op in group and op != fix and not (op == "in" and _in_for_header(toks, s))]


def _arithmetic_sites(toks: list[_Tok], fix: str) -> list[Site]:
    sites = []
    for i, t in enumerate(toks):
        if t.kind != tokenize.OP:
            continue
        aug = t.text.endswith("=") and t.text[:-1] in ARITHMETIC
        op = t.text[:-1] if aug else t.text
        if op not in ARITHMETIC or op == fix:
            continue
        if not aug and not _is_operand_end(toks[i - 1] if i else None):
            continue  # unary minus / plus, or `*args`
        sites.append(Site(t.start, t.end, fix + ("=" if aug else "")))
    return sites


def _int_value(toks: list[_Tok], i: int) -> tuple[int, int] | None:
    """(value, start column) of the int literal at toks[i], its unary minus included."""
    t = toks[i]
    if t.kind != tokenize.NUMBER:
        return None
    try:
        value = int(t.text.replace("_", ""), 10)
    except ValueError:
        return None  # float, complex, hex: not a counter
    prev = toks[i - 1] if i else None
    if prev is not None and prev.text == "-" and not _is_operand_end(toks[i - 2] if i > 1 else None):
        return -value, prev.start
    return value, t.start


def _shift_sites(toks: list[_Tok], fix: str) -> list[Site]:
    delta = 1 if fix == "+1" else -1
    sites = []
    for i, t in enumerate(toks):
        found = _int_value(toks, i)
        if found is not None:
            value, start = found
            sites.append(Site(start, t.end, str(value + delta)))
    return sites


def _matching_close(toks: list[_Tok], i: int) -> int | None:
    depth = 0
    for j in range(i, len(toks)):
        if toks[j].text in _OPEN:
            depth += 1
        elif toks[j].text in _CLOSE:
            depth -= 1
            if depth == 0:
                return j
    return None


def _not_sites(line: str, toks: list[_Tok]) -> list[Site]:
    for i, t in enumerate(toks):
        if t.text != "not" or (i + 1 < len(toks) and toks[i + 1].text == "in"):
            continue
        if i and toks[i - 1].text == "is":
            continue  # `is not`: an identity fix
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if nxt is not None and nxt.text == "(":
            close = _matching_close(toks, i + 1)
            if close is not None:
                inner = line[nxt.end:toks[close].start]
                return [Site(t.start, toks[close].end, inner)]
        if nxt is not None:
            return [Site(t.start, nxt.start, "")]
    if toks and toks[0].text in (*_HEADERS, "return") and len(toks) > 1:
        end = toks[-1].start if toks[0].text != "return" and toks[-1].text == ":" else toks[-1].end
        start = toks[1].start
        if end > start:
            return [Site(start, end, f"not ({line[start:end]})")]
    return []


def _positional(arg: list[_Tok]) -> bool:
    return arg[0].text not in ("*", "**") and not (len(arg) > 1 and arg[1].text == "=")


def _swap_sites(line: str, toks: list[_Tok]) -> list[Site]:
    sites = []
    for i, t in enumerate(toks):
        if t.text != "(" or not _is_operand_end(toks[i - 1] if i else None):
            continue
        close = _matching_close(toks, i)
        if close is None:
            continue
        args, depth, first = [], 0, i + 1
        for j in range(i + 1, close + 1):
            x = toks[j]
            if x.text in _OPEN:
                depth += 1
            elif x.text in _CLOSE:
                depth -= 1
            if depth < 0 or (depth == 0 and x.text == ","):
                if first < j:
                    args.append(toks[first:j])
                first = j + 1
                if depth < 0:
                    break
        for a, b in zip(args, args[1:]):
            if not (_positional(a) and _positional(b)):
                continue
            ta, tb = line[a[0].start:a[-1].end], line[b[0].start:b[-1].end]
            if ta != tb:
                sites.append(Site(a[0].start, b[-1].end,
                                  tb + line[a[-1].end:b[0].start] + ta))
    return sites


def sites(line: str, fix: str) -> list[Site]:
    """Every place on `line` where `fix` applies, left to right."""
    if fix not in FIXES:
        raise FixError(f"unknown fix {fix!r} (one of: {' '.join(FIXES)})")
    toks = _tokens(line)
    if fix in ORDERING or fix in MEMBERSHIP or fix in IDENTITY:
        return _comparison_sites(toks, fix)
    if fix in ARITHMETIC:
        return _arithmetic_sites(toks, fix)
    if fix in BOOLEAN or fix in LITERALS:
        other = {"and": "or", "or": "and", "True": "False", "False": "True"}[fix]
        return [Site(t.start, t.end, fix) for t in toks
                if t.kind == tokenize.NAME and t.text == other]
    if fix in SHIFTS:
        return _shift_sites(toks, fix)
    if fix == "not":
        return _not_sites(line, toks)
    return _swap_sites(line, toks)


def apply_fix(line: str, fix: str, nth: int = 1) -> str:
    """`line` with its `nth` site of `fix` rewritten (1 = the leftmost); FixError when the
    line has no such site."""
    found = sites(line, fix)
    if nth < 1 or nth > len(found):
        where = f"{len(found)} site{'s' if len(found) != 1 else ''}" if found else "no site"
        raise FixError(f"fix {fix!r}: the line has {where} for it"
                       + (f" (nth 1-{len(found)})" if found else "")
                       + f"; the line is: {line.strip()}")
    return _rewrite(line, found[nth - 1])


def _rewrite(line: str, s: Site) -> str:
    return line[:s.start] + s.text + line[s.end:]


def fix_for(before: str, after: str, max_nth: int = 4) -> tuple[str, int] | None:
    """The (fix, nth) turning line `before` into line `after` exactly, the smallest nth
    first; None when no single fix does (the edit then needs a copied `old`)."""
    found = {fix: sites(before, fix) for fix in FIXES}  # each fix's sites once, not per nth
    for nth in range(1, max_nth + 1):
        for fix in FIXES:
            if nth <= len(found[fix]) and _rewrite(before, found[fix][nth - 1]) == after:
                return fix, nth
    return None
