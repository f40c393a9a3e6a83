"""The report: built from stored runs only (bench.report.build), a module per section, headless outside a notebook."""

import matplotlib

from .. import in_notebook

if not in_notebook():
    matplotlib.use("Agg")
