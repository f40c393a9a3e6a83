"""One look for every figure: a colour and marker per layer, readable log axes, legends off the data, slope guides."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.ticker import (
    EngFormatter,
    FixedLocator,
    Formatter,
    LogLocator,
    MaxNLocator,
    NullFormatter,
    NullLocator,
)
from matplotlib.transforms import offset_copy

import models

PALETTE = "tab10"  # the first ten layers' colours, in registration order
EXTRA_COLORS = "Dark2"  # further layers'
MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "h", "<", ">", "p", "d", "H", "8")
GUIDE_STYLE = {"linestyle": (0, (4, 3)), "linewidth": 1.0, "alpha": 0.55, "zorder": 1}
LEGEND_FONTSIZE = 8
PANEL_SIZE = (5.2, 4.0)  # inches per panel of a figure with one panel per source

_SUPERSCRIPT = str.maketrans("0123456789.-", "⁰¹²³⁴⁵⁶⁷⁸⁹·⁻")


def _layer_names(extra: Iterable[str] = ()) -> list[str]:
    """The registered layers in order, then other names sorted (a stored run may name a layer no longer built)."""
    names = list(models.LAYERS)
    return names + sorted({str(name) for name in extra} - set(names))


def _colors(count: int) -> list[tuple]:
    """PALETTE's colours, then of EXTRA_COLORS and black the one farthest in RGB from those taken, then husl's."""
    colors = [tuple(c) for c in sns.color_palette(PALETTE)]
    candidates = [tuple(c) for c in sns.color_palette(EXTRA_COLORS)] + [(0.0, 0.0, 0.0)]
    while len(colors) < count and candidates:
        farthest = max(candidates, key=lambda c: min(math.dist(c, t) for t in colors))
        candidates.remove(farthest)
        colors.append(farthest)
    if count > len(colors):
        colors += [tuple(c) for c in sns.color_palette("husl", count - len(colors))]
    return colors[:count]


def layer_palette(extra: Iterable[str] = ()) -> dict[str, tuple]:
    names = _layer_names(extra)
    return dict(zip(names, _colors(len(names))))


def layer_markers(extra: Iterable[str] = ()) -> dict[str, str]:
    names = _layer_names(extra)
    return {name: MARKERS[i % len(MARKERS)] for i, name in enumerate(names)}


def layer_order(names: Iterable[str]) -> list[str]:
    present = {str(name) for name in names}
    return [name for name in _layer_names(present) if name in present]


def plain(value: float) -> str:
    value = float(value)
    return f"{int(value)}" if value.is_integer() and abs(value) < 1e15 else f"{value:g}"


def percent(value: float) -> str:
    return f"{plain(float(f'{100 * value:.3g}'))} %"


def eng(unit: str) -> Callable[[float], str]:
    """SI-prefixed labels: eng("s")(3e-4) == "300 µs"."""
    return functools.partial(_eng, EngFormatter(unit=unit, sep=" "))


def _eng(formatter: EngFormatter, value: float) -> str:
    return formatter(value) if value != 0 else "0"


def _axis(ax, axis: str):
    if axis not in ("x", "y"):
        raise ValueError(f"axis must be 'x' or 'y', not {axis!r}")
    return ax.xaxis if axis == "x" else ax.yaxis


def _thin(positions, widths, preferred=None) -> list[int]:
    """Labels to show (by centre and extent, px): the ends, the preferred, the rest, none touching one kept."""
    count = len(positions)
    if count <= 2:
        return list(range(count))
    preferred = [False] * count if preferred is None else list(preferred)
    order = [int(i) for i in np.argsort(positions)]
    inner = order[1:-1]
    candidates = [order[0], order[-1]] + [i for i in inner if preferred[i]] + [i for i in inner if not preferred[i]]

    def clear(i, j):
        return abs(positions[i] - positions[j]) >= (widths[i] + widths[j]) / 2

    kept: list[int] = []
    for i in candidates:
        if all(clear(i, j) for j in kept):
            kept.append(i)
    return sorted(kept)


def _power_of_two(value: float) -> bool:
    return value >= 1 and float(value).is_integer() and int(value) & (int(value) - 1) == 0


class MeasuredFormatter(Formatter):
    """Labels at the measured values, thinned when drawn (a label that would touch another is left blank)."""

    def __init__(self, fmt: Callable[[float], str] = None):
        self.fmt = fmt or plain

    def __call__(self, x, pos=None):
        return self.fmt(x)

    def format_ticks(self, values):
        labels = [self.fmt(v) for v in values]
        axis = self.axis
        if axis is None or len(values) <= 2:
            return labels
        ax = axis.axes
        horizontal = axis.axis_name == "x"
        ticks = axis.get_major_ticks(len(values))
        size = ticks[0].label1.get_fontsize() if ticks else plt.rcParams["font.size"]
        pixels = size * ax.figure.dpi / 72
        other = ax.get_ylim()[0] if horizontal else ax.get_xlim()[0]
        points = [(v, other) if horizontal else (other, v) for v in values]
        positions = ax.transData.transform(points)[:, 0 if horizontal else 1]
        # a digit is about 0.6 em wide; a label needs its width plus a digit of space (a line plus some on y)
        widths = [(len(text) + 1) * 0.6 * pixels if horizontal else 1.4 * pixels for text in labels]
        shown = set(_thin(list(positions), widths, [_power_of_two(v) for v in values]))
        return [text if i in shown else "" for i, text in enumerate(labels)]


def measured_ticks(ax, values, axis: str = "x", fmt: Callable[[float], str] = plain) -> list[float]:
    """A log `axis` with its ticks at the measured `values` of a swept size, labelled plainly, no minor ticks."""
    values = sorted({float(v) for v in values if v is not None and np.isfinite(float(v)) and float(v) > 0})
    which = _axis(ax, axis)
    if which.get_scale() != "log":
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    if not values:
        return []
    which.set_major_locator(FixedLocator(values))
    which.set_major_formatter(MeasuredFormatter(fmt))
    which.set_minor_locator(NullLocator())
    which.set_minor_formatter(NullFormatter())
    return values


TICK_SCHEMES = ((1, 2, 3, 4, 5, 6, 7, 8, 9), (1, 2, 5), (1, 3), (1,))  # multiples per decade, dense first


def nice_log_ticks(low: float, high: float, max_ticks: int = 8) -> list[float]:
    """At most `max_ticks` round values from `low` to `high`: 1-2-5, 1-3 or decade steps, else evenly spaced ones."""
    if not (low > 0 and high > low):
        return []
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))

    def ticks(subs, step):
        out = []
        for exponent in range(first - first % step, last + 1, step):
            for sub in subs:
                value = float(f"{sub * 10.0**exponent:.12g}")
                if low * (1 - 1e-9) <= value <= high * (1 + 1e-9):
                    out.append(value)
        return out

    # evenly looking steps first, then evenly spaced values (under a decade), every multiple; 3 labels, else 2, 1
    even = [ticks(subs, 1) for subs in TICK_SCHEMES[1:]] + [ticks((1,), step) for step in range(2, 10)]
    linear = MaxNLocator(nbins=max(2, min(4, max_ticks - 1)), steps=[1, 2, 2.5, 5, 10]).tick_values(low, high)
    linear = [float(f"{v:.12g}") for v in linear if low * (1 - 1e-9) <= v <= high * (1 + 1e-9)]
    candidates = [*even, linear, ticks(TICK_SCHEMES[0], 1)]
    for least in (3, 2, 1):
        fitting = [c for c in candidates if least <= len(c) <= max_ticks]
        if fitting:
            return fitting[0]
    return [float(f"{math.sqrt(low * high):.2g}")]  # no round value inside: the middle


def log_axis(ax, axis: str = "y", fmt: Callable[[float], str] = plain) -> list[float]:
    """A log `axis` labelled at round values within its limits, fixed from now (call it once the data are drawn)."""
    which = _axis(ax, axis)
    if which.get_scale() != "log":
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    low, high = ax.get_xlim() if axis == "x" else ax.get_ylim()
    (ax.set_xlim if axis == "x" else ax.set_ylim)(low, high)  # later lines (guides) must not move them
    low, high = min(low, high), max(low, high)
    # room: the axis length over a label's extent (its longest label's width on x, two lines on y)
    box = ax.get_position()
    size_in = plt.rcParams["font.size"] / 72
    if axis == "x":
        length = box.width * ax.figure.get_figwidth()
        decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
        label = max(len(fmt(10.0**exponent)) for exponent in decades)
        room = length / ((label + 2) * 0.6 * size_in)
    else:
        length = box.height * ax.figure.get_figheight()
        room = length / (2.2 * size_in)
    ticks = nice_log_ticks(low, high, max_ticks=max(2, min(10, int(room))))
    which.set_major_locator(FixedLocator(ticks))
    which.set_major_formatter(MeasuredFormatter(fmt))
    which.set_minor_locator(LogLocator(base=10, subs=tuple(range(2, 10))))
    which.set_minor_formatter(NullFormatter())
    return ticks


def grid(ax) -> None:
    ax.grid(True, which="major", alpha=0.35, linewidth=0.7)
    ax.grid(True, which="minor", alpha=0.12, linewidth=0.5)


def legend_outside(ax, handles=None, labels=None, title: str | None = None, where: str = "right", **kwargs):
    """The legend right of the panel or below it, never over the data (saved with bbox_inches="tight")."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return None
    options = dict(fontsize=LEGEND_FONTSIZE, title_fontsize=LEGEND_FONTSIZE, frameon=False, borderaxespad=0.0)
    if where == "right":
        options.update(loc="upper left", bbox_to_anchor=(1.03, 1.0))
    elif where == "below":
        # under the x label: a fixed distance in points, whatever the panel's height
        below = offset_copy(ax.transAxes, fig=ax.figure, y=-34, units="points")
        options.update(loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=below, ncol=min(2, len(handles)))
    else:
        raise ValueError(f"where must be 'right' or 'below', not {where!r}")
    options.update(kwargs)
    return ax.legend(handles, labels, title=title, **options)


