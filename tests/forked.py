"""`python -m bench ARGS` in a forked child of the test's process, which imported torch already: bench imported
afresh (no state of the test's process, none of its monkeypatches), its signal handling (bench/__main__.py's, then
the command's) and files as in a new process, without the second or two of interpreter and torch start-up. For the
processes a test kills or runs beside another, where the start-up is not what it tests; at least one test of each
command starts a real `python -m bench` (tests/test_cli.py)."""

from __future__ import annotations

import faulthandler
import os
import signal
import subprocess
import sys
import tempfile
import time


class ForkedBench:
    """The subset of subprocess.Popen the tests use: pid, poll, wait, send_signal, kill, communicate (text),
    returncode (-N for a signal N, as Popen's). `setup` is Python run in the child first, such as
    stand_ins.CEILINGS_STUB; `fresh=False` keeps the parent's bench modules (no second of re-imports a child)."""

    def __init__(self, *args: str, setup: str = "", fresh: bool = True):
        self._out, self._err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        self.returncode: int | None = None
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns, never runs the parent's clean-up (pytest's, atexit)
            code = 1
            try:
                os.dup2(self._out.fileno(), 1)
                os.dup2(self._err.fileno(), 2)
                sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", closefd=False)
                faulthandler.enable(sys.stderr)  # a crash's Python stack in the child's stderr, which tests print
                for name in [m for m in sys.modules if fresh and m.split(".")[0] in ("bench", "models")]:
                    del sys.modules[name]  # imported afresh, as in a new process: its own state (folder.PROCESS...)
                from bench.interrupts import exit_at_once  # noqa: PLC0415

                exit_at_once()  # as bench/__main__.py: from its first moment
                exec(setup, {})
                from bench.cli import main  # noqa: PLC0415

                code = main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                import traceback  # noqa: PLC0415

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"bench (forked, pid {self.pid})", timeout)
            time.sleep(0.01)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        texts = []
        for file in (self._out, self._err):
            file.seek(0)
            texts.append(file.read().decode(errors="replace"))
            file.close()
        return texts[0], texts[1]
