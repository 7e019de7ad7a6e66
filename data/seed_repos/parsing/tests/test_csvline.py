import pytest

from parsing import CSVError, column, join_csv_line, needs_quoting, parse_csv, parse_records, quote_field, split_csv_line


def test_split_plain_fields():
    assert split_csv_line("a,b,c") == ["a", "b", "c"]
    assert split_csv_line("") == [""]
    assert split_csv_line(",") == ["", ""]
    assert split_csv_line("a,,") == ["a", "", ""]


def test_split_preserves_whitespace():
    assert split_csv_line(" a , b") == [" a ", " b"]


def test_split_quoted_fields():
    assert split_csv_line('"a,b",c') == ["a,b", "c"]
    assert split_csv_line('x,"say ""hi"""') == ["x", 'say "hi"']
    assert split_csv_line('"",x') == ["", "x"]
    assert split_csv_line('""""') == ['"']


def test_split_custom_delimiter_and_quote():
    assert split_csv_line("a;'b;c';d", delimiter=";", quote="'") == ["a", "b;c", "d"]
    assert split_csv_line("a\tb", delimiter="\t") == ["a", "b"]


def test_split_rejects_bad_configuration():
    with pytest.raises(ValueError):
        split_csv_line("a", delimiter=",,")
    with pytest.raises(ValueError):
        split_csv_line("a", quote="")
    with pytest.raises(ValueError):
        split_csv_line("a", delimiter='"')


def test_split_unterminated_quote():
    with pytest.raises(CSVError) as info:
        split_csv_line('a,"bc')
    assert info.value.pos == 5


def test_split_text_after_closing_quote():
    with pytest.raises(CSVError) as info:
        split_csv_line('"ab"c,d')
    assert info.value.pos == 4


def test_split_quote_inside_unquoted_field():
    with pytest.raises(CSVError) as info:
        split_csv_line('ab"c"')
    assert info.value.pos == 2
    with pytest.raises(CSVError):
        split_csv_line('""x"')


def test_needs_quoting():
    assert not needs_quoting("")
    assert not needs_quoting("plain")
    assert needs_quoting("a,b")
    assert needs_quoting('a"b')
    assert needs_quoting(" lead")
    assert needs_quoting("trail ")
    assert not needs_quoting("a;b")
    assert needs_quoting("a;b", delimiter=";")


def test_quote_field():
    assert quote_field("x") == "x"
    assert quote_field(12) == "12"
    assert quote_field('he said "no"') == '"he said ""no"""'
    assert quote_field("a'b", quote="'") == "'a''b'"


def test_join_round_trip():
    fields = ["a", "b,c", ' d"e ', "", "f"]
    line = join_csv_line(fields)
    assert line == 'a,"b,c"," d""e ",,f'
    assert split_csv_line(line) == fields


def test_join_custom_delimiter():
    assert join_csv_line(["a", "b|c"], delimiter="|") == 'a|"b|c"'


def test_parse_csv_skips_blank_lines_and_checks_width():
    assert parse_csv(["a,b", "", "  ", "1,2"]) == [["a", "b"], ["1", "2"]]
    with pytest.raises(ValueError) as info:
        parse_csv(["a,b", "", "1,2,3"])
    assert "line 3" in str(info.value)


def test_parse_records():
    lines = ["name,age", "ann,31", '"bob, jr",7']
    assert parse_records(lines) == [{"name": "ann", "age": "31"}, {"name": "bob, jr", "age": "7"}]
    assert parse_records([]) == []
    assert parse_records(["h1,h2"]) == []


def test_parse_records_duplicate_header():
    with pytest.raises(ValueError):
        parse_records(["a,a", "1,2"])


def test_column_indexes():
    rows = [["a", "b", "c"], ["1", "2", "3"]]
    assert column(rows, 0) == ["a", "1"]
    assert column(rows, 2) == ["c", "3"]
    assert column(rows, -3) == ["a", "1"]
    assert column([], 5) == []
    with pytest.raises(IndexError):
        column(rows, 3)
    with pytest.raises(IndexError):
        column(rows, -4)


def test_split_escaped_quote_right_before_end_is_unterminated():
    with pytest.raises(CSVError, match="unterminated") as info:
        split_csv_line('"a""')
    assert info.value.pos == 4


def test_split_trailing_text_after_closing_quote_at_end():
    with pytest.raises(CSVError) as info:
        split_csv_line('"ab"c')
    assert info.value.pos == 4
    assert split_csv_line('"ab"') == ["ab"]


def test_column_error_message():
    with pytest.raises(IndexError, match="width 2"):
        column([["a", "b"]], 2)
    with pytest.raises(IndexError, match="width 2"):
        column([["a", "b"]], -3)


def test_csv_error_message_and_empty_needs_quoting():
    with pytest.raises(CSVError, match="unterminated quoted field at column 2"):
        split_csv_line('"x')
    assert needs_quoting("") is False
    assert needs_quoting("a,b") is True
