"""The README agrees with the code (issue 39, item 8): its command-line block lists every
`rlvr` subcommand, in the forms `rlvr --help` shows; every `rlvr ...` command it names parses
with the CLI's own parser; every repository path it names exists, or is what the DAG makes
(a DVC out) or a gitignored local file; and it keeps exactly two set-up commands."""
from __future__ import annotations

import argparse
import re
import shlex
import subprocess
from pathlib import Path

import pytest

import rlvr.cli as cli
from rlvr.tracking.lineage import dvc_outs

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(subcommand path, its parser) for the parser and every subparser under it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


PARSERS = dict(_commands(cli.build_parser()))
LEAVES = {p for p, sub in PARSERS.items() if p and not any(
    isinstance(a, argparse._SubParsersAction) and a.required for a in sub._actions)}


def _blocks(text: str) -> list[str]:
    return re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M)


def _forms(lines: list[str]) -> list[str]:
    """`rlvr ...` forms: comments dropped, indented continuation lines joined, spaces single."""
    forms: list[str] = []
    for line in lines:
        text = line.split("#", 1)[0].rstrip()
        if not text.strip():
            continue
        if text.startswith("rlvr "):
            forms.append(text)
        elif forms and line[:1].isspace():
            forms[-1] += " " + text.strip()
    return [" ".join(f.split()) for f in forms]


def _path_of(form: str) -> tuple[str, ...]:
    words = form.split()[1:]
    path: tuple[str, ...] = ()
    while words and (*path, words[0]) in PARSERS:
        path = (*path, words.pop(0))
    return path


def _options(form: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", form))


def _known_options(path: tuple[str, ...]) -> set[str]:
    return {o for a in PARSERS[path]._actions for o in a.option_strings}


def test_command_line_block_is_rlvr_help_and_lists_every_subcommand():
    section = README[README.index("## Command line"):]
    block = _blocks(section)[0]
    readme_forms = _forms(block.splitlines())
    doc = cli.__doc__.split("exact forms:", 1)[1].split("\n\n")[1]
    doc_forms = _forms([line[4:] for line in doc.splitlines()])
    assert readme_forms == doc_forms
    assert {_path_of(f) for f in readme_forms} == LEAVES
    for form in readme_forms:
        assert _options(form) <= _known_options(_path_of(form)), form


def test_every_rlvr_command_in_the_readme_exists():
    named = []
    for block in _blocks(README):
        for line in block.splitlines():
            text = line.split("#", 1)[0].strip()
            text = re.sub(r"^(\.venv/bin/)?(?=rlvr )", "", text)
            if text.startswith("rlvr "):
                named.append(text)
    named += [c for c in re.findall(r"`((?:\.venv/bin/)?rlvr [^`]+)`", README)]
    assert named
    for command in named:
        command = re.sub(r"^\.venv/bin/", "", command)
        path = _path_of(command)
        assert path in LEAVES or "--help" in command.split(), command   # a command, or help
        assert _options(command) <= _known_options(path) | {"--help"}, command


# Tokens in backticks or shell blocks that look like repository paths.
PATHLIKE = re.compile(r"^[\w.][\w.\-/]*/[\w.\-/]*$|^[\w.\-/]+\.(py|md|yaml|toml|lock|sh|txt|json)$")
PLACEHOLDER = re.compile(r"[A-Z]{2,}|<|\*|my-task|^a/$|^b/$")


def _block_tokens(block: str) -> list[str]:
    """Path-like tokens of a code block. In a directory tree (the Architecture block: a
    first word ending in `/`, entries indented two spaces) an entry is under the directory
    above it (`  tracking/` -> `rlvr/tracking/`) and deeper-indented lines are prose."""
    if "my-task/" in block:             # the task format: names inside a task directory
        return []
    lines = block.splitlines()
    tree = bool(lines) and lines[0].split()[0].endswith("/") and "  " in lines[0]
    tokens, parent = [], ""
    for line in lines:
        text = line.split("#", 1)[0]
        if tree:
            indent = len(line) - len(line.lstrip())
            if indent == 0 and text.strip():
                first = text.split()[0]
                parent = first if first.endswith("/") else ""
                tokens.append(first)
            elif indent == 2 and parent:
                tokens.append(parent + text.split()[0])
            continue
        try:
            tokens.extend(shlex.split(text))
        except ValueError:
            tokens.extend(text.split())
    return tokens


def _top_level() -> set[str]:
    names = {p.name for p in ROOT.iterdir()}
    names.update(p.relative_to(ROOT).parts[0] for p in dvc_outs(ROOT))
    return names


def _basenames() -> set[str]:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    names = set()
    for f in files:
        parts = f.split("/")
        names.update(parts[-1:])
        names.update(part + "/" for part in parts[:-1])
    return names


def _named_paths() -> tuple[set[str], set[str]]:
    """(paths with a directory part, single names) the README names."""
    prose = re.sub(r"^```.*?^```", "", README, flags=re.S | re.M)   # inline spans may wrap
    tokens = {word for span in re.findall(r"`([^`]+)`", prose) for word in span.split()}
    tokens.update(link for link in re.findall(r"\]\(([^)\s]+)\)", README)
                  if "://" not in link)      # pictures and links into the repository
    for block in _blocks(README):
        tokens.update(_block_tokens(block))
    paths, names = set(), set()
    top = _top_level()
    for token in tokens:
        token = token.split(":", 1)[0] if re.match(r"^[\w./-]+\.py:\w", token) else token
        token = token.rstrip(",.;")
        if ("://" in token or token.startswith(("~", "/", "-", "$", "..")) or
                PLACEHOLDER.search(token) or not PATHLIKE.match(token)):
            continue
        if "/" in token.rstrip("/"):
            if token.split("/", 1)[0] in top:   # else a metric or deployment name
                paths.add(token)
        elif re.search(r"\.(md|yaml|toml|lock|sh|txt|json|py)$", token):
            names.add(token)               # a file by its name alone: one the repo has
    return paths, names


def _ignored(path: str) -> bool:
    done = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT)
    return done.returncode == 0


def test_every_repository_path_in_the_readme_exists():
    outs = [p.resolve() for p in dvc_outs(ROOT)]
    paths, names = _named_paths()
    assert {"dvc.yaml", "params.yaml", "flows/pipeline.py", "rlvr/cli.py",
            "rlvr/tracking/", "rlvr/config.py"} <= paths | names
    missing = []
    for name in sorted(paths):
        where = (ROOT / name).resolve()
        if where.exists() or _ignored(name):
            continue
        if any(where == o or where.is_relative_to(o) for o in outs):
            continue                       # made by the DAG (`dvc repro`)
        missing.append(name)
    known = _basenames() | {p.name for p in ROOT.iterdir()}
    missing += sorted(n for n in names if n not in known and not _ignored(n))
    assert missing == []


def test_two_set_up_commands():
    section = README[README.index("## Set up and run"):]
    block = _blocks(section)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines()
                if line.split("#", 1)[0].strip()]
    assert commands == ["make pipeline", "make test"]


@pytest.mark.parametrize("stale", ["../shared/SPEC.md", "never\ncommitted",
                                   "5 steps, up to 8 groups"])
def test_known_drift_is_gone(stale):
    assert stale not in README
