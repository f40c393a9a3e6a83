"""Errors the command line turns into exit codes (bench/interface.md: 2 for bad input, 1 otherwise)."""


class BadInput(ValueError):
    """A value the user gave that is not allowed. The message names the value and what is allowed."""


class RunFailed(RuntimeError):
    """A failure that is not the user's input (damaged results, a run that cannot resume...)."""
