"""The Python API (a notebook's): `python -m bench`'s engine, options and one-line errors (ValueError)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

import models

from . import fits, folder
from .cli import build_parser
from .commands import cmd_report, cmd_run, resolve_devices
from .errors import BadInput, RunFailed
from .spec import DEFAULT_MODE, mode_of, source_keys

Sizes = int | Iterable[int] | None


def _text(value) -> str:
    return str(value.item() if hasattr(value, "item") and not isinstance(value, str) else value)


def _listed(values) -> str:
    scalar = isinstance(values, (str, bytes)) or not isinstance(values, Iterable)
    return ",".join(_text(v) for v in ([values] if scalar else values))


def measure(
    layers: str | Iterable[str] | None = None,
    n: Sizes = None,
    d: Sizes = None,
    *,
    preset: str | None = None,
    out: str | Path | None = None,
    progress: bool = True,
    **options,
) -> pd.DataFrame:
    """`run` of a grid (its options as keywords: k=[3, 5], mode="train"...) or a preset: points.csv as a DataFrame."""
    resume = options.get("resume")
    argv = ["run"] + ([] if resume is not None else ["--yes"]) + ([] if progress else ["--no-progress"])
    given = {"layers": layers, "n": n, "d": d, "preset": preset, **options}
    for name, value in given.items():
        if value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        argv += [flag] if value is True else [flag, _listed(value)]
    if resume is not None:
        run_dir, where = Path(resume), []
    else:
        run_dir = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="bench-")) / _run_id(options)
        where = ["--out", str(run_dir)]
    try:
        code = cmd_run(build_parser().parse_args([*argv, *where]), ["bench.measure", *argv])
    except BaseException:
        if out is None and resume is None and not run_dir.exists():
            shutil.rmtree(run_dir.parent, ignore_errors=True)
        raise
    if code != 0:
        raise KeyboardInterrupt(f"interrupted: the passes measured so far are stored in {run_dir}")
    points = read_points(run_dir)
    points.attrs["run_dir"] = str(run_dir)
    return points


def _run_id(options: dict) -> str:
    try:
        devices = resolve_devices(_text(options.get("device") or "auto"))
    except BadInput:
        devices = ["run"]
    return folder.make_run_id("-".join(sorted(devices)))


def read_points(run_dir: str | Path) -> pd.DataFrame:
    """A run folder's points.csv, with `run_id` and each row's `source` (`cpu`, `cuda-train`, ...)."""
    if not isinstance(run_dir, (str, Path)) or not Path(run_dir).is_dir():
        raise ValueError(f"read_points: {run_dir!r} is not a run folder")
    run_dir = Path(run_dir)
    try:
        points = folder.read_points(run_dir)
        run_id = folder.read_meta(run_dir).get("run_id", run_dir.name)
    except (RunFailed, OSError) as exc:
        raise ValueError(f"read_points: {exc}") from None
    return points.assign(run_id=run_id, source=source_keys(points))


POINT_COLUMNS = ("layer", "n", "d", "device", "status")


def _with_source(points: pd.DataFrame | str | Path) -> pd.DataFrame:
    if isinstance(points, (str, Path)):
        return read_points(points)
    if not isinstance(points, pd.DataFrame):
        raise ValueError(
            f"expected points (a DataFrame, as measure returns) or a run folder, not {type(points).__name__}"
        )
    missing = [c for c in POINT_COLUMNS if c not in points]
    if missing:
        raise ValueError(f"points without the columns {', '.join(missing)}: not a run's points.csv")
    return points if "source" in points else points.assign(source=source_keys(points))


def fit(points: pd.DataFrame | str | Path) -> pd.DataFrame:
    """Every sweep's exponents with intervals and verdicts: the report's fits.csv."""
    return fits.fit_table(_with_source(points))


def table1(points: pd.DataFrame | str | Path) -> pd.DataFrame:
    """Table 1 beside the measured exponents in n (widest sweep): verdict, exponent [95 % interval] (predicted), class."""
    rows = fit(points)
    rows = rows[rows["variable"] == "n"].assign(span=lambda r: r["sweep_x_max"] / r["sweep_x_min"])
    out = []
    for (source, layer), group in rows.groupby(["source", "layer"], sort=False):
        row = {"source": source, "layer": layer}
        mode = mode_of(group.iloc[:1])[0]
        row["predicted"] = fits.predicted_text(layer, mode, "time")
        for metric, part in group.groupby("metric"):
            best = part.sort_values(["span", "points"], ascending=False).iloc[0]
            measured = (
                "–"
                if pd.isna(best["exponent"])
                else f"{best['exponent']:.2f} [{best['ci_low']:.2f}, {best['ci_high']:.2f}]"
            )
            judged = pd.notna(best["predicted"])
            mark, against = (
                (f"{fits.VERDICT_MARK[best['verdict']]} ", f" ({best['predicted']:.2f})") if judged else ("", "")
            )
            shape = f" · O({best['complexity_class']})" if isinstance(best["complexity_class"], str) else ""
            row[metric] = f"{mark}{measured}{against}{shape}"
        out.append(row)
    return pd.DataFrame(out)


def plot_table1(points: pd.DataFrame | str | Path, source: str | None = None):
    """The report's first figure of one source (default: the first) as a matplotlib Figure."""
    from .report.sweep_plot import on_sweep_clocks, predicted_from_formula, primary_sweeps
    from .report.table1_figure import PANELS, table1_figure, table1_layers

    ok = _with_source(points)
    ok = ok[(ok["status"] == "ok") & ok["time_median_s"].notna()]
    data = primary_sweeps(ok, "n")
    if data.empty:
        raise ValueError("plot_table1: no n-sweep of ok points (at least two lengths n of one layer) to draw")
    source = source or data["source"].iloc[0]
    if source not in set(data["source"]):
        raise ValueError(
            f"plot_table1: source {source!r} not measured; measured: {', '.join(sorted(set(data['source'])))}"
        )
    mine = on_sweep_clocks(data[data["source"] == source])
    mine = mine[mine["layer"].isin(table1_layers(mine["layer"].unique()))]
    exponents = {metric: predicted_from_formula(metric, "n") for metric in PANELS}
    return table1_figure(mine, exponents, source)


