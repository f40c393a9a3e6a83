"""The report's figures: one colour per layer everywhere, readable log ticks, legends off the data, slope
guides with the stated exponent, and panels of two machines on one scale, never pooled into one line."""

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402

import models  # noqa: E402
from bench import fits  # noqa: E402
from bench.report import style  # noqa: E402
from bench.report.context import ReportContext  # noqa: E402
from bench.report.crossover import crossover_section  # noqa: E402
from bench.report.scaling import cite_fits, scaling_section  # noqa: E402

SOURCES = {"intel-xeon-2c-vm.cpu": "Intel Xeon, 2 cores (vm) · cpu", "amd-epyc-8c.cpu": "AMD EPYC, 8 cores · cpu"}


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# ------------------------------------------------------------------------------------------ colours
def test_every_registered_layer_has_its_own_colour_the_same_in_every_call():
    first, second = style.layer_palette(), style.layer_palette()
    assert list(first) == list(models.LAYERS)
    assert first == second
    colours = [tuple(np.round(c, 6)) for c in first.values()]
    assert len(set(colours)) == len(colours)
    markers = style.layer_markers()
    assert set(markers) == set(models.LAYERS) and markers == style.layer_markers()


def test_a_layer_registered_later_gets_a_new_colour_and_moves_no_other(monkeypatch):
    before = style.layer_palette()
    for i in range(12):  # past the end of the first palettes too
        monkeypatch.setitem(models.LAYERS, f"toy{i}", object)
    after = style.layer_palette()
    assert {name: after[name] for name in before} == before
    colours = [tuple(np.round(c, 6)) for c in after.values()]
    assert len(set(colours)) == len(colours) == len(models.LAYERS)


def test_a_stored_layer_no_longer_registered_still_gets_a_colour():
    palette = style.layer_palette(["gone_layer"])
    assert "gone_layer" in palette and palette["gone_layer"] not in [palette[n] for n in models.LAYERS]
    assert style.layer_order(["gone_layer", "lstm", "conv"]) == ["conv", "lstm", "gone_layer"]


# ------------------------------------------------------------------------------------------- guides
@pytest.mark.parametrize(("exponent", "variable", "label"), [(2, "n", "∝ n²"), (1, "n", "∝ n"), (2, "d", "∝ d²")])
def test_slope_guide_passes_through_its_anchor_with_the_stated_exponent(exponent, variable, label):
    fig, ax = plt.subplots()
    ax.loglog([64, 1024], [1e-3, 1.0], "o")
    limits = (ax.get_xlim(), ax.get_ylim())
    anchor = (1024.0, 0.5)
    line = style.slope_guide(ax, [64, 128, 256, 512], anchor, exponent, variable, color="C1")
    x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
    assert 1024.0 in x and y[list(x).index(1024.0)] == pytest.approx(0.5)
    slopes = np.diff(np.log(y)) / np.diff(np.log(x))
    assert slopes == pytest.approx(np.full(len(slopes), exponent))
    assert line.get_label() == label
    assert line.get_linestyle() == "--" and line.get_linewidth() <= 1.2 and line.get_alpha() < 1
    assert (ax.get_xlim(), ax.get_ylim()) == limits  # a guide does not stretch the axes


def test_slope_labels():
    assert style.slope_label(1) == "∝ n" and style.slope_label(2.0, "d") == "∝ d²"
    assert style.slope_label(1.93) == "∝ n¹·⁹³" and style.slope_label(0.001, "k") == "∝ 1"
    assert style.slope_label(3.01, "k") == "∝ k³"


# -------------------------------------------------------------------------------------------- ticks
def _labels(ax, axis="x", minor=False):
    which = ax.xaxis if axis == "x" else ax.yaxis
    return [t.get_text() for t in which.get_ticklabels(minor=minor)]


def _overlaps(ax, axis="x"):
    """Pairs of visible tick labels whose boxes intersect."""
    renderer = ax.figure.canvas.get_renderer()
    which = ax.xaxis if axis == "x" else ax.yaxis
    boxes = [t.get_window_extent(renderer) for t in which.get_ticklabels() if t.get_text() and t.get_visible()]
    return [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :] if a.overlaps(b)]


