"""The report: built from stored runs only (bench.report.build), one module per section."""
