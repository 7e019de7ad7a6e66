import pytest

from parsing import (
    Version,
    VersionError,
    caret_upper_bound,
    compare_identifiers,
    compare_prerelease,
    compare_versions,
    max_satisfying,
    parse_version,
    satisfies,
    sort_versions,
    tilde_upper_bound,
)


def test_parse_full_version():
    v = parse_version("1.2.3-alpha.1+build.007")
    assert v.core == (1, 2, 3)
    assert v.prerelease == ("alpha", 1)
    assert v.build == ("build", "007")
    assert str(v) == "1.2.3-alpha.1+build.007"


def test_parse_with_v_prefix_and_whitespace():
    assert parse_version(" v10.0.20 ").core == (10, 0, 20)
    assert parse_version("V0.0.0").core == (0, 0, 0)


def test_parse_hyphen_in_prerelease_and_build():
    v = parse_version("1.0.0-rc-1+x-y")
    assert v.prerelease == ("rc-1",)
    assert v.build == ("x-y",)


@pytest.mark.parametrize(
    "text",
    ["1.2", "1.2.3.4", "01.2.3", "1.02.3", "1.2.03", "a.b.c", "1.2.3-", "1.2.3+", "1.2.3-a..b", "1.2.3-01", "1.2.3-a_b", "", "1.-2.3"],
)
def test_parse_invalid_versions(text):
    with pytest.raises(VersionError):
        parse_version(text)


def test_zero_components_are_valid():
    assert parse_version("0.10.0").core == (0, 10, 0)
    assert parse_version("1.0.0-0").prerelease == (0,)


def test_version_rejects_negative_numbers():
    for args in ((-1, 0, 0), (0, -1, 0), (0, 0, -1)):
        with pytest.raises(VersionError):
            Version(*args)


def test_compare_identifiers():
    assert compare_identifiers(1, "a") == -1
    assert compare_identifiers("a", 1) == 1
    assert compare_identifiers(2, 10) == -1
    assert compare_identifiers("b", "a") == 1
    assert compare_identifiers("x", "x") == 0


def test_compare_prerelease():
    assert compare_prerelease((), ()) == 0
    assert compare_prerelease((), ("a",)) == 1
    assert compare_prerelease(("a",), ()) == -1
    assert compare_prerelease(("a",), ("a", 1)) == -1
    assert compare_prerelease(("a", 1), ("a",)) == 1
    assert compare_prerelease(("a", 2), ("a", 2)) == 0
    assert compare_prerelease(("a", 2), ("b",)) == -1


def test_spec_precedence_chain():
    chain = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "1.0.1",
        "1.1.0",
        "2.0.0",
    ]
    for a, b in zip(chain, chain[1:]):
        assert compare_versions(a, b) == -1, (a, b)
        assert compare_versions(b, a) == 1, (a, b)


def test_compare_core_components():
    assert compare_versions("1.2.3", "1.2.3") == 0
    assert compare_versions("1.10.0", "1.9.9") == 1
    assert compare_versions("0.0.2", "0.1.0") == -1


def test_build_metadata_ignored_for_equality_and_hash():
    a = parse_version("1.0.0+a")
    b = parse_version("1.0.0+b")
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1


def test_ordering_operators():
    a = parse_version("1.0.0-rc.1")
    b = parse_version("1.0.0")
    assert a < b
    assert a <= b
    assert b > a
    assert b >= a
    assert a != b
    assert (a == "1.0.0-rc.1") is False


def test_is_prerelease_and_stable():
    assert parse_version("1.0.0-x").is_prerelease()
    assert not parse_version("1.0.0").is_prerelease()
    assert parse_version("1.0.0").is_stable()
    assert not parse_version("0.9.0").is_stable()
    assert not parse_version("2.0.0-rc").is_stable()


def test_bumps():
    v = parse_version("1.4.7-beta+sha")
    assert str(v.bump_major()) == "2.0.0"
    assert str(v.bump_minor()) == "1.5.0"
    assert str(v.bump_patch()) == "1.4.7"
    assert str(parse_version("1.4.7").bump_patch()) == "1.4.8"


