"""`python -m bench`: the command line (bench.cli), interruptible with one line from its first moment."""

import sys

from .interrupts import exit_at_once
from .load import LoadMeter

exit_at_once()  # before anything heavy is imported: nothing is stored yet, so nothing to save
since_start = LoadMeter()

from .cli import main  # noqa: E402  (after the handler: this import takes seconds)

sys.exit(main(load_since=since_start))