@pytest.mark.parametrize(
    "values",
    [[16, 32, 64, 128, 256, 512, 1024], [48, 64, 96, 128], [3, 5, 9, 15, 21, 31]],
    ids=["d=16..1024", "d=48..128", "k=3..31"],
)
def test_measured_ticks_label_the_measured_values_and_no_minor_tick(values):
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(values, np.square(values), "o-")
    ax.set_xscale("log")
    style.measured_ticks(ax, values, "x")
    fig.canvas.draw()
    assert all(text == "" for text in _labels(ax, minor=True))
    assert not ax.xaxis.get_minorticklocs().size
    assert [float(t) for t in _labels(ax) if t] == [float(v) for v in values]
    assert not _overlaps(ax)


def test_the_default_log_axis_would_have_labelled_minor_ticks():
    """The fault this replaces: matplotlib labels minor ticks ("6×10¹") on a short log axis."""
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot([48, 64, 96, 128], [1, 2, 3, 4], "o-")
    ax.set_xscale("log")
    fig.canvas.draw()
    assert any(_labels(ax, minor=True))


def test_measured_ticks_leave_blank_the_labels_that_would_collide():
    values = [1, 2, 3, 4, 5, 6, 8, 10, 16, 20, 32, 50, 64, 100, 128, 256, 512, 1000, 1024]
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot(values, values)
    style.measured_ticks(ax, values, "x")
    fig.canvas.draw()
    shown = [t for t in _labels(ax) if t]
    assert shown[0] == "1" and shown[-1] == "1024" and len(shown) < len(values)
    assert not _overlaps(ax)


def test_crowded_measured_ticks_keep_the_powers_of_two_over_their_odd_neighbours():
    values = [512, 1024, 1536, 2048, 3072, 4096, 6144, 8192]
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot(values, values)
    style.measured_ticks(ax, values, "x")
    fig.canvas.draw()
    shown = [t for t in _labels(ax) if t]
    assert shown == ["512", "1024", "2048", "4096", "8192"], shown
    assert not _overlaps(ax)


def test_thinning_by_hand():
    positions, widths = [0, 10, 14, 20, 30], [6] * 5  # labels 6 px wide: centres 6 px apart just clear
    assert style._thin(positions, widths) == [0, 1, 3, 4]  # in axis order: 14 touches 10, then 20 is clear
    assert style._thin(positions, widths, [False, False, True, False, False]) == [0, 2, 3, 4]  # 14 first


@pytest.mark.parametrize(("low", "high"), [(1.2e-4, 0.6), (2.6e-3, 4.7e-3), (3e6, 3e10)])
def test_log_axis_labels_round_values_with_units_and_no_minor_tick(low, high):
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot([1, 2], [low, high])
    ax.set_yscale("log")
    ax.set_ylim(low, high)
    ticks = style.log_axis(ax, "y", style.eng("s"))
    fig.canvas.draw()
    assert len(ticks) >= 2 and all(low <= t <= high for t in ticks)
    assert all(text == "" for text in _labels(ax, "y", minor=True))
    assert all(text.endswith("s") for text in _labels(ax, "y") if text)
    assert not _overlaps(ax, "y")


def test_legend_outside_sits_right_of_the_panel_or_below_it():
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3))
    for ax in (a, b):
        ax.plot([1, 2], [1, 2], label="conv")
        ax.plot([1, 2], [2, 1], label="lstm")
    right = style.legend_outside(a)
    below = style.legend_outside(b, where="below")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    assert right.get_window_extent(renderer).x0 >= a.get_window_extent(renderer).x1
    assert below.get_window_extent(renderer).y1 <= b.get_window_extent(renderer).y0
    assert style.legend_outside(fig.add_subplot(3, 3, 9)) is None  # nothing to show: no legend


