"""A small quote-aware CSV line splitter and joiner."""


class CSVError(ValueError):
    """Raised when a CSV line is malformed."""

    def __init__(self, message, pos):
        super().__init__("%s at column %d" % (message, pos))
        self.pos = pos


def split_csv_line(line, delimiter=",", quote='"'):
    """Split one CSV line into fields.

    Quoted fields may contain the delimiter, and a doubled quote inside a
    quoted field stands for a literal quote. Whitespace is preserved.
    """
    if len(delimiter) != 1 or len(quote) != 1 or delimiter == quote:
        raise ValueError("delimiter and quote must be distinct single characters")
    fields = []
    field = []
    i = 0
    n = len(line)
    in_quotes = False
    while i < n:
        ch = line[i]
        if in_quotes:
            if ch == quote:
                if i + 1 < n and line[i + 1] == quote:
                    field.append(quote)
                    i += 2
                    continue
                in_quotes = False
                if i + 1 < n and line[i + 1] != delimiter:
                    raise CSVError("unexpected character after closing quote", i + 1)
            else:
                field.append(ch)
        elif ch == delimiter:
            fields.append("".join(field))
            field = []
        elif ch == quote:
            if field:
                raise CSVError("quote inside unquoted field", i)
            in_quotes = True
        else:
            field.append(ch)
        i += 1
    if in_quotes:
        raise CSVError("unterminated quoted field", n)
    fields.append("".join(field))
    return fields


def needs_quoting(field, delimiter=",", quote='"'):
    """Return True if ``field`` must be quoted to round-trip."""
    if field == "":
        return False
    return delimiter in field or quote in field or field != field.strip()


def quote_field(field, delimiter=",", quote='"'):
    """Return ``field`` quoted and escaped if necessary."""
    field = str(field)
    if not needs_quoting(field, delimiter, quote):
        return field
    return quote + field.replace(quote, quote + quote) + quote


def join_csv_line(fields, delimiter=",", quote='"'):
    """Join values into one CSV line, quoting where required."""
    return delimiter.join(quote_field(f, delimiter, quote) for f in fields)


def parse_csv(lines, delimiter=","):
    """Split each non-blank line; all rows must have the same width."""
    rows = []
    width = None
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        row = split_csv_line(line, delimiter)
        if width is None:
            width = len(row)
        elif len(row) != width:
            raise ValueError("line %d has %d fields, expected %d" % (lineno, len(row), width))
        rows.append(row)
    return rows


def parse_records(lines, delimiter=","):
    """Parse lines with a header row into a list of dicts."""
    rows = parse_csv(lines, delimiter)
    if not rows:
        return []
    header = rows[0]
    if len(set(header)) != len(header):
        raise ValueError("duplicate column names in header")
    return [dict(zip(header, row)) for row in rows[1:]]


def column(rows, index):
    """Return the ``index``-th field of every row (negative indexes allowed)."""
    if not rows:
        return []
    width = len(rows[0])
    if index < -width or index >= width:
        raise IndexError("column %d out of range for width %d" % (index, width))
    return [row[index] for row in rows]
