"""Ctrl-C, SIGTERM: one stderr line, exit 130/143. Stdlib alone: bench/__main__.py installs it before torch."""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)
NAMES = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}


class Interrupted(KeyboardInterrupt):
    """A KeyboardInterrupt that knows its signal (a plain one is Ctrl-C's)."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(NAMES.get(signum, str(signum)))
        self.signum = signum


def exit_code(exc: BaseException | None = None) -> int:
    """130 for Ctrl-C, 143 for SIGTERM: 128 + the signal that ended the program."""
    return 128 + int(getattr(exc, "signum", signal.SIGINT))


def exit_at_once() -> None:
    """While it imports, a signal ends the program at once in one line (raising would leave a half-built module)."""

    def handler(signum, frame):
        os.write(2, f"interrupted ({NAMES.get(signum, signum)}) while starting; nothing was stored\n".encode())
        os._exit(128 + signum)

    for signum in SIGNALS:
        signal.signal(signum, handler)


_received: list[int] = []  # the signals as_exceptions raised, this program


def received() -> int | None:
    """The signal that interrupted the program, if one did (whatever exception an interrupted import raised)."""
    return _received[-1] if _received else None


@contextmanager
def _handled_by(handler):
    """Within: `handler` takes SIGINT and SIGTERM (on the main thread: Python sets handlers nowhere else)."""
    try:
        old = {signum: signal.signal(signum, handler) for signum in SIGNALS}
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        for signum, previous in old.items():
            signal.signal(signum, previous)


@contextmanager
def as_exceptions():
    """Within: SIGINT and SIGTERM raise Interrupted, so that the run stores what it has and says `interrupted`."""

    def handler(signum, frame):
        _received.append(signum)
        raise Interrupted(signum)

    _received.clear()
    with _handled_by(handler):
        yield


@contextmanager
def deferred():
    """Within: SIGINT and SIGTERM wait until leaving (a handler: a signal mask holds for one thread, not torch's)."""
    came: list[int] = []
    try:
        with _handled_by(lambda signum, frame: came.append(signum)):
            yield
    finally:
        if came:
            signal.raise_signal(came[0])