def exponent_text(exponent: float) -> str:
    """2 -> "²", 1 -> "", 1.5 -> "¹·⁵" (within 0.02 of an integer, that integer)."""
    rounded = round(exponent)
    if abs(exponent - rounded) < 0.02:
        return "" if rounded == 1 else str(int(rounded)).translate(_SUPERSCRIPT)
    return f"{exponent:.2f}".rstrip("0").translate(_SUPERSCRIPT)


def slope_label(exponent: float, variable: str = "n") -> str:
    if abs(exponent) < 0.02:
        return "∝ 1"
    return f"∝ {variable}{exponent_text(exponent)}"


def slope_guide(ax, x, anchor: tuple[float, float], exponent: float, variable: str = "n", color="0.35", label=None):
    """A thin dashed line y = y₀·(x/x₀)^exponent through `anchor` (x₀, y₀), not moving the axes' limits."""
    x0, y0 = float(anchor[0]), float(anchor[1])
    xs = np.array(sorted({float(v) for v in x} | {x0}), float)
    ys = y0 * (xs / x0) ** float(exponent)
    (line,) = ax.plot(
        xs,
        ys,
        color=color,
        label=slope_label(exponent, variable) if label is None else label,
        scalex=False,
        scaley=False,
        **GUIDE_STYLE,
    )
    return line


PANELS_PER_ROW = 3  # a figure of many sources wraps: seven in a row made each panel a sliver on a screen


def panels(count: int, sharex: bool = True, sharey: bool = True):
    """`count` panels, PANELS_PER_ROW to a row, each with its own tick labels."""
    cols = max(1, min(count, PANELS_PER_ROW))
    rows = -(-count // cols)
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(PANEL_SIZE[0] * cols, PANEL_SIZE[1] * rows),
        squeeze=False,
        sharex=sharex,
        sharey=sharey,
        gridspec_kw={"hspace": 0.45, "wspace": 0.25},
    )
    flat = list(axes.flat)
    for ax in flat[count:]:
        fig.delaxes(ax)
    for ax in flat[:count]:
        ax.tick_params(labelbottom=True, labelleft=True)
    return fig, flat[:count]