def crossover(points: pd.DataFrame | str | Path, attention: str = models.ROLES.attention) -> pd.DataFrame:
    """n* where `attention` becomes costlier than each other layer at its sizes, by time and by the FLOP formulas."""
    ok = _with_source(points)
    ok = ok[(ok["status"] == "ok") & (pd.Series(mode_of(ok), index=ok.index) == DEFAULT_MODE)]
    if attention not in set(ok["layer"]) or len(set(ok["layer"])) < 2:
        modes = ", ".join(sorted(set(mode_of(_with_source(points))))) or "none"
        raise ValueError(
            f"crossover: no ok inference points of {attention} and another layer to compare (modes here: {modes})"
        )
    rows = []
    keys = ["source", "d", "batch"]
    for (source, d, batch), group in ok.groupby(keys):
        mine = group[group["layer"] == attention].set_index("n").sort_index()
        for other in sorted(set(group["layer"]) - {attention}):
            theirs = group[group["layer"] == other].set_index("n").sort_index()
            by_time = fits.time_crossing(mine, theirs)[0]
            cfg = models.LayerConfig.of(d, k=3, heads=int(mine["heads"].iloc[0]) if len(mine) else 1)
            rows.append(
                {
                    "source": source,
                    "d": int(d),
                    "batch": int(batch),
                    "other": other,
                    "n_star_time": by_time,
                    "n_star_flops": fits.closed_form_crossover_n(attention, other, int(batch), cfg),
                }
            )
    return pd.DataFrame(rows)


def write_report(runs: str | Path | Iterable[str | Path], out: str | Path, progress: bool = False) -> Path:
    """`python -m bench report` of run folders into `out`."""
    folders = [runs] if isinstance(runs, (str, Path)) else list(runs)
    argv = ["report", "--results", *map(str, folders), "--out", str(out)] + ([] if progress else ["--no-progress"])
    cmd_report(build_parser().parse_args(argv), ["bench.report", *argv])
    return Path(out)


def cite(key: str, reports: str | Path | None = None, fmt: str = "text") -> str:
    """One number of a report's numbers.json with its provenance, as `python -m bench cite KEY` says it."""
    from .report.numbers import FORMATS, cite_sentence, default_reports

    if not isinstance(key, str) or not key:
        raise ValueError(f"cite: a key is a text such as 'reference.h200-intel-xeon-16c-vm.cuda...', not {key!r}")
    if fmt not in FORMATS:
        raise ValueError(f"cite: fmt is one of {', '.join(FORMATS)}, not {fmt!r}")
    return cite_sentence(key, default_reports() if reports is None else [Path(reports)], fmt)


__all__ = ["measure", "read_points", "fit", "table1", "plot_table1", "crossover", "write_report", "cite"]
