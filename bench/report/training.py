"""The training section: a training step (`run --mode train`) beside the inference forward pass of the same point."""

from __future__ import annotations

import pandas as pd

import models

from .. import clock, fits
from ..policy import CPU, WALL
from ..spec import DEFAULT_MODE, IDENTITY, TRAIN_MODE
from .context import ReportContext
from .headline import verdict_cell
from .sweep_plot import GUIDE_NOTE, predicted_from_formula, primary_sweeps, sweep_figure

SAME_POINT = [c for c in IDENTITY if c != "mode"]  # two rows of one point but for their mode
SAVED_LAYERS = (
    models.ROLES.attention_explicit,
    models.ROLES.attention,
    models.ROLES.recurrent,
    models.ROLES.convolution,
)
RATIOS = {  # column: its train / inference ratio in words
    "flops_counted": "FLOPs",
    "time_s": "time",
    "mem_peak_bytes": "peak memory",
}
MODES = ("train", "inference")


def matched(ctx: ReportContext, train_source: str) -> pd.DataFrame:
    """`train_source`'s ok points also measured in inference on its machine, columns suffixed `_train`/`_inference`."""
    ok = ctx.points[ctx.points["status"] == "ok"]
    machine = ctx.machine_of_source(train_source)
    train = ok[ok["source"] == train_source]
    same_machine = ok["source"].map(ctx.machine_of_source) == machine
    inference = ok[same_machine & (ok["mode"] == DEFAULT_MODE)]
    keys = [c for c in SAME_POINT if c in ok]
    both = train.merge(inference, on=keys, suffixes=("_train", "_inference"))
    return _paired_times(both.sort_values(["layer", "n", "d", "batch"]).reset_index(drop=True))


def _paired_times(both: pd.DataFrame) -> pd.DataFrame:
    """`both` with each pair's times on one clock: `time_s_train`, `time_s_inference`, `time_ok`, `clock`."""
    sides = {
        mode: pd.DataFrame({c[: -len(mode) - 1]: both[c] for c in both if c.endswith(f"_{mode}")}, index=both.index)
        for mode in MODES
    }

    def wants_cpu(side: pd.DataFrame) -> pd.Series:
        return side["time_clock"] == CPU if "time_clock" in side else pd.Series(False, index=side.index)

    can = clock.has_cpu_clock(sides["train"]) & clock.has_cpu_clock(sides["inference"])
    on = pd.Series(WALL, index=both.index).mask((wants_cpu(sides["train"]) | wants_cpu(sides["inference"])) & can, CPU)
    out = both.assign(clock=on, time_ok=False, time_s_train=float("nan"), time_s_inference=float("nan"))
    for c in (WALL, CPU):
        rows = on == c
        if not rows.any():
            continue
        timed = {mode: clock.on_clock(side[rows], c) for mode, side in sides.items()}
        for mode in MODES:
            out.loc[rows, f"time_s_{mode}"] = timed[mode]["time_s"]
        out.loc[rows, "time_ok"] = timed["train"]["time_ok"] & timed["inference"]["time_ok"]
    return out


