"""params.yaml sections are typed: unknown or mistyped keys are errors naming the key."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from rlvr.config import load_section, parse
from rlvr.errors import ConfigError
from rlvr.sandbox.params import SandboxParams
from rlvr.authoring.curation import CurationParams


@dataclass(frozen=True)
class Inner:
    n: int = 1


@dataclass(frozen=True)
class Outer:
    name: str
    inner: Inner = field(default_factory=Inner)
    rate: float = 0.5


def test_nested_parse_and_defaults():
    out = parse(Outer, {"name": "x", "inner": {"n": 3}, "rate": 1}, "s")
    assert out == Outer(name="x", inner=Inner(n=3), rate=1.0)


@pytest.mark.parametrize("value, message", [
    ({"name": "x", "bogus": 1}, "s.bogus: unknown key"),
    ({"name": "x", "inner": {"m": 1}}, "s.inner.m: unknown key"),
    ({"name": "x", "inner": {"n": "3"}}, "s.inner.n: expected an integer"),
    ({"name": "x", "rate": True}, "s.rate: expected a number"),
    ({}, "s.name: missing required key"),
])
def test_bad_keys_are_named(value, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        parse(Outer, value, "s")


def test_repo_params_file_is_valid():
    assert load_section(CurationParams, "curate").reference_runs >= 3
    assert load_section(SandboxParams, "sandbox").backend in ("bwrap", "docker")


def test_literal_choice_is_enforced(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text("sandbox:\n  backend: podman\n")
    with pytest.raises(ConfigError, match="sandbox.backend: must be one of"):
        load_section(SandboxParams, "sandbox", p)
