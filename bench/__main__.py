"""`python -m bench`: Ctrl-C or SIGTERM while torch, numpy and pytest import end it at once with one line
(bench.interrupts), then the command line runs (bench.cli)."""

import sys

from .interrupts import exit_at_once

exit_at_once()  # before anything heavy is imported: nothing is stored yet, so nothing to save

from .cli import main  # noqa: E402  (after the handler: this import takes seconds)

sys.exit(main())
