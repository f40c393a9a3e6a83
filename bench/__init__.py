"""seqlayer-bench: measures the complexity table of sequence layers (Vaswani et al. 2017, Table 1).

One sweep point travels: cli.py (parse, validate) -> spec.py (frozen PointSpec) -> runner.py (build the
layer, then one pass each: timing.py, flops.py, memory.py) -> storage.py (a row of points.csv) ->
report/ (fits.py, figures, verdicts) -> reports/.
"""
