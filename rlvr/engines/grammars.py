"""The grammars a turn can be constrained to (`Decoding.grammar`), by name.

Why a registry. A grammar belongs to whoever defines what a turn may say — the tool-call
grammars to the agent's tool contract (`rlvr.agent.grammar`) — while the engines only compile
and apply one (`rlvr.engines.constraint`). So the engines name none: the module that defines
a grammar registers it when it is imported (`rlvr.agent` imports its grammars with the
package, so any use of the agent has them), and `check_grammar` accepts the names registered
so far. A grammar name is what params, passports and the trainer carry; the source is
rebuilt from it here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from rlvr.errors import ConfigError

# The turn's decoded prompt (the transcript so far; None for a context-free grammar) ->
# a Lark source in llguidance's dialect.
GrammarSource = Callable[[str | None], str]


@dataclass(frozen=True)
class Grammar:
    """A registered grammar: its source function and whether it ignores the transcript (the
    engine then never decodes prompts for it)."""

    source: GrammarSource
    context_free: bool


_GRAMMARS: dict[str, Grammar] = {}


def register_grammar(name: str, source: GrammarSource, *, context_free: bool) -> None:
    """Make `name` a valid `Decoding.grammar`. Registering the same function again (a module
    re-imported) is a no-op; another function under a taken name is a ValueError."""
    if not name or not isinstance(name, str):
        raise ValueError(f"a grammar needs a non-empty name (\"\" = unconstrained), got {name!r}")
    old = _GRAMMARS.get(name)
    if old is not None and _qualified(old.source) != _qualified(source):
        raise ValueError(f"grammar {name!r} is already registered by {_qualified(old.source)}")
    _GRAMMARS[name] = Grammar(source=source, context_free=bool(context_free))


def _qualified(fn: GrammarSource) -> str:
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"


def check_grammar(name: str, where: str = "decoding.grammar") -> str:
    """`name` if it is "" (no constraint) or a registered grammar, else a ConfigError naming
    the field."""
    if not isinstance(name, str) or (name and name not in _GRAMMARS):
        raise ConfigError(f"{where}: unknown grammar {name!r} (known: \"\" = none, "
                          f"{', '.join(sorted(_GRAMMARS))})")
    return name


def is_context_free(name: str) -> bool:
    """Whether registered grammar `name` ignores the transcript."""
    return _GRAMMARS[check_grammar(name)].context_free


def grammar_source(name: str, transcript: str | None = None) -> str:
    """The Lark source of registered grammar `name` for a turn after `transcript` (its
    decoded prompt; unused by a context-free grammar)."""
    return _GRAMMARS[check_grammar(name)].source(transcript)
