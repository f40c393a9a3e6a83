"""The report: built from stored runs only (bench.report.build), one module per section."""

import sys

import matplotlib

if "ipykernel" not in sys.modules:  # headless, before pyplot is imported; a notebook keeps its inline backend
    matplotlib.use("Agg")