def test_repr():
    assert repr(Version(1, 2, 3, ("rc", 1))) == "Version('1.2.3-rc.1')"


def test_caret_and_tilde_upper_bounds():
    assert str(caret_upper_bound(parse_version("1.2.3"))) == "2.0.0"
    assert str(caret_upper_bound(parse_version("0.2.3"))) == "0.3.0"
    assert str(caret_upper_bound(parse_version("0.0.3"))) == "0.0.4"
    assert str(tilde_upper_bound(parse_version("1.2.3"))) == "1.3.0"


@pytest.mark.parametrize(
    "version,constraint,expected",
    [
        ("1.2.3", "1.2.3", True),
        ("1.2.3", "=1.2.4", False),
        ("1.2.3", "!=1.2.3", False),
        ("1.2.3", "!=1.2.4", True),
        ("1.2.3", ">1.2.3", False),
        ("1.2.4", ">1.2.3", True),
        ("1.2.3", ">=1.2.3", True),
        ("1.2.2", ">=1.2.3", False),
        ("1.2.3", "<1.2.3", False),
        ("1.2.2", "<1.2.3", True),
        ("1.2.3", "<=1.2.3", True),
        ("1.2.4", "<=1.2.3", False),
        ("1.9.9", "^1.2.3", True),
        ("2.0.0", "^1.2.3", False),
        ("1.2.2", "^1.2.3", False),
        ("1.2.3", "^1.2.3", True),
        ("0.2.9", "^0.2.3", True),
        ("0.3.0", "^0.2.3", False),
        ("1.2.9", "~1.2.3", True),
        ("1.3.0", "~1.2.3", False),
        ("1.2.2", "~1.2.3", False),
        ("1.5.0", ">=1.2.0 <2.0.0", True),
        ("2.0.0", ">=1.2.0 <2.0.0", False),
        ("1.1.0", ">=1.2.0 <2.0.0", False),
    ],
)
def test_satisfies(version, constraint, expected):
    assert satisfies(version, constraint) is expected


def test_satisfies_empty_constraint():
    with pytest.raises(VersionError):
        satisfies("1.0.0", "   ")


def test_max_satisfying():
    versions = ["1.2.0", "1.10.0", "2.0.0", "1.9.5", "1.10.0-rc.1"]
    assert max_satisfying(versions, "^1.0.0") == "1.10.0"
    assert max_satisfying(versions, "<1.10.0") == "1.10.0-rc.1"
    assert max_satisfying(versions, ">3.0.0") is None


def test_sort_versions():
    versions = ["1.0.0", "0.9.0", "1.0.0-rc.2", "1.0.0-rc.10", "0.10.0"]
    assert sort_versions(versions) == ["0.9.0", "0.10.0", "1.0.0-rc.2", "1.0.0-rc.10", "1.0.0"]
    assert sort_versions(versions, reverse=True)[0] == "1.0.0"


def test_version_defaults():
    assert Version(3).core == (3, 0, 0)
    assert str(Version(3, 1)) == "3.1.0"


def test_plus_sign_inside_build_is_invalid():
    with pytest.raises(VersionError):
        parse_version("1.2.3+a+b")


def test_caret_bound_for_zero_major_minor_one():
    assert str(caret_upper_bound(parse_version("0.1.5"))) == "0.2.0"
    assert satisfies("0.1.9", "^0.1.5")
    assert not satisfies("0.2.0", "^0.1.5")


def test_max_satisfying_prefers_first_of_equal_precedence():
    assert max_satisfying(["1.0.0+a", "1.0.0+b", "0.9.0"], ">=0.1.0") == "1.0.0+a"


def test_bare_version_constraint_means_exact_match():
    assert satisfies("1.2.5", "1.2.3") is False
    assert satisfies("1.2.3+meta", "1.2.3") is True


def test_ordering_against_non_versions_raises():
    with pytest.raises(TypeError):
        parse_version("1.0.0") < "1.0.0"
