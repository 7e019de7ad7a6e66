"""Semantic version parsing, comparison and range matching (SemVer 2.0)."""

from functools import total_ordering


class VersionError(ValueError):
    """Raised for strings that are not valid semantic versions."""


def _parse_numeric(part, what):
    """Parse a numeric core component, rejecting leading zeros."""
    if not part.isdigit():
        raise VersionError("%s must be numeric: %r" % (what, part))
    if len(part) > 1 and part[0] == "0":
        raise VersionError("%s has a leading zero: %r" % (what, part))
    return int(part)


def _parse_identifiers(text, what, numeric_leading_zero_ok):
    """Split a dot-separated pre-release or build string into identifiers."""
    if text == "":
        raise VersionError("empty %s" % what)
    result = []
    for ident in text.split("."):
        if not ident:
            raise VersionError("empty identifier in %s" % what)
        for ch in ident:
            if not (ch.isalnum() or ch == "-"):
                raise VersionError("invalid character %r in %s" % (ch, what))
        if ident.isdigit():
            if not numeric_leading_zero_ok and len(ident) > 1 and ident[0] == "0":
                raise VersionError("leading zero in %s: %r" % (what, ident))
            result.append(int(ident) if not numeric_leading_zero_ok else ident)
        else:
            result.append(ident)
    return tuple(result)


def compare_identifiers(a, b):
    """Compare two pre-release identifiers; return -1, 0 or 1.

    Numeric identifiers sort before alphanumeric ones.
    """
    a_num = isinstance(a, int)
    b_num = isinstance(b, int)
    if a_num and not b_num:
        return -1
    if b_num and not a_num:
        return 1
    if a < b:
        return -1
    if a > b:
        return 1
    return 0


def compare_prerelease(a, b):
    """Compare two pre-release tuples; an empty tuple ranks highest."""
    if not a and not b:
        return 0
    if not a:
        return 1
    if not b:
        return -1
    for x, y in zip(a, b):
        result = compare_identifiers(x, y)
        if result != 0:
            return result
    return (len(a) > len(b)) - (len(a) < len(b))


@total_ordering
class Version:
    """An immutable semantic version."""

    __slots__ = ("major", "minor", "patch", "prerelease", "build")

    def __init__(self, major, minor=0, patch=0, prerelease=(), build=()):
        if major < 0 or minor < 0 or patch < 0:
            raise VersionError("version numbers must be non-negative")
        self.major = major
        self.minor = minor
        self.patch = patch
        self.prerelease = tuple(prerelease)
        self.build = tuple(build)

    @property
    def core(self):
        """Return the ``(major, minor, patch)`` tuple."""
        return (self.major, self.minor, self.patch)

    def is_prerelease(self):
        """Return True if this version has pre-release identifiers."""
        return len(self.prerelease) > 0

    def is_stable(self):
        """Return True for a release version with major >= 1."""
        return self.major >= 1 and not self.is_prerelease()

    def compare(self, other):
        """Return -1, 0 or 1 comparing precedence; build metadata is ignored."""
        if self.core != other.core:
            return -1 if self.core < other.core else 1
        return compare_prerelease(self.prerelease, other.prerelease)

    def __eq__(self, other):
        if not isinstance(other, Version):
            return NotImplemented
        return self.compare(other) == 0

    def __lt__(self, other):
        if not isinstance(other, Version):
            return NotImplemented
        return self.compare(other) < 0

    def __hash__(self):
        return hash((self.core, self.prerelease))

    def __str__(self):
        text = "%d.%d.%d" % self.core
        if self.prerelease:
            text += "-" + ".".join(str(p) for p in self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def __repr__(self):
        return "Version(%r)" % str(self)

    def bump_major(self):
        """Return the next major release."""
        return Version(self.major + 1, 0, 0)

    def bump_minor(self):
        """Return the next minor release."""
        return Version(self.major, self.minor + 1, 0)

    def bump_patch(self):
        """Return the next patch release; a pre-release bumps to its release."""
        if self.is_prerelease():
            return Version(self.major, self.minor, self.patch)
        return Version(self.major, self.minor, self.patch + 1)


def parse_version(text):
    """Parse ``MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]``."""
    text = text.strip()
    if text[:1] in ("v", "V"):
        text = text[1:]
    build = ()
    if "+" in text:
        text, build_text = text.split("+", 1)
        build = _parse_identifiers(build_text, "build", True)
    prerelease = ()
    if "-" in text:
        text, pre_text = text.split("-", 1)
        prerelease = _parse_identifiers(pre_text, "pre-release", False)
    parts = text.split(".")
    if len(parts) != 3:
        raise VersionError("expected MAJOR.MINOR.PATCH: %r" % text)
    major = _parse_numeric(parts[0], "major")
    minor = _parse_numeric(parts[1], "minor")
    patch = _parse_numeric(parts[2], "patch")
    return Version(major, minor, patch, prerelease, build)


def compare_versions(a, b):
    """Compare two version strings; return -1, 0 or 1."""
    return parse_version(a).compare(parse_version(b))


def caret_upper_bound(v):
    """Return the exclusive upper bound for a ``^`` range."""
    if v.major > 0:
        return Version(v.major + 1, 0, 0)
    if v.minor > 0:
        return Version(0, v.minor + 1, 0)
    return Version(0, 0, v.patch + 1)


def tilde_upper_bound(v):
    """Return the exclusive upper bound for a ``~`` range."""
    return Version(v.major, v.minor + 1, 0)


def satisfies(version, constraint):
    """Return True if ``version`` matches one constraint such as ``>=1.2.0``.

    Supported operators: ``=``, ``!=``, ``>``, ``>=``, ``<``, ``<=``, ``^``
    and ``~``. A bare version means ``=``. Several constraints separated by
    whitespace must all hold.
    """
    if isinstance(version, str):
        version = parse_version(version)
    parts = constraint.split()
    if not parts:
        raise VersionError("empty constraint")
    if len(parts) > 1:
        return all(satisfies(version, part) for part in parts)
    spec = parts[0]
    for op in (">=", "<=", "!=", ">", "<", "=", "^", "~"):
        if spec.startswith(op):
            target = parse_version(spec[len(op):])
            break
    else:
        op = "="
        target = parse_version(spec)
    cmp = version.compare(target)
    if op == "=":
        return cmp == 0
    if op == "!=":
        return cmp != 0
    if op == ">":
        return cmp > 0
    if op == ">=":
        return cmp >= 0
    if op == "<":
        return cmp < 0
    if op == "<=":
        return cmp <= 0
    upper = caret_upper_bound(target) if op == "^" else tilde_upper_bound(target)
    return cmp >= 0 and version < upper


def max_satisfying(versions, constraint):
    """Return the highest version string matching ``constraint``, or None."""
    best = None
    best_text = None
    for text in versions:
        v = parse_version(text)
        if satisfies(v, constraint) and (best is None or v > best):
            best = v
            best_text = text
    return best_text


def sort_versions(versions, reverse=False):
    """Return version strings sorted by semantic precedence."""
    return sorted(versions, key=parse_version, reverse=reverse)
