"""A points table's times on one clock and one statistic (group_clock, group_statistic): each point's figures."""

from __future__ import annotations

import pandas as pd

from .policy import CPU, DEVICE, THREAD, WALL
from .probes.timed import column

# clock -> (median, interval low, interval high, IQR, fastest round) columns of points.csv
TIME_COLUMNS = {
    c: tuple(column(c, s) for s in ("median_s", "ci_low_s", "ci_high_s", "iqr_s", "min_s")) for c in (WALL, CPU, DEVICE)
}
MEDIAN, MIN = "median", "min"
FLAG_COLUMN = {c: column(c, "flag") for c in (WALL, CPU, DEVICE)}


def has_graph(points: pd.DataFrame) -> pd.Series:
    if TIME_COLUMNS[DEVICE][0] not in points:
        return pd.Series(False, index=points.index)
    return points[TIME_COLUMNS[DEVICE][0]].notna()


def _no_flag(flags: pd.Series) -> pd.Series:
    return flags.isna() | (flags.astype(str).str.strip() == "")


def _stored_false(values: pd.Series) -> pd.Series:
    return values.map(lambda v: str(v).strip().lower() in ("false", "0", "0.0"))


def reliable_on(points: pd.DataFrame, clock: str) -> pd.Series:
    """Whether each point's median on `clock` is to be trusted; older runs: `time_reliable`, wall clock only."""
    if clock == DEVICE:
        graph, wall = has_graph(points), reliable_on(points, WALL)
        return wall.where(~graph, _no_flag(points[FLAG_COLUMN[DEVICE]])) if graph.any() else wall
    if FLAG_COLUMN[clock] in points:
        return _no_flag(points[FLAG_COLUMN[clock]])
    if clock == CPU:
        return pd.Series(False, index=points.index)
    if "time_reliable" not in points:
        return pd.Series(True, index=points.index)
    return ~_stored_false(points["time_reliable"])


def reliable(points: pd.DataFrame) -> pd.Series:
    """Whether each point's time is to be trusted on its own clock (all, where no `time_reliable` column)."""
    if "time_reliable" not in points:
        return pd.Series(True, index=points.index)
    return ~_stored_false(points["time_reliable"])


def has_cpu_clock(points: pd.DataFrame) -> pd.Series:
    """Whether each point has the CPU clock of its own thread."""
    if "time_cpu_clock" not in points or TIME_COLUMNS[CPU][0] not in points:
        return pd.Series(False, index=points.index)
    return (points["time_cpu_clock"] == THREAD) & points[TIME_COLUMNS[CPU][0]].notna()


def group_clock(points: pd.DataFrame) -> str:
    """CPU where any point needs it and all have it; DEVICE where any point was timed as a graph; else WALL."""
    if "time_clock" not in points or points.empty:
        return WALL
    if (points["time_clock"] == DEVICE).any():
        return DEVICE
    wants_cpu = (points["time_clock"] == CPU).any()
    return CPU if wants_cpu and has_cpu_clock(points).all() else WALL


def group_statistic(points: pd.DataFrame, clock: str) -> str:
    """MIN where a point's median on `clock` is not to be trusted and every point has a fastest round (docs/method.md)."""
    if points.empty or reliable_on(points, clock).all():
        return MEDIAN
    fastest = on_clock(points, clock, MIN)["time_s"]
    return MIN if (fastest > 0).all() else MEDIAN


def for_fit(points: pd.DataFrame, clock: str | None = None) -> pd.DataFrame:
    clock = clock or group_clock(points)
    return on_clock(points, clock, group_statistic(points, clock))


def on_clock(points: pd.DataFrame, clock: str | None = None, statistic: str = MEDIAN) -> pd.DataFrame:
    """The points with `time_s` (its interval and IQR beside), `time_ok`, `clock` and `statistic`, on `clock`."""
    clock = clock or group_clock(points)
    median, low, high, iqr, fastest = TIME_COLUMNS[clock]

    def column(name: str) -> pd.Series:
        values = points[name] if name in points else pd.Series(float("nan"), index=points.index)
        if clock == DEVICE:  # a point without a graph: its synchronised wall time
            values = values.where(has_graph(points), column_on(WALL, name))
        return values

    def column_on(other: str, name: str) -> pd.Series:
        other_name = TIME_COLUMNS[other][TIME_COLUMNS[clock].index(name)]
        return points[other_name] if other_name in points else pd.Series(float("nan"), index=points.index)

    if statistic == MIN:
        time_s, nothing = column(fastest), pd.Series(float("nan"), index=points.index)
        ci_low, ci_high, ok = nothing, nothing, time_s > 0
    else:
        time_s, ci_low, ci_high, ok = column(median), column(low), column(high), reliable_on(points, clock)
    return points.assign(
        time_s=time_s,
        time_s_ci_low=ci_low,
        time_s_ci_high=ci_high,
        time_s_iqr=column(iqr),
        time_ok=ok.to_numpy(),
        clock=clock,
        statistic=statistic,
    )


def each_on_own_clock(points: pd.DataFrame) -> pd.DataFrame:
    """The points with their time on their own clock (`time_clock`), for per-point figures."""
    own = points["time_clock"] if "time_clock" in points else pd.Series(WALL, index=points.index)
    parts = [on_clock(points[own.fillna(WALL) == clock], clock) for clock in (WALL, CPU, DEVICE)]
    return pd.concat([p for p in parts if len(p)]).loc[points.index] if len(points) else on_clock(points, WALL)
