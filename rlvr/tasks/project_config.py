"""A project's own pytest configuration, read (never executed) from its repository snapshot.

Why. Real repositories configure pytest in a file (`addopts = --cov ...` in setup.cfg, a
`pythonpath` in pyproject.toml, a `src/` layout that only works once the package is
installed). Run unchanged in our sandboxes, such a suite either fails with a usage error
(exit 4: the plugin behind `--cov` is not in the environment) or imports the wrong copy of
the library. The agent's `run_tests` and the enclave's job builder both call
`read_project_config` so that the two see one answer: the same import path, and the same
`addopts` kept or dropped, each drop with its reason.

How. The file is located and parsed by pytest's own loaders (`_pytest.config.findpaths`),
which only parse text — TOML, INI, setup.cfg — in pytest's precedence order (pytest.toml,
.pytest.toml, pytest.ini, .pytest.ini, pyproject.toml with a `[tool.pytest...]` table, tox.ini
with `[pytest]`, setup.cfg with `[tool:pytest]`). Only the repository root is considered: it is
the rootdir of every run here. Nothing of the project runs on the host.

Trust. The configuration is always read from the task's pristine snapshot, never from a
patched tree: `rlvr.tasks.patches.check_patch` refuses any patch touching a config file
(setup.cfg, pyproject.toml, tox.ini, pytest.ini, *.toml, dotfiles), so the policy cannot add
options to the enclave's run, and the agent's run_tests gets the same reading.

`src/` layout: when the project's packages live under `src/` (a package or module there, and
no `pythonpath` entry naming it), `src` goes on sys.path ahead of everything else, as an
installed copy would be found first.
"""
from __future__ import annotations

import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable, Mapping

from rlvr.errors import ConfigError
from rlvr.sandbox.envs import runner_versions

# Options of third-party plugins that projects commonly put in `addopts`, and the distribution
# that provides each. value: "required" (takes the next token unless written --opt=value),
# "optional" (argparse nargs='?': consumes the next token unless it starts with '-'), "none".
PLUGIN_OPTIONS: dict[str, tuple[str, str]] = {
    **{opt: ("pytest-cov", "optional") for opt in ("--cov",)},
    **{opt: ("pytest-cov", "required") for opt in ("--cov-report", "--cov-config",
                                                   "--cov-fail-under", "--cov-context")},
    **{opt: ("pytest-cov", "none") for opt in ("--no-cov", "--no-cov-on-fail", "--cov-append",
                                               "--cov-branch", "--cov-reset")},
    **{opt: ("pytest-xdist", "required") for opt in ("-n", "--numprocesses", "--dist",
                                                     "--maxprocesses", "--max-worker-restart",
                                                     "--tx", "--rsyncdir")},
    **{opt: ("pytest-xdist", "none") for opt in ("--looponfail", "-f", "--boxed")},
    **{opt: ("pytest-rerunfailures", "required") for opt in ("--reruns", "--reruns-delay",
                                                             "--only-rerun")},
    **{opt: ("pytest-timeout", "required") for opt in ("--timeout", "--timeout-method")},
    **{opt: ("pytest-benchmark", "none") for opt in ("--benchmark-skip", "--benchmark-disable",
                                                     "--benchmark-only", "--benchmark-enable")},
    **{opt: ("pytest-randomly", "none") for opt in ("--randomly-dont-reorganize",)},
    **{opt: ("pytest-randomly", "required") for opt in ("--randomly-seed",)},
    **{opt: ("pytest-mypy", "none") for opt in ("--mypy",)},
    **{opt: ("pytest-flake8", "none") for opt in ("--flake8",)},
    **{opt: ("pytest-black", "none") for opt in ("--black",)},
    **{opt: ("pytest-isort", "none") for opt in ("--isort",)},
    **{opt: ("pytest-html", "required") for opt in ("--html",)},
    **{opt: ("pytest-asyncio", "required") for opt in ("--asyncio-mode",)},
}
# Builtin options that cannot work in a sandboxed, cache-less, non-interactive run.
# (`-p no:cacheprovider` is always given, so the cache options are unknown options there.)
SANDBOX_OPTIONS: dict[str, tuple[str, str]] = {
    **{opt: ("needs the cache provider, which sandboxed runs disable", "none")
       for opt in ("--lf", "--last-failed", "--ff", "--failed-first", "--nf", "--new-first",
                   "--sw", "--stepwise", "--sw-skip", "--stepwise-skip", "--cache-clear",
                   "--cache-show")},
    **{opt: ("needs the cache provider, which sandboxed runs disable", "required")
       for opt in ("--lfnf", "--last-failed-no-failures")},
    **{opt: ("interactive debugger: a sandboxed run has no terminal", "none")
       for opt in ("--pdb", "--trace")},
    **{opt: ("interactive debugger: a sandboxed run has no terminal", "required")
       for opt in ("--pdbcls",)},
    **{opt: ("names a path outside the sandboxed checkout", "required")
       for opt in ("--basetemp", "--rootdir", "-c", "--config-file", "--confcutdir")},
}
# Distributions that provide a pytest plugin module under another name (for `-p NAME`).
PLUGIN_MODULES = {"pytest_cov": "pytest-cov", "xdist": "pytest-xdist",
                  "pytest_rerunfailures": "pytest-rerunfailures", "pytest_timeout": "pytest-timeout",
                  "pytest_benchmark": "pytest-benchmark", "pytest_randomly": "pytest-randomly",
                  "pytest_asyncio": "pytest-asyncio", "pytest_mock": "pytest-mock",
                  "hypothesis": "hypothesis", "pytest_html": "pytest-html"}


