"""Tokenizer for arithmetic expressions."""

from collections import namedtuple

Token = namedtuple("Token", ["kind", "value", "pos"])

NUMBER = "NUMBER"
NAME = "NAME"
OP = "OP"
LPAREN = "LPAREN"
RPAREN = "RPAREN"
COMMA = "COMMA"
EOF = "EOF"

OPERATORS = "+-*/%^"


class TokenizeError(ValueError):
    """Raised when the input contains an invalid character or number."""

    def __init__(self, message, pos):
        super().__init__("%s at position %d" % (message, pos))
        self.pos = pos


def is_name_start(ch):
    """Return True if ``ch`` may start an identifier."""
    return ch == "_" or ("a" <= ch <= "z") or ("A" <= ch <= "Z")


def is_name_char(ch):
    """Return True if ``ch`` may continue an identifier."""
    return is_name_start(ch) or ch.isdigit()


def read_number(text, start):
    """Read a decimal literal beginning at ``start``.

    Returns ``(literal, end)`` where ``end`` is the index just past it.
    A literal is digits with at most one decimal point and at least one
    digit overall.
    """
    i = start
    seen_dot = False
    digits = 0
    while i < len(text):
        ch = text[i]
        if ch.isdigit():
            digits += 1
        elif ch == "." and not seen_dot:
            seen_dot = True
        else:
            break
        i += 1
    if digits == 0:
        raise TokenizeError("malformed number", start)
    if i < len(text) and (text[i] == "." or is_name_start(text[i])):
        raise TokenizeError("malformed number", start)
    return text[start:i], i


def read_name(text, start):
    """Read an identifier beginning at ``start``; return ``(name, end)``."""
    i = start
    while i < len(text) and is_name_char(text[i]):
        i += 1
    return text[start:i], i


def tokenize(text):
    """Split ``text`` into a list of tokens terminated by an EOF token."""
    tokens = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch.isdigit() or ch == ".":
            literal, end = read_number(text, i)
            tokens.append(Token(NUMBER, literal, i))
            i = end
        elif is_name_start(ch):
            name, end = read_name(text, i)
            tokens.append(Token(NAME, name, i))
            i = end
        elif ch in OPERATORS:
            tokens.append(Token(OP, ch, i))
            i += 1
        elif ch == "(":
            tokens.append(Token(LPAREN, ch, i))
            i += 1
        elif ch == ")":
            tokens.append(Token(RPAREN, ch, i))
            i += 1
        elif ch == ",":
            tokens.append(Token(COMMA, ch, i))
            i += 1
        else:
            raise TokenizeError("unexpected character %r" % ch, i)
    tokens.append(Token(EOF, "", n))
    return tokens


def token_kinds(text):
    """Return just the kinds of the tokens of ``text`` (without EOF)."""
    return [tok.kind for tok in tokenize(text)[:-1]]
