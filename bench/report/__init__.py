"""The report: built from stored runs only (bench.report.build), one module per section."""

import matplotlib

matplotlib.use("Agg")  # reports are written headless, before any module of the package imports pyplot
