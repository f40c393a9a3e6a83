"""Progress on stderr: tqdm's bar on a terminal, ProgressLines in a log or pipe (where carriage returns pile up)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from tqdm import tqdm

from . import in_notebook

PROGRESS_EVERY_S = 10.0  # seconds between a log's progress lines, even while one point takes longer
LINE_FORMAT = "{desc}: {n_fmt}/{total_fmt} {unit}, {elapsed} elapsed, about {remaining} left{postfix}"
OPEN_LINE_FORMAT = "{desc}: {n_fmt} {unit} so far, {elapsed} elapsed{postfix}"  # a total not known ahead


class ProgressLines:
    """For a log: every `every_s` (own thread, as tqdm's monitor) items done, time elapsed and left; a last on close."""

    def __init__(
        self,
        total: int | None,
        desc: str,
        unit: str,
        file: TextIO,
        every_s: float = PROGRESS_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.total, self.desc, self.unit, self.file, self.every_s, self.clock = total, desc, unit, file, every_s, clock
        self.n, self.postfix = 0, ""
        self.started_s = self.last_line_s = clock()
        self.lines = 0
        self.n_shown: int | None = None
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._ticker: threading.Thread | None = None

    def start(self) -> ProgressLines:
        self._ticker = threading.Thread(target=self._tick_until_closed, name="progress-lines", daemon=True)
        self._ticker.start()
        return self

    def update(self, n: int = 1) -> None:
        with self._lock:
            self.n += n

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        with self._lock:
            self.postfix = s

    def tick(self) -> None:
        with self._lock:
            now_s = self.clock()
            if now_s - self.last_line_s >= self.every_s:
                self._line(now_s)

    def close(self) -> None:
        self._closed.set()
        if self._ticker is not None:
            self._ticker.join()
        with self._lock:
            if self.lines and self.n != self.n_shown:
                self._line(self.clock())

    def line(self, now_s: float) -> str:
        return tqdm.format_meter(
            self.n,
            self.total,
            now_s - self.started_s,
            prefix=self.desc,
            unit=self.unit,
            bar_format=LINE_FORMAT if self.total is not None else OPEN_LINE_FORMAT,
            postfix=self.postfix or None,
        )

    def _tick_until_closed(self) -> None:
        while not self._closed.wait(max(0.0, self.last_line_s + self.every_s - self.clock())):
            self.tick()

    def _line(self, now_s: float) -> None:
        self.file.write(self.line(now_s) + "\n")  # one write: whole, whatever the run's own thread writes
        self.file.flush()
        self.last_line_s, self.lines, self.n_shown = now_s, self.lines + 1, self.n


def progress_bar(total: int | None, desc: str, line_unit: str, *, show: bool, file: TextIO | None = None):
    """`total` items (None: unknown) on stderr: tqdm on a terminal, else ProgressLines; none if not `show`."""
    file = sys.stderr if file is None else file  # looked up now: a test's capture replaces sys.stderr
    if show and in_notebook():
        from tqdm.auto import tqdm as notebook_tqdm

        return notebook_tqdm(total=total, desc=desc, unit="pt")
    if show and not file.isatty():
        return ProgressLines(total, desc, line_unit, file, PROGRESS_EVERY_S).start()
    return tqdm(total=total, desc=desc, unit="pt", disable=not show, file=file, dynamic_ncols=True)
