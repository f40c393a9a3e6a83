"""Stand-alone benchmark scripts (`python -m bench.benchmarks.NAME`), not part of a run."""