# --------------------------------------------------------------------------- figures of the report
class CapturingContext(ReportContext):
    """A ReportContext that keeps each figure open for the test instead of saving it."""

    def figure(self, fig, name, alt, caption=""):
        self.captured[name] = (fig, caption)
        return f"![{alt}](figures/{name}.png)\n"


def _context(tmp_path, points: pd.DataFrame) -> CapturingContext:
    runs = {f"r{i}": {"machine": label, "started_utc": "2026-01-01T00:00:00+00:00"} for i, label in enumerate(SOURCES)}
    ctx = CapturingContext(points=points, runs=runs, out_dir=tmp_path, labels=dict(SOURCES))
    ctx.captured = {}
    return ctx


def _points() -> pd.DataFrame:
    """lstm and attention over n = 64..1024 at d = 8 on two machines; the second 3x slower, so one shared
    scale shows both; FLOPs from the layers' own formulas."""
    rows = []
    for i, (source, slow) in enumerate(zip(SOURCES, (1.0, 3.0))):
        for layer in ("lstm", "attention"):
            heads = 2 if layer == "attention" else None
            cfg = models.LayerConfig.of(8, "float32", heads=heads)
            for n in (64, 128, 256, 512, 1024):
                flops = models.LAYERS[layer].flops(1, n, cfg)
                t = slow * (2e-5 + flops / 1e9)
                rows.append(
                    {
                        "source": source,
                        "run_id": f"r{i}",
                        "layer": layer,
                        "device": "cpu",
                        "dtype": "float32",
                        "batch": 1,
                        "n": n,
                        "d": 8,
                        "k": np.nan,
                        "heads": heads if heads else np.nan,
                        "window": np.nan,
                        "dilation": np.nan,
                        "time_median_s": t,
                        "time_iqr_s": 0.1 * t,
                        "time_ci_low_s": 0.97 * t,
                        "time_ci_high_s": 1.03 * t,
                        "time_reliable": True,
                        "flops_analytic": flops,
                        "flops_counted": flops,
                        "flops_elementwise": 0.0,
                        "mem_peak_bytes": 1000.0 * n * (n if layer == "attention" else 1),
                        "status": "ok",
                    }
                )
    return pd.DataFrame(rows)


def _section(ctx, metric):
    fit_rows = fits.fit_table(ctx.points)
    texts = cite_fits(ctx, fit_rows)
    return scaling_section(ctx, fit_rows, texts, metric, metric, "")


def test_two_machines_get_one_panel_each_on_shared_axes(tmp_path):
    ctx = _context(tmp_path, _points())
    _section(ctx, "time")
    fig, caption = ctx.captured["time_vs_n"]
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == [SOURCES[source] for source in sorted(SOURCES)]
    assert axes[0].get_ylim() == axes[1].get_ylim() and axes[0].get_xlim() == axes[1].get_xlim()
    low, high = axes[0].get_ylim()
    times = ctx.points["time_median_s"]
    assert low <= times.min() and high >= times.max()  # the slower machine's points fit the shared scale
    assert "IQR/2" in caption and "*" not in caption


