"""Stand-alone benchmark scripts (`python -m bench.benchmarks.NAME`): focused before/after comparisons of a
layer's implementation, printed as a table. Not part of a run, not timed tests."""
