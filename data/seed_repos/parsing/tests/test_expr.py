from fractions import Fraction

import pytest

from parsing import EvalError, ParseError, apply_operator, evaluate, evaluate_expression, free_variables, parse, to_source
from parsing.expr import call_function, node_precedence, normalize, to_number


def test_precedence_of_multiplication_over_addition():
    assert evaluate_expression("2 + 3 * 4") == 14
    assert evaluate_expression("2 * 3 + 4") == 10


def test_left_associative_subtraction_and_division():
    assert evaluate_expression("10 - 4 - 3") == 3
    assert evaluate_expression("64 / 4 / 2") == 8
    assert evaluate_expression("20 % 7 % 4") == 2


def test_power_is_right_associative_and_binds_tighter_than_unary():
    assert evaluate_expression("2 ^ 3 ^ 2") == 512
    assert evaluate_expression("-2 ^ 2") == -4
    assert evaluate_expression("2 ^ -1") == Fraction(1, 2)


def test_unary_minus_and_plus():
    assert evaluate_expression("-3") == -3
    assert evaluate_expression("--3") == 3
    assert evaluate_expression("+-+4") == -4
    assert evaluate_expression("5 - -2") == 7
    assert evaluate_expression("-2 * 3") == -6


def test_parentheses_override_precedence():
    assert evaluate_expression("(2 + 3) * 4") == 20
    assert evaluate_expression("2 * (3 + 4) - (1)") == 13
    assert evaluate_expression("((7))") == 7


def test_exact_division_results():
    assert evaluate_expression("7 / 2") == Fraction(7, 2)
    assert evaluate_expression("6 / 3") == 2
    assert isinstance(evaluate_expression("6 / 3"), int)
    assert evaluate_expression("0.1 + 0.2") == Fraction(3, 10)


def test_modulo_with_fractions():
    assert evaluate_expression("7.5 % 2") == Fraction(3, 2)
    assert evaluate_expression("-7 % 3") == 2


def test_variables():
    env = {"x": 3, "y": Fraction(1, 2)}
    assert evaluate_expression("x * x - y", env) == Fraction(17, 2)
    with pytest.raises(EvalError):
        evaluate_expression("x + z", env)


def test_functions():
    assert evaluate_expression("abs(3 - 10)") == 7
    assert evaluate_expression("min(4, 2, 9)") == 2
    assert evaluate_expression("max(4, 2, 9) + 1") == 10
    assert evaluate_expression("max(5)") == 5


def test_function_arity_and_unknown():
    with pytest.raises(EvalError):
        evaluate_expression("abs(1, 2)")
    with pytest.raises(EvalError):
        evaluate_expression("min()")
    with pytest.raises(EvalError):
        evaluate_expression("sqrt(4)")


def test_call_function_direct():
    assert call_function("abs", [-5]) == 5
    assert call_function("max", [1, 8, 3]) == 8
    assert call_function("min", [1, 8, 3]) == 1


def test_division_and_modulo_by_zero():
    with pytest.raises(EvalError):
        evaluate_expression("1 / (2 - 2)")
    with pytest.raises(EvalError):
        evaluate_expression("1 % 0")


def test_power_errors():
    with pytest.raises(EvalError):
        evaluate_expression("2 ^ 0.5")
    with pytest.raises(EvalError):
        evaluate_expression("0 ^ -1")
    assert evaluate_expression("0 ^ 0") == 1
    assert evaluate_expression("3 ^ 0") == 1


def test_apply_operator_table():
    assert apply_operator("+", 5, 3) == 8
    assert apply_operator("-", 5, 3) == 2
    assert apply_operator("*", 5, 3) == 15
    assert apply_operator("/", 5, 4) == Fraction(5, 4)
    assert apply_operator("%", 5, 3) == 2
    assert apply_operator("^", 5, 3) == 125
    with pytest.raises(EvalError):
        apply_operator("&", 1, 2)


