"""seqlayer-bench: measures the complexity table of sequence layers (Vaswani et al. 2017, Table 1).

One sweep point travels: cli.py (parse, validate) -> spec.py (frozen PointSpec) -> run.py (the run's
life: interleaved passes, load, sampling until known) -> point.py (one pass: build the layer, timing.py; on the
first pass flops.py and memory.py) -> storage.py (timings.jsonl per pass, a row of points.csv) ->
report/ (clock.py, fits.py, figures, verdicts) -> reports/. The public interface: bench/interface.md.
"""
