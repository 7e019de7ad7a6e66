"""User-facing errors. Each names the file / field / id at fault; the CLI and every stage turn
them into one clear line on stderr and exit status 2 (nothing already written is touched)."""


class RlvrError(Exception):
    """Base class: a problem with the user's input, not a bug in rlvr."""


class ConfigError(RlvrError):
    """A params.yaml section has an unknown, missing or mistyped key."""


class UnknownToolCallFormat(ConfigError):
    """A tool-call format name that is not registered (`rlvr.toolcalls.FORMATS`)."""


class ArtifactError(RlvrError):
    """An artifact file is missing, corrupt, or breaks its schema / data contract."""


class TaskFormatError(RlvrError):
    """A hand-authored task directory (or a task record) is malformed."""


class UnknownTaskError(RlvrError):
    """A task id that is not in the given task file."""


class PatchFormatError(RlvrError):
    """Text given as a patch is not a unified diff."""


class SandboxUnavailable(RlvrError):
    """The requested sandbox backend cannot run on this machine (e.g. no docker daemon)."""


class UnsupportedRuntime(SandboxUnavailable):
    """The enclave's interpreter or pytest is not the locked version its threat model is
    argued for (`enclave/_inside/runner.py`: LOCKED_PYTHON, LOCKED_PYTEST)."""


def exit_on_error(main):
    """Decorator for entry points: an RlvrError becomes one line on stderr and exit status 2."""
    import functools
    import sys

    @functools.wraps(main)
    def wrapper(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except RlvrError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None

    return wrapper
