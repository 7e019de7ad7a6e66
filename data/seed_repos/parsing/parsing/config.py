"""An INI-like configuration parser with typed accessors."""

DEFAULT_SECTION = "DEFAULT"

TRUE_WORDS = ("1", "yes", "true", "on")
FALSE_WORDS = ("0", "no", "false", "off")


class ConfigError(ValueError):
    """Raised for malformed configuration text or bad lookups."""

    def __init__(self, message, lineno=None):
        if lineno is not None:
            message = "line %d: %s" % (lineno, message)
        super().__init__(message)
        self.lineno = lineno


def is_comment(line):
    """Return True if a stripped line is blank or a full-line comment."""
    return not line or line[0] in "#;"


def strip_inline_comment(value):
    """Remove a trailing `` ;`` or `` #`` comment that follows whitespace."""
    for i in range(1, len(value)):
        if value[i] in "#;" and value[i - 1].isspace():
            return value[:i].rstrip()
    return value


def unquote(value):
    """Strip one pair of matching surrounding quotes from ``value``."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def split_key_value(line, lineno):
    """Split ``key = value`` or ``key: value`` at the first separator."""
    positions = [p for p in (line.find("="), line.find(":")) if p >= 0]
    if not positions:
        raise ConfigError("expected key = value", lineno)
    sep = min(positions)
    key = line[:sep].strip().lower()
    if not key:
        raise ConfigError("empty key", lineno)
    value = line[sep + 1:].strip()
    if value and value[0] in "\"'":
        end = value.find(value[0], 1)
        if end > 0:
            return key, value[1:end]
    return key, unquote(strip_inline_comment(value))


def parse_ini(text):
    """Parse INI text into ``{section: {key: value}}``.

    Keys are case-insensitive and stored lower-case. Indented lines continue
    the previous value, joined with a newline. Keys before any section header
    go into ``DEFAULT``.
    """
    data = {}
    section = DEFAULT_SECTION
    last_key = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if is_comment(stripped):
            continue
        if raw[0].isspace() and last_key is not None:
            data[section][last_key] += "\n" + stripped
            continue
        if stripped.startswith("["):
            if not stripped.endswith("]") or len(stripped) < 3:
                raise ConfigError("malformed section header", lineno)
            section = stripped[1:-1].strip()
            data.setdefault(section, {})
            last_key = None
            continue
        key, value = split_key_value(stripped, lineno)
        options = data.setdefault(section, {})
        if key in options:
            raise ConfigError("duplicate key %r in [%s]" % (key, section), lineno)
        options[key] = value
        last_key = key
    return data


class Config:
    """Read-only view over parsed INI data with ``DEFAULT`` fallback."""

    def __init__(self, text=""):
        self._data = parse_ini(text)

    def sections(self):
        """Return section names in file order, excluding ``DEFAULT``."""
        return [name for name in self._data if name != DEFAULT_SECTION]

    def has_section(self, section):
        """Return True if ``section`` exists (``DEFAULT`` never counts)."""
        return section != DEFAULT_SECTION and section in self._data

    def options(self, section):
        """Return sorted option names visible in ``section``."""
        if not self.has_section(section):
            raise ConfigError("no section %r" % section)
        names = set(self._data[section])
        names.update(self._data.get(DEFAULT_SECTION, {}))
        return sorted(names)

    def has_option(self, section, key):
        """Return True if ``key`` is visible in ``section``."""
        key = key.lower()
        if key in self._data.get(section, {}):
            return True
        return self.has_section(section) and key in self._data.get(DEFAULT_SECTION, {})

    def get(self, section, key, default=None):
        """Return the raw string value or ``default`` when missing."""
        key = key.lower()
        options = self._data.get(section, {})
        if key in options:
            return options[key]
        defaults = self._data.get(DEFAULT_SECTION, {})
        if self.has_section(section) and key in defaults:
            return defaults[key]
        return default

    def require(self, section, key):
        """Return a value or raise ``ConfigError`` when it is missing."""
        value = self.get(section, key)
        if value is None:
            raise ConfigError("missing option %r in [%s]" % (key, section))
        return value

    def get_int(self, section, key, default=None, minimum=None, maximum=None):
        """Return an integer value, optionally range checked (inclusive)."""
        value = self.get(section, key)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise ConfigError("option %r is not an integer: %r" % (key, value)) from None
        if minimum is not None and number < minimum:
            raise ConfigError("option %r below minimum %d" % (key, minimum))
        if maximum is not None and number > maximum:
            raise ConfigError("option %r above maximum %d" % (key, maximum))
        return number

    def get_bool(self, section, key, default=None):
        """Return a boolean from words like yes/no, on/off, true/false, 1/0."""
        value = self.get(section, key)
        if value is None:
            return default
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
        raise ConfigError("option %r is not a boolean: %r" % (key, value))

    def get_list(self, section, key, sep=","):
        """Return a list of non-empty stripped items split on ``sep``."""
        value = self.get(section, key)
        if value is None:
            return []
        return [item.strip() for item in value.split(sep) if item.strip()]


def format_value(value):
    """Quote ``value`` when writing it bare would change how it parses back."""
    text = str(value)
    if text != text.strip() or text[:1] in ("'", '"') or strip_inline_comment(text) != text:
        quote = "'" if '"' in text else '"'
        return quote + text + quote
    return text


def dump_ini(data):
    """Serialize ``{section: {key: value}}`` back to INI text.

    ``DEFAULT`` is written first; multi-line values are indented.
    """
    lines = []
    names = sorted(data, key=lambda name: (name != DEFAULT_SECTION, name))
    for name in names:
        if lines:
            lines.append("")
        lines.append("[%s]" % name)
        for key in sorted(data[name]):
            parts = str(data[name][key]).split("\n")
            lines.append("%s = %s" % (key, format_value(parts[0])))
            for extra in parts[1:]:
                lines.append("    " + extra)
    return "\n".join(lines) + "\n" if lines else ""
