"""Recursive-descent parser and exact evaluator for arithmetic expressions.

Grammar::

    expr   := term (("+" | "-") term)*
    term   := unary (("*" | "/" | "%") unary)*
    unary  := ("-" | "+") unary | power
    power  := atom ("^" unary)?
    atom   := NUMBER | NAME | NAME "(" [expr ("," expr)*] ")" | "(" expr ")"

Nodes are tuples: ``("num", value)``, ``("var", name)``, ``("neg", node)``,
``("bin", op, left, right)`` and ``("call", name, args)``.
"""

from fractions import Fraction

from .tokenizer import COMMA, EOF, LPAREN, NAME, NUMBER, OP, RPAREN, tokenize


class ParseError(ValueError):
    """Raised when the token stream does not match the grammar."""


class EvalError(ValueError):
    """Raised when an expression cannot be evaluated."""


FUNCTIONS = {
    "abs": (1, 1),
    "min": (1, None),
    "max": (1, None),
}

PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "%": 2, "^": 4}


def to_number(literal):
    """Convert a numeric literal to ``int`` or exact ``Fraction``."""
    if "." in literal:
        return normalize(Fraction(literal))
    return int(literal)


def normalize(value):
    """Collapse a ``Fraction`` with denominator 1 into an ``int``."""
    if isinstance(value, Fraction) and value.denominator == 1:
        return value.numerator
    return value


class Parser:
    """Parser over a token list produced by :func:`tokenize`."""

    def __init__(self, text):
        self.tokens = tokenize(text)
        self.index = 0

    def peek(self):
        """Return the current token without consuming it."""
        return self.tokens[self.index]

    def advance(self):
        """Consume and return the current token."""
        tok = self.tokens[self.index]
        if tok.kind != EOF:
            self.index += 1
        return tok

    def accept(self, kind, value=None):
        """Consume the current token if it matches, returning it or None."""
        tok = self.peek()
        if tok.kind == kind and (value is None or tok.value == value):
            return self.advance()
        return None

    def expect(self, kind, value=None):
        """Consume a matching token or raise ``ParseError``."""
        tok = self.accept(kind, value)
        if tok is None:
            found = self.peek()
            raise ParseError("expected %s at position %d, found %r" % (value or kind, found.pos, found.value))
        return tok

    def parse(self):
        """Parse a complete expression and ensure all input is consumed."""
        node = self.expr()
        if self.peek().kind != EOF:
            tok = self.peek()
            raise ParseError("unexpected %r at position %d" % (tok.value, tok.pos))
        return node

    def expr(self):
        """Parse additive expressions (left associative)."""
        node = self.term()
        while True:
            tok = self.accept(OP, "+") or self.accept(OP, "-")
            if tok is None:
                return node
            node = ("bin", tok.value, node, self.term())

    def term(self):
        """Parse multiplicative expressions (left associative)."""
        node = self.unary()
        while True:
            tok = self.accept(OP, "*") or self.accept(OP, "/") or self.accept(OP, "%")
            if tok is None:
                return node
            node = ("bin", tok.value, node, self.unary())

    def unary(self):
        """Parse prefix sign operators."""
        if self.accept(OP, "-"):
            return ("neg", self.unary())
        if self.accept(OP, "+"):
            return self.unary()
        return self.power()

    def power(self):
        """Parse exponentiation, which is right associative."""
        base = self.atom()
        if self.accept(OP, "^"):
            return ("bin", "^", base, self.unary())
        return base

    def atom(self):
        """Parse numbers, variables, calls and parenthesized expressions."""
        tok = self.peek()
        if tok.kind == NUMBER:
            self.advance()
            return ("num", to_number(tok.value))
        if tok.kind == NAME:
            self.advance()
            if self.accept(LPAREN):
                return ("call", tok.value, self.arguments())
            return ("var", tok.value)
        if self.accept(LPAREN):
            node = self.expr()
            self.expect(RPAREN)
            return node
        if tok.kind == EOF:
            raise ParseError("unexpected end of input")
        raise ParseError("unexpected %r at position %d" % (tok.value, tok.pos))

    def arguments(self):
        """Parse a comma separated argument list after ``(``."""
        args = []
        if self.accept(RPAREN):
            return args
        args.append(self.expr())
        while self.accept(COMMA):
            args.append(self.expr())
        self.expect(RPAREN)
        return args