def test_parse_tree_shape():
    assert parse("1 - 2 * x") == ("bin", "-", ("num", 1), ("bin", "*", ("num", 2), ("var", "x")))
    assert parse("-a ^ 2") == ("neg", ("bin", "^", ("var", "a"), ("num", 2)))
    assert parse("f(1, g())") == ("call", "f", [("num", 1), ("call", "g", [])])


def test_parse_errors():
    for text in ("", "1 +", "(1 + 2", "1 2", "* 3", "f(1,", ")", "f(1 2)"):
        with pytest.raises(ParseError):
            parse(text)


def test_parse_error_messages_mention_position():
    with pytest.raises(ParseError) as info:
        parse("1 + 2 )")
    assert "position 6" in str(info.value)
    with pytest.raises(ParseError) as info:
        parse("(1 + 2")
    assert "position 6" in str(info.value)


def test_evaluate_unknown_node():
    with pytest.raises(EvalError):
        evaluate(("weird", 1))


def test_free_variables():
    assert free_variables(parse("b * a + -c + max(d, a) ^ e")) == ["a", "b", "c", "d", "e"]
    assert free_variables(parse("1 + 2")) == []


def test_to_number_and_normalize():
    assert to_number("42") == 42
    assert to_number("2.50") == Fraction(5, 2)
    assert isinstance(to_number("3.0"), int)
    assert normalize(Fraction(6, 3)) == 2
    assert normalize(Fraction(1, 3)) == Fraction(1, 3)


def test_node_precedence():
    assert node_precedence(parse("1 + 2")) == 1
    assert node_precedence(parse("1 * 2")) == 2
    assert node_precedence(parse("-x")) == 3
    assert node_precedence(parse("x ^ 2")) == 4
    assert node_precedence(parse("x")) == 5


@pytest.mark.parametrize(
    "text",
    [
        "a - (b - c)",
        "(a - b) - c",
        "a * (b + c)",
        "(a ^ b) ^ c",
        "a ^ b ^ c",
        "(-a) ^ 2",
        "-(a + b)",
        "a / (b * c)",
        "2 ^ -x",
        "f(a + 1, -b) * 3",
    ],
)
def test_to_source_round_trips(text):
    tree = parse(text)
    assert parse(to_source(tree)) == tree


def test_to_source_minimal_parentheses():
    assert to_source(parse("(a * b) + c")) == "a * b + c"
    assert to_source(parse("a - (b - c)")) == "a - (b - c)"
    assert to_source(parse("(a - b) - c")) == "a - b - c"
    assert to_source(parse("(a ^ b) ^ c")) == "(a ^ b) ^ c"
    assert to_source(parse("a ^ (b ^ c)")) == "a ^ b ^ c"
    assert to_source(parse("-(a * b)")) == "-(a * b)"
    assert to_source(parse("-(a ^ b)")) == "-a ^ b"
    assert to_source(parse("2 ^ (-x)")) == "2 ^ -x"
    assert to_source(parse("2 ^ (x * y)")) == "2 ^ (x * y)"
    assert to_source(parse("(-a) * b")) == "-a * b"


def test_parse_error_messages_are_specific():
    with pytest.raises(ParseError, match="unexpected end of input"):
        parse("1 +")
    with pytest.raises(ParseError, match="expected RPAREN"):
        parse("(1 + 2")
    with pytest.raises(ParseError, match=r"unexpected '\*' at position 0"):
        parse("* 2")


def test_single_argument_min_and_max():
    assert evaluate_expression("min(5)") == 5
    assert evaluate_expression("max(-5)") == -5


def test_to_source_nested_negation_and_left_grouping():
    assert to_source(parse("--a")) == "--a"
    assert to_source(parse("-(-a)")) == "--a"
    assert to_source(parse("(a + b) * c")) == "(a + b) * c"
    assert to_source(parse("(a - b) / -c")) == "(a - b) / -c"


def test_evaluate_without_environment():
    assert evaluate(parse("1 + 2")) == 3
    with pytest.raises(EvalError, match="undefined variable 'x'"):
        evaluate_expression("x")


def test_node_precedence_all_binary_operators():
    assert [node_precedence(parse("a %s b" % op)) for op in "+-*/%^"] == [1, 1, 2, 2, 2, 4]