def _ratio_table(ctx: ReportContext, source: str, both: pd.DataFrame) -> str:
    lines = [
        "| layer | at | FLOPs | time | peak memory | time, every point in both modes |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for layer in [name for name in models.LAYERS if name in set(both["layer"])]:
        rows = both[both["layer"] == layer]
        top = rows.iloc[-1]  # the largest n (then d, batch) measured in both modes
        at = f"n={int(top.n)}, d={int(top.d)}, batch={int(top.batch)}"
        tag = f"n{int(top.n)}_d{int(top.d)}_b{int(top.batch)}"
        cells = []
        for column, word in RATIOS.items():
            if column == "time_s" and not top.time_ok:
                cells.append("– (a time not to be trusted)")
                continue
            ratio = top[f"{column}_train"] / top[f"{column}_inference"]
            key = f"{source}.training.{layer}.{'time_median_s' if column == 'time_s' else column}_ratio.{tag}"
            on = top.clock if column == "time_s" else ""
            note = f"{word}, train / inference" + (f", {on} clock" if on else "")
            cells.append(ctx.cite(key, round(float(ratio), 3), "x", top.run_id_train, note=note, clock=on))
        timed = rows[rows["time_ok"].astype(bool)]
        if timed.empty:
            lines.append(f"| {layer} | {at} | {' | '.join(cells)} | – (no pair with both times to be trusted) |")
            continue
        spread = timed["time_s_train"] / timed["time_s_inference"]
        on = timed["clock"].iloc[-1] if timed["clock"].nunique() == 1 else ""
        key = f"{source}.training.{layer}.time_ratio"
        low = ctx.cite(f"{key}.min", round(float(spread.min()), 2), "x", top.run_id_train, clock=on)
        high = ctx.cite(f"{key}.max", round(float(spread.max()), 2), "x", top.run_id_train, clock=on)
        left = f", {len(rows) - len(timed)} with a time not to be trusted left out" if len(timed) < len(rows) else ""
        lines.append(f"| {layer} | {at} | {' | '.join(cells)} | {low} to {high} over {len(timed)} points{left} |")
    return "\n".join(lines) + "\n"


def _exponent_table(texts: dict, source: str, layers: list[str]) -> str:
    rows = [
        {
            "layer": layer,
            "Table 1": fits.table1_cell(layer),
            "FLOPs ∝ n^": verdict_cell(texts, source, layer, "flops"),
            "time ∝ n^": verdict_cell(texts, source, layer, "time"),
            "memory ∝ n^": verdict_cell(texts, source, layer, "memory"),
        }
        for layer in layers
    ]
    return pd.DataFrame(rows).to_markdown(index=False) + "\n"


def _saved_figure(ctx: ReportContext, source: str) -> str:
    ok = ctx.points[(ctx.points["status"] == "ok") & (ctx.points["source"] == source)]
    ok = ok[ok["layer"].isin(SAVED_LAYERS) & ok["mem_saved_bytes"].notna()]
    data = primary_sweeps(ok, "n")
    if data.empty:
        return ""
    growth = []
    layers = [name for name in SAVED_LAYERS if name in set(data["layer"])]
    # over the lengths every layer shown was measured at, so the factors compare
    common = set.intersection(*(set(data.loc[data["layer"] == layer, "n"]) for layer in layers))
    for layer in layers:
        sweep = data[data["layer"] == layer].sort_values("n")
        if len(common) >= 2:
            sweep = sweep[sweep["n"].isin(common)]
        lo, hi = sweep.iloc[0], sweep.iloc[-1]
        key = f"{source}.training.{layer}.saved_growth_n{int(lo.n)}_to_n{int(hi.n)}_d{int(hi.d)}_b{int(hi.batch)}"
        factor = ctx.cite(key, round(float(hi.mem_saved_bytes / lo.mem_saved_bytes), 2), "x", hi.run_id)
        growth.append(f"{layer} {factor} (n {int(lo.n)} → {int(hi.n)}, {hi.sweep})")
    fig = sweep_figure(
        data,
        "n",
        "mem_saved_bytes",
        "memory",
        {source: ctx.source_label(source)},
        exponent=predicted_from_formula("memory", "n"),
    )
    fig.suptitle("What the forward pass keeps for the backward", fontsize=11)
    fig.axes[0].set_ylabel("allocated at the end of the forward")
    figure = ctx.figure(
        fig,
        f"training_saved_{source}",
        "Bytes saved for the backward against n",
        "Bytes a training forward pass leaves allocated for its backward (the tensors autograd saved and the "
        f"output), against n; {GUIDE_NOTE['memory']}.",
    )
    return figure + "\nSaved for the backward grows by " + "; ".join(growth) + ".\n"


def training_section(ctx: ReportContext, texts: dict) -> str:
    trained = set(ctx.points.loc[ctx.points["mode"] == TRAIN_MODE, "source"])
    sources = [s for s in ctx.sources() if s in trained]
    if not sources:
        return ""
    parts = [
        "## Training: forward and backward\n",
        "A training step of one layer as inside a network (`run --mode train`): the input requiring grad, one "
        "forward and one backward pass from a fixed random upstream gradient, the input's and every "
        "parameter's gradient computed. FLOPs by the same convention as inference (the backward kernels' "
        "products counted, bench.flops); a layer made only of matrix products does 3x its forward (a product's "
        "backward forms the input's and the weight's gradients, two products of its size); the fused "
        "attention's backward recomputes the n×n scores from Q, K and a saved row statistic instead of keeping "
        "them, five score-sized products where the forward did two; ATen's recurrent loop (rnn, gru on the "
        "CPU) skips the gradient of the zero initial state, one step's product. The formulas are in models/ "
        "(`analytic_flops`, `backward_flops`).\n",
    ]
    for source in sources:
        both = matched(ctx, source)
        layers = [
            name for name in models.LAYERS if name in set(ctx.points.loc[ctx.points["source"] == source, "layer"])
        ]
        parts.append(f"**{ctx.source_label(source)}**\n")
        if both.empty:
            parts.append("_No point of this source was measured in inference mode too: no ratios._\n")
        else:
            parts.append(
                "Train / inference, per layer at its largest point measured in both modes (time: medians; the "
                "last column: the range of the time ratio over every such point):\n\n" + _ratio_table(ctx, source, both)
            )
        parts.append(
            "\nThe train exponents in n against Table 1 (the same predictions: the backward repeats the "
            "forward's products):\n\n" + _exponent_table(texts, source, layers)
        )
        parts.append(_saved_figure(ctx, source))
    return "\n".join(parts)
