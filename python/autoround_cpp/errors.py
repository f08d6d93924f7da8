"""Exceptions of autoround_cpp, one per kind of engine error (the CLI's exit codes in brackets).

Every engine error is an ``AutoRoundError``; each kind also derives from the built-in exception
a Python caller would catch for it.
"""


class AutoRoundError(Exception):
    """Base class of every error the engine reports."""


class UsageError(AutoRoundError, ValueError):
    """An option unknown, out of range, malformed or contradicting another (exit 2). Raised before
    any file is read."""


class InvalidInputError(AutoRoundError, ValueError):
    """A model, dataset or text the engine refuses: malformed, or not what it claims (exit 1)."""


class UnsupportedError(AutoRoundError, ValueError):
    """A valid input the engine does not handle: an architecture, a scheme on this device (exit 1)."""


class EngineIOError(AutoRoundError, OSError):
    """A file or directory could not be read or written (exit 3)."""


class InternalError(AutoRoundError, RuntimeError):
    """A bug in the engine (exit 4)."""


_KINDS = {
    "usage": UsageError,
    "invalid_input": InvalidInputError,
    "unsupported": UnsupportedError,
    "io": EngineIOError,
    "internal": InternalError,
}


def from_kind(kind: str, message: str) -> AutoRoundError:
    """The exception for an engine error kind (called by the native module)."""
    return _KINDS.get(kind, InternalError)(message)