def test_time_panels_have_iqr_error_bars_layer_colours_and_guides_through_the_largest_point(tmp_path):
    points = _points()
    ctx = _context(tmp_path, points)
    _section(ctx, "time")
    fig, _ = ctx.captured["time_vs_n"]
    palette = style.layer_palette()
    for ax, source in zip(fig.axes, sorted(SOURCES)):
        lines = {line.get_label(): line for line in ax.get_lines()}
        for layer in ("lstm", "attention"):
            measured = points[(points["source"] == source) & (points["layer"] == layer)].sort_values("n")
            line = lines[layer]
            assert to_rgb(line.get_color()) == pytest.approx(palette[layer])
            assert list(line.get_ydata()) == pytest.approx(list(measured["time_median_s"]))
            guide = lines[f"_guide {layer}"]
            x, y = np.asarray(guide.get_xdata(), float), np.asarray(guide.get_ydata(), float)
            assert x[-1] == 1024 and y[-1] == pytest.approx(measured["time_median_s"].iloc[-1])
            slope = np.polyfit(np.log(x), np.log(y), 1)[0]
            assert slope == pytest.approx(2.0 if layer == "attention" else 1.0, abs=1e-6)
            assert to_rgb(guide.get_color()) == pytest.approx(palette[layer])
        # one error bar per point, from median - IQR/2 to median + IQR/2
        bars = [c for c in ax.collections if c.get_segments() and len(c.get_segments()) == 5]
        spans = sorted(round(seg[1][1] - seg[0][1], 12) for bar in bars for seg in bar.get_segments())
        iqr = points.loc[points["source"] == source, "time_iqr_s"]
        assert spans == pytest.approx(sorted(iqr))
    legend = fig.axes[-1].get_legend()
    texts = [t.get_text() for t in legend.get_texts()]
    assert any(t.startswith("lstm") and "∝ n" in t for t in texts)
    assert any(t.startswith("attention") and "∝ n²" in t for t in texts)
    renderer = fig.canvas.get_renderer()
    fig.canvas.draw()
    assert legend.get_window_extent(renderer).x0 >= fig.axes[-1].get_window_extent(renderer).x1  # off the data


def test_crossover_gets_one_panel_per_machine(tmp_path):
    ctx = _context(tmp_path, _points())
    text = crossover_section(ctx)
    assert "crossover" in ctx.captured, text
    fig, caption = ctx.captured["crossover"]
    assert len(fig.axes) == 2 and {ax.get_title() for ax in fig.axes} == set(SOURCES.values())
    assert fig.axes[0].get_ylim() == fig.axes[1].get_ylim()
    assert caption.count("*") == 1  # the n* it names, no more
    for ax in fig.axes:  # each panel draws only its own machine's rows: lines in lstm's colour
        coloured = [
            line for line in ax.get_lines() if to_rgb(line.get_color()) == pytest.approx(style.layer_palette()["lstm"])
        ]
        assert coloured and all(len(line.get_xdata()) == 1 for line in coloured)  # one d per series here


def test_the_figures_use_each_source_label_and_keep_the_source_in_cite_keys(tmp_path):
    ctx = _context(tmp_path, _points())
    _section(ctx, "flops")
    fig, _ = ctx.captured["flops_vs_n"]
    assert {ax.get_title() for ax in fig.axes} == set(SOURCES.values())
    assert any(key.startswith("amd-epyc-8c.cpu.") for key in ctx.numbers)
    assert not any(math.isnan(ax.get_ylim()[0]) for ax in fig.axes)


# ------------------------------------------------- sweeps told apart, untrusted times hollow, the mode named
def test_two_sweeps_in_one_panel_get_their_own_line_style_named_in_the_legend(tmp_path):
    points = _points()
    wide = points["layer"] == "attention"
    points.loc[wide, "d"] = 16  # attention swept at d=16, lstm at d=8: two sweeps in one panel
    ctx = _context(tmp_path, points[points["source"] == "amd-epyc-8c.cpu"])
    _section(ctx, "time")
    fig, caption = ctx.captured["time_vs_n"]
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    assert lines["lstm"].get_linestyle() != lines["attention"].get_linestyle()
    texts = [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]
    assert "sweep: batch=1, d=16" in texts and "sweep: batch=1, d=8" in texts
    assert "batch=1, d=16; batch=1, d=8: one line style per sweep" in caption


def test_one_sweep_draws_solid_lines_and_names_no_sweep_in_the_legend(tmp_path):
    ctx = _context(tmp_path, _points())
    _section(ctx, "time")
    fig, _ = ctx.captured["time_vs_n"]
    assert {line.get_linestyle() for line in fig.axes[0].get_lines() if not line.get_label().startswith("_")} == {"-"}
    assert not any(t.get_text().startswith("sweep:") for t in fig.axes[-1].get_legend().get_texts())


