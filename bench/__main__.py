"""`python -m bench`: the command line (bench.cli), interruptible with one line from its first moment."""

import gc
import sys

from .interrupts import exit_at_once

exit_at_once()  # before anything heavy is imported: nothing is stored yet, so nothing to save

from .load import LoadMeter

since_start = LoadMeter()

from .cli import main

code = main(load_since=since_start)
gc.freeze()
sys.exit(code)