@dataclass(frozen=True)
class DroppedOption:
    """One `addopts` option left out of sandboxed runs, and why (shown to task authors)."""

    option: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class ProjectConfig:
    """What a repository's pytest configuration means for a sandboxed run.

    `config_file` is the repo-relative file pytest would read ("" when none). `import_paths`
    are repo-relative directories for sys.path, in order, all ahead of the repository root
    (the config's `pythonpath`, then `src` for a src layout). `addopts` are the options kept;
    `dropped` the ones left out, each with a reason.
    """

    config_file: str = ""
    import_paths: tuple[str, ...] = ()
    testpaths: tuple[str, ...] = ()
    markers: tuple[str, ...] = ()
    addopts: tuple[str, ...] = ()
    dropped: tuple[DroppedOption, ...] = ()
    src_layout: bool = False

    def pytest_overrides(self) -> list[str]:
        """`-o` arguments that make pytest, started in the checkout, use this reading: the
        kept `addopts` (only when something was dropped: otherwise pytest reads the same
        file itself) and the import path (when a src layout added to it)."""
        args: list[str] = []
        if self.dropped:
            args += ["-o", "addopts=" + shlex.join(self.addopts)]
        if self.src_layout:
            args += ["-o", "pythonpath=" + shlex.join(self.import_paths)]
        return args

    def job_fields(self) -> dict:
        """The enclave job's view (see rlvr/enclave/core.py): plain JSON types."""
        return {"pythonpath": list(self.import_paths), "markers": list(self.markers),
                "addopts": list(self.addopts), "testpaths": list(self.testpaths)}


def read_project_config(files: Mapping[str, str], *,
                        plugins: Iterable[str] = ("pytest-timeout",)) -> ProjectConfig:
    """Read the pytest configuration of a repository given as {repo path: text}.

    `plugins` names the distributions the run's environment provides (options of any other
    plugin are dropped). Raises ConfigError naming the file when pytest could not parse it.
    """
    from _pytest.config import UsageError
    from _pytest.config.findpaths import CONFIG_LOADERS_BY_NAME

    have = {_canon(p) for p in plugins}
    values: dict = {}
    config_file = ""
    with tempfile.TemporaryDirectory(prefix="rlvr-projcfg-") as tmp:
        for name, loader in CONFIG_LOADERS_BY_NAME.items():
            if name not in files:
                continue
            path = Path(tmp) / name
            path.write_text(files[name])
            try:
                loaded = loader(path)
            except (UsageError, ValueError) as exc:
                message = str(exc).replace(str(path), name)
                raise ConfigError(f"{name}: pytest cannot read this configuration: {message}") from None
            if loaded is not None:
                config_file = name
                values = {k: v.value for k, v in loaded.items()}
                break
    pythonpath = _paths(values.get("pythonpath"), config_file)
    src_layout = _is_src_layout(files) and "src" not in pythonpath
    kept, dropped = split_addopts(_args(values.get("addopts"), config_file, "addopts"), have)
    return ProjectConfig(
        config_file=config_file,
        import_paths=tuple(pythonpath) + (("src",) if src_layout else ()),
        testpaths=tuple(_args(values.get("testpaths"), config_file, "testpaths")),
        markers=tuple(_lines(values.get("markers"), config_file)),
        addopts=tuple(kept),
        dropped=tuple(dropped),
        src_layout=src_layout,
    )


def for_task(task) -> ProjectConfig:
    """`read_project_config` of a task's buggy snapshot, with the plugins its sandbox really
    has: the runner layer's distributions and the task's declared dependencies
    (rlvr.sandbox.envs). The one reading both the agent's run_tests and the enclave use."""
    return for_files(task.repo_files, task.dependencies)


def for_files(files: Mapping[str, str], dependencies: Iterable[str] = ()) -> ProjectConfig:
    """`for_task` of a snapshot that is not a task yet (synthesis probes a draft's repo)."""
    plugins = [*runner_versions(), *(pin.split("==", 1)[0] for pin in dependencies)]
    return read_project_config(files, plugins=plugins)