def test_a_time_not_to_be_trusted_is_drawn_hollow_and_the_line_keeps_it(tmp_path):
    points = _points()
    bad = (points["source"] == "amd-epyc-8c.cpu") & (points["layer"] == "lstm") & (points["n"] == 256)
    points.loc[bad, "time_reliable"] = False
    ctx = _context(tmp_path, points)
    _section(ctx, "time")
    fig, caption = ctx.captured["time_vs_n"]
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}  # amd-epyc-8c.cpu sorts first
    hollow = lines["_hollow lstm"]
    assert list(hollow.get_xdata()) == [256] and hollow.get_markerfacecolor() == "white"
    assert list(lines["lstm"].get_xdata()) == [64, 128, 256, 512, 1024]  # the line still passes through it
    assert lines["lstm"].get_markevery() == [True, True, False, True, True]  # no filled marker there
    assert "_hollow lstm" not in {line.get_label() for line in fig.axes[1].get_lines()}  # the other machine's
    assert "hollow: time not to be trusted" in [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]
    assert "hollow markers" in caption


def test_each_panel_names_the_call_of_its_mode(tmp_path):
    points = _points()
    points["mode"] = np.where(points["source"] == "intel-xeon-2c-vm.cpu", "train", "inference")
    ctx = _context(tmp_path, points)
    _section(ctx, "time")
    fig, caption = ctx.captured["time_vs_n"]
    assert [ax.get_ylabel() for ax in fig.axes] == ["time per forward pass", "time per training step"]
    assert caption.startswith("Time per forward pass (per training step in the -train panels) against n")


# ------------------------------------------------------------------------------- the first figure
def test_the_first_figure_draws_table1_rows_time_and_flops_with_guides_through_the_largest_point(tmp_path):
    from bench.report.table1_figure import table1_section  # noqa: PLC0415

    points = _points()
    extra = points[points["layer"] == "attention"].assign(layer="attention_linear")  # not a row of Table 1
    ctx = _context(tmp_path, pd.concat([points, extra], ignore_index=True))
    text = table1_section(ctx, fits.fit_table(ctx.points))
    names = [f"table1_{source}" for source in sorted(SOURCES)]
    assert sorted(ctx.captured) == names and text.count("![") == 2
    fig, caption = ctx.captured["table1_amd-epyc-8c.cpu"]
    time_ax, flops_ax = fig.axes
    assert (time_ax.get_ylabel(), flops_ax.get_ylabel()) == (
        "time per forward pass",
        "FLOPs per forward pass (counted)",
    )
    mine = ctx.points[ctx.points["source"] == "amd-epyc-8c.cpu"]
    for ax, column in ((time_ax, "time_median_s"), (flops_ax, "flops_counted")):
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert {"lstm", "attention"} <= set(lines) and "attention_linear" not in lines
        for layer, slope in (("lstm", 1.0), ("attention", 2.0)):
            measured = mine[mine["layer"] == layer].sort_values("n")
            assert list(lines[layer].get_ydata()) == pytest.approx(list(measured[column]))
            guides = [line for line in ax.get_lines() if line.get_label() == "_guide"]
            guide = next(g for g in guides if to_rgb(g.get_color()) == pytest.approx(style.layer_palette()[layer]))
            x, y = np.asarray(guide.get_xdata(), float), np.asarray(guide.get_ydata(), float)
            assert x[-1] == 1024 and y[-1] == pytest.approx(measured[column].iloc[-1])
            # lstm: 8·n·d² + ... is n-linear; attention's n²·d term over n = 64..1024 at d = 8 is near 2
            assert np.polyfit(np.log(x), np.log(y), 1)[0] == pytest.approx(slope, abs=0.1)
    assert "time (left) and counted FLOPs (right) per forward pass" in caption