def parse(text):
    """Parse ``text`` into an expression tree."""
    return Parser(text).parse()


def apply_operator(op, left, right):
    """Apply a binary operator with exact arithmetic."""
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    if op == "/":
        if right == 0:
            raise EvalError("division by zero")
        return normalize(Fraction(left) / Fraction(right))
    if op == "%":
        if right == 0:
            raise EvalError("modulo by zero")
        return normalize(Fraction(left) % Fraction(right))
    if op == "^":
        if not isinstance(right, int):
            raise EvalError("exponent must be an integer")
        if right < 0 and left == 0:
            raise EvalError("zero to a negative power")
        return normalize(Fraction(left) ** right)
    raise EvalError("unknown operator %r" % op)


def call_function(name, args):
    """Call one of the built-in functions after checking arity."""
    if name not in FUNCTIONS:
        raise EvalError("unknown function %r" % name)
    low, high = FUNCTIONS[name]
    if len(args) < low or (high is not None and len(args) > high):
        raise EvalError("wrong number of arguments to %s" % name)
    if name == "abs":
        return abs(args[0])
    if name == "min":
        return min(args)
    return max(args)


def evaluate(node, env=None):
    """Evaluate an expression tree using variables from ``env``."""
    env = env or {}
    kind = node[0]
    if kind == "num":
        return node[1]
    if kind == "var":
        if node[1] not in env:
            raise EvalError("undefined variable %r" % node[1])
        return env[node[1]]
    if kind == "neg":
        return -evaluate(node[1], env)
    if kind == "bin":
        return apply_operator(node[1], evaluate(node[2], env), evaluate(node[3], env))
    if kind == "call":
        return call_function(node[1], [evaluate(arg, env) for arg in node[2]])
    raise EvalError("unknown node %r" % (kind,))


def evaluate_expression(text, env=None):
    """Parse and evaluate ``text`` in one step."""
    return evaluate(parse(text), env)


def free_variables(node):
    """Return the sorted list of variable names used in ``node``."""
    names = set()
    stack = [node]
    while stack:
        current = stack.pop()
        kind = current[0]
        if kind == "var":
            names.add(current[1])
        elif kind == "neg":
            stack.append(current[1])
        elif kind == "bin":
            stack.append(current[2])
            stack.append(current[3])
        elif kind == "call":
            stack.extend(current[2])
    return sorted(names)


def node_precedence(node):
    """Return the binding strength of ``node`` for pretty-printing."""
    if node[0] == "bin":
        return PRECEDENCE[node[1]]
    if node[0] == "neg":
        return 3
    return 5


def to_source(node):
    """Render ``node`` back to text using the minimum parentheses needed."""
    kind = node[0]
    if kind == "num":
        return str(node[1])
    if kind == "var":
        return node[1]
    if kind == "call":
        return "%s(%s)" % (node[1], ", ".join(to_source(arg) for arg in node[2]))
    if kind == "neg":
        inner = to_source(node[1])
        if node_precedence(node[1]) < 3:
            inner = "(" + inner + ")"
        return "-" + inner
    op, left, right = node[1], node[2], node[3]
    prec = PRECEDENCE[op]
    left_s = to_source(left)
    right_s = to_source(right)
    if op == "^":
        if node_precedence(left) <= prec:
            left_s = "(" + left_s + ")"
        if node_precedence(right) < 3:
            right_s = "(" + right_s + ")"
    else:
        if node_precedence(left) < prec:
            left_s = "(" + left_s + ")"
        if node_precedence(right) <= prec:
            right_s = "(" + right_s + ")"
    return "%s %s %s" % (left_s, op, right_s)