def run_tests_args(task) -> list[str]:
    """The extra pytest arguments of the agent's run_tests for `task` (started in the
    checkout, which pytest's own config discovery also reads): `for_task(task)`'s overrides."""
    return for_task(task).pytest_overrides()


def split_addopts(args: list[str], plugins: Iterable[str]) -> tuple[list[str], list[DroppedOption]]:
    """Split `addopts` tokens into (kept, dropped): plugin options whose distribution is not
    in `plugins`, and builtin options a sandboxed run cannot honour."""
    have = {_canon(p) for p in plugins}
    kept: list[str] = []
    dropped: list[DroppedOption] = []
    i = 0
    while i < len(args):
        token = args[i]
        name, inline = _split_token(token)
        known = None
        if name in PLUGIN_OPTIONS and _canon(PLUGIN_OPTIONS[name][0]) not in have:
            dist, arity = PLUGIN_OPTIONS[name]
            known = (f"needs the plugin {dist}, which the task's environment lacks", arity)
        elif name in SANDBOX_OPTIONS:
            known = SANDBOX_OPTIONS[name]
        elif name == "-p" and not inline and i + 1 < len(args):
            plugin = args[i + 1]
            dist = PLUGIN_MODULES.get(plugin)
            if dist is not None and _canon(dist) not in have:
                dropped.append(DroppedOption((token, plugin),
                                             f"loads the plugin {dist}, which the task's environment lacks"))
                i += 2
                continue
        if known is None:
            kept.append(token)
            i += 1
            continue
        reason, arity = known
        taken = [token]
        i += 1
        if not inline and i < len(args) and (
                arity == "required" or (arity == "optional" and not args[i].startswith("-"))):
            taken.append(args[i])
            i += 1
        dropped.append(DroppedOption(tuple(taken), reason))
    return kept, dropped


def _split_token(token: str) -> tuple[str, bool]:
    """(option name, whether its value is inside the token): `--cov=x`, `-n4`, `-n`."""
    if token.startswith("--"):
        name, eq, _ = token.partition("=")
        return name, bool(eq)
    if token.startswith("-") and len(token) > 2 and token[:2] in ("-n", "-c", "-p"):
        return token[:2], True
    return token, False


def _canon(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _args(value, config_file: str, key: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as exc:
            raise ConfigError(f"{config_file}: field '{key}': {exc}") from None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ConfigError(f"{config_file}: field '{key}' must be a string or a list of strings")


def _lines(value, config_file: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [line.strip() for line in value.splitlines() if line.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v.strip() for v in value if v.strip()]
    raise ConfigError(f"{config_file}: field 'markers' must be a string or a list of strings")


def _paths(value, config_file: str) -> list[str]:
    """Repo-relative, normalised `pythonpath` entries; one that leaves the repo is an error."""
    out = []
    for entry in _args(value, config_file, "pythonpath"):
        parts = []
        for part in PurePosixPath(entry).parts:
            if part == "..":
                if not parts:
                    raise ConfigError(f"{config_file}: field 'pythonpath': {entry!r} leaves the repository")
                parts.pop()
            elif part not in (".", "/"):
                parts.append(part)
        if entry.startswith("/"):
            raise ConfigError(f"{config_file}: field 'pythonpath': {entry!r} is not relative to the repository")
        out.append("/".join(parts) or ".")
    return out


def _is_src_layout(files: Mapping[str, str]) -> bool:
    """Packages (or top-level modules) under `src/`, and none of the same name at the root."""
    under_src = {PurePosixPath(p).parts[1] for p in files
                 if p.startswith("src/") and p.endswith(".py") and len(PurePosixPath(p).parts) >= 2}
    names = {n.removesuffix(".py") for n in under_src if n != "conftest.py"}
    if not names:
        return False
    at_root = {PurePosixPath(p).parts[0].removesuffix(".py") for p in files}
    return not names & at_root


def read_project_dir(root: Path | str, **kwargs) -> ProjectConfig:
    """`read_project_config` of a checkout on disk (only the config files and the .py paths
    are read)."""
    root = Path(root)
    files: dict[str, str] = {}
    from _pytest.config.findpaths import CONFIG_LOADERS_BY_NAME

    for name in CONFIG_LOADERS_BY_NAME:
        if (root / name).is_file():
            files[name] = (root / name).read_text()
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        if ".git" not in rel.split("/"):
            files.setdefault(rel, "")
    return read_project_config(files, **kwargs)


__all__ = ["DroppedOption", "ProjectConfig", "for_task", "read_project_config", "read_project_dir",
           "run_tests_args", "split_addopts"]