def test_the_first_screen_has_a_strip_of_the_sections_figures_linking_to_them():
    from bench.report.render import Section, to_html  # noqa: PLC0415

    sections = [
        Section("time", "Time", 'Text.\n\n![Time "against" n](figures/time_vs_n.png)\n\n![more](figures/b.png)\n'),
        Section("claims", "Claims", "A table, no figure.\n"),
        Section("memory", "Memory", "![Memory](figures/memory_vs_n.png)\n"),
    ]
    page = to_html("T", "headline", "verdicts", "intro", sections)
    strip = page.split("<nav id='strip'>")[1].split("</nav>")[0]
    assert strip.count("<a ") == 2  # one per section with a figure, its first
    assert '<a href="#time"><img src="figures/time_vs_n.png" alt="Time &quot;against&quot; n"' in strip
    assert '<a href="#memory"><img src="figures/memory_vs_n.png"' in strip and "b.png" not in strip
    assert page.index("<nav id='strip'>") < page.index('<details id="time">')  # on the first screen, before them


def _log_log_figure(formatter):
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.loglog([128, 256, 512, 1024], [1e-4, 2e-4, 4.1e-4, 8e-4], marker="o")
    ax.yaxis.set_major_formatter(formatter)
    return fig


def test_a_figure_drawn_in_a_worker_is_the_one_drawn_here(monkeypatch):
    """Byte for byte, with the ticks the worker makes at draw time; one that does not pickle is drawn here."""
    from bench.report import drawing

    here = drawing.png(_log_log_figure(matplotlib.ticker.EngFormatter(unit="s")))
    monkeypatch.setattr(drawing, "physical_cores", lambda: 2)
    monkeypatch.setattr(drawing, "_main_runs_nothing", lambda: True)  # however pytest was started
    away = drawing.in_workers(_log_log_figure(matplotlib.ticker.EngFormatter(unit="s")))
    assert isinstance(away, drawing.Drawing) and drawing.drawn({"f.png": away, "t.csv": "x"}) == {
        "f.png": here,
        "t.csv": "x",
    }
    lambda_formatter = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    unpicklable = drawing.in_workers(_log_log_figure(lambda_formatter))
    assert isinstance(unpicklable, bytes) and unpicklable[:4] == b"\x89PNG"
    assert plt.get_fignums() == []  # every figure closed, drawn here or away
    monkeypatch.setattr(drawing, "physical_cores", lambda: 1)
    assert isinstance(drawing.in_workers(_log_log_figure(lambda_formatter)), bytes)  # one core: no workers


def test_workers_draw_only_where_they_would_not_run_the_main_script_again(monkeypatch):
    import sys
    import types

    from bench.report import drawing

    script = types.ModuleType("__main__")
    script.__file__, script.__spec__ = "/home/me/study.py", None  # python study.py: a worker would run it again
    monkeypatch.setitem(sys.modules, "__main__", script)
    assert not drawing._main_runs_nothing()
    monkeypatch.setattr(drawing, "physical_cores", lambda: 8)
    assert isinstance(drawing.in_workers(_log_log_figure(matplotlib.ticker.EngFormatter(unit="s"))), bytes)
    script.__spec__ = types.SimpleNamespace(name="bench.__main__")  # python -m bench
    assert drawing._main_runs_nothing()
    del script.__file__  # a notebook, python -c
    script.__spec__ = None
    assert drawing._main_runs_nothing()


def test_a_forked_child_draws_its_figures_itself(monkeypatch):
    """A fork (tests/forked.py, a fork-started worker) inherits the pool without its threads: it must not wait on it."""
    import os
    import signal

    from bench.report import drawing

    monkeypatch.setattr(drawing, "physical_cores", lambda: 2)
    monkeypatch.setattr(drawing, "_main_runs_nothing", lambda: True)
    away = [drawing.in_workers(_log_log_figure(matplotlib.ticker.EngFormatter(unit="s"))) for _ in range(4)]
    assert all(isinstance(d, drawing.Drawing) for d in away) and drawing.drawn(dict(enumerate(away)))  # 2 workers up
    pid = os.fork()
    if pid == 0:  # the child: a PNG drawn here within 30 s, or a failing exit
        signal.alarm(30)
        drawn = drawing.in_workers(_log_log_figure(matplotlib.ticker.EngFormatter(unit="s")))
        os._exit(0 if isinstance(drawn, bytes) and drawn[:4] == b"\x89PNG" else 1)
    assert os.waitpid(pid, 0)[1] == 0
