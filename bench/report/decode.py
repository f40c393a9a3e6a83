"""The report's "Generating a sequence": each layer's step and state against position t. Method: docs/method.md."""

from __future__ import annotations

import numpy as np
import pandas as pd

import models

from .. import clock, fits
from ..spec import DECODE_MODE, RECOMPUTE_MODE, mode_of
from ..sweeps import row_config, sweeps
from . import style
from .context import ReportContext
from .headline import verdict_cell, why_no_exponent

TITLE = "Generating a sequence"
NO_CACHE = ", no cache"
BOTTLENECK_REF = "004_33061bd9250784bf.txt:12"
BOTTLENECK_QUOTE = "无论输入序列有多长、多复杂，编码器都必须将其所有信息压缩到一个固定长度的向量中。"


def decode_sources(ctx: ReportContext) -> list[str]:
    points = ctx.decode
    if points is None or points.empty:
        return []
    present = set(points.loc[np.array(mode_of(points)) == DECODE_MODE, "source"])
    present |= {s.replace(f"-{RECOMPUTE_MODE}", f"-{DECODE_MODE}") for s in points["source"]}
    return sorted(present, key=lambda s: (ctx.machine_of_source(s) != ctx.primary, s))


def _sibling(source: str) -> str:
    return source.replace(f"-{DECODE_MODE}", f"-{RECOMPUTE_MODE}")


def _widest(points: pd.DataFrame, source: str, layer: str) -> pd.DataFrame:
    """The layer's widest t-sweep in `source` (ok points, sorted, times on their fit's clock), else empty."""
    mine = points[(points["source"] == source) & (points["layer"] == layer)]
    best = mine.iloc[0:0]
    for _, sweep in sweeps(mine, "n"):
        if sweep["n"].nunique() > best["n"].nunique():
            best = sweep
    return clock.on_clock(best.sort_values("n")) if len(best) else best


def _rows(ctx: ReportContext, source: str) -> list[tuple[str, str, str, pd.DataFrame]]:
    points = ctx.decode
    rows = []
    for layer in style.layer_order(set(points.loc[points["source"] == source, "layer"])):
        sweep = _widest(points, source, layer)
        if len(sweep):
            rows.append((layer, layer, source, sweep))
    for layer in style.layer_order(set(points.loc[points["source"] == _sibling(source), "layer"])):
        sweep = _widest(points, _sibling(source), layer)
        if len(sweep):
            rows.append((f"{layer}{NO_CACHE}", layer, _sibling(source), sweep))
    return rows


def _label(ctx: ReportContext, source: str) -> str:
    return ctx.source_label(source if source in ctx.labels else _sibling(source))


def _uncached(name: str) -> bool:
    return name.endswith(NO_CACHE)


def _key_layer(name: str, layer: str) -> str:
    return f"{layer}_no_cache" if _uncached(name) else layer


def _predicted(name: str, layer: str) -> tuple[str, str]:
    cls = models.LAYERS[layer]
    if _uncached(name):
        return fits.table1_cell(layer).replace("n", "t"), "O(t·d) (the tokens)"
    row = getattr(cls, "decode", None)
    return (row.compute_text, row.state_text) if row is not None else ("no cost stated", "measured")


def generate_time_s(ts, times_s, tokens: int) -> float:
    """Seconds to make positions 0 .. tokens−1, each step's time interpolated log-log (docs/method.md)."""
    ts, times = np.asarray(ts, float), np.asarray(times_s, float)
    if tokens > ts[-1] + 1:
        raise ValueError(f"{tokens} tokens: measured to position {int(ts[-1])} only")
    positions = np.maximum(np.arange(tokens, dtype=float), ts[0])
    return float(np.exp(np.interp(np.log(positions), np.log(ts), np.log(times))).sum())


def _config(sweep: pd.DataFrame) -> models.LayerConfig:
    return row_config(next(sweep.itertuples()))


def _crossovers(ctx: ReportContext, source: str, rows) -> list[str]:
    by_name = {name: sweep for name, _, _, sweep in rows}
    attention = by_name.get(models.ROLES.attention)
    lines = []
    if attention is None:
        return lines
    for other in (models.ROLES.recurrent, models.ROLES.convolution):
        theirs = by_name.get(other)
        if theirs is None or theirs["batch"].iloc[0] != attention["batch"].iloc[0]:
            continue
        batch, cfg = int(attention["batch"].iloc[0]), _config(attention)
        if theirs["d"].iloc[0] != cfg.d:
            continue
        run_id = attention["run_id"].iloc[-1]
        key = f"{source}.crossover_t.{models.ROLES.attention}_vs_{other}"
        by_flops = fits.closed_form_crossover_n(models.ROLES.attention, other, batch, cfg, DECODE_MODE)
        flops_text = (
            "never, up to 2⁴⁰"
            if by_flops is None
            else ctx.cite(f"{key}.flops", by_flops, "positions", run_id, show_unit=False)
        )
        by_time, timed, _, a_t, b_t = fits.time_crossing(attention.set_index("n"), theirs.set_index("n"))
        if by_time is not None:
            time_text = f"t* = {ctx.cite(f'{key}.time', round(by_time), 'positions', run_id, show_unit=False)}"
        elif len(timed) >= 2 and (a_t.loc[timed, "time_s"] >= b_t.loc[timed, "time_s"]).all():
            time_text = f"costlier at every measured position (from t = {timed[0]})"
        elif len(timed) >= 2:
            time_text = f"cheaper at every measured position (to t = {timed[-1]})"
        else:
            time_text = "no two positions with reliable times of both"
        lines.append(
            f"- **{models.ROLES.attention}** (key/value cache) against **{other}**: its step's FLOPs reach the "
            f"{other}'s from t* = {flops_text} (closed form, d = {cfg.d}, batch {batch}); by time, {time_text}."
        )
    return lines


def _state_at(ctx: ReportContext, source: str, name: str, sweep: pd.DataFrame) -> str:
    last = sweep.iloc[-1]
    if pd.isna(last.get("mem_state_bytes")):
        return "–"
    layer = _key_layer(name, str(last["layer"]))
    return (
        ctx.cite(f"{source}.{layer}.state_bytes.t{int(last['n'])}", int(last["mem_state_bytes"]), "B", last["run_id"])
        + f" (t = {int(last['n'])})"
    )


def _table(ctx: ReportContext, source: str, rows) -> tuple[str, int]:
    cached = [sweep for name, *_, sweep in rows if not _uncached(name)] or [sweep for *_, sweep in rows]
    tokens = min(int(sweep["n"].max()) for sweep in cached) + 1
    lines = [
        f"| layer | step, predicted | FLOPs ∝ t^e | time ∝ t^e | state, predicted | state kept | state ∝ t^e "
        f"| time to generate {tokens:,} tokens |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, layer, src, sweep in rows:
        step, state = _predicted(name, layer)
        reliable = sweep[sweep["time_ok"].astype(bool)]
        if len(reliable) < 2:
            total = f"– ({len(reliable)} reliable time{'s' if len(reliable) != 1 else ''})"
        elif tokens - 1 > reliable["n"].iloc[-1]:
            total = f"– (timed to t = {int(reliable['n'].iloc[-1]):,})"
        else:
            seconds = generate_time_s(reliable["n"], reliable["time_s"], tokens)
            key = f"{src}.{_key_layer(name, layer)}.generate_s.t{tokens}"
            total = ctx.cite(key, seconds, "s", reliable["run_id"].iloc[-1])
        cells = [verdict_cell(ctx.decode_texts, src, layer, m) for m in ("flops", "time", "memory")]
        lines.append(
            f"| {name} | {step} | {cells[0]} | {cells[1]} | {state} | {_state_at(ctx, src, name, sweep)} "
            f"| {cells[2]} | {total} |"
        )
    return "\n".join(lines) + "\n", tokens


def _figure(ctx: ReportContext, source: str, rows) -> str:
    palette = style.layer_palette()
    markers = style.layer_markers()
    fig, axes = style.panels(2, sharex=True, sharey=False)
    left, right = axes
    for name, layer, _, sweep in rows:
        look = dict(color=palette[layer], marker=markers[layer], linewidth=1.4, markersize=4)
        if _uncached(name):
            look |= dict(linestyle="--", markerfacecolor="none")
        t = sweep["n"].to_numpy(float)
        left.plot(t, sweep["time_s"].to_numpy(float), label=name, **look)
        shaky = ~sweep["time_ok"].astype(bool).to_numpy()
        left.plot(t[shaky], sweep["time_s"].to_numpy(float)[shaky], "o", color=look["color"], markerfacecolor="white")
        state = sweep["mem_state_bytes"].to_numpy(float)
        if np.isfinite(state).all() and (state > 0).all():
            right.plot(t, state, label=name, **look)
    every_t = np.concatenate([sweep["n"].to_numpy(float) for *_, sweep in rows])
    for ax, what in ((left, "time of one step"), (right, "state kept (bytes)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("position t")
        ax.set_ylabel(what)
        style.grid(ax)
    attention = next((sweep for name, *_, sweep in rows if name == models.ROLES.attention), None)
    if attention is not None:
        last = attention.iloc[-1]
        style.slope_guide(left, every_t, (last["n"], last["time_s"]), 1, "t")
        style.slope_guide(right, every_t, (last["n"], last["mem_state_bytes"]), 1, "t")
    style.log_axis(left, "y", style.eng("s"))
    style.log_axis(right, "y", style.eng("B"))
    style.measured_ticks(left, every_t, "x")
    style.legend_outside(right)
    fig.suptitle(_label(ctx, source), fontsize=10)
    name = f"decode_{source.replace('.', '_')}"
    return ctx.figure(
        fig,
        name,
        f"Decode step time and state against t, {_label(ctx, source)}",
        f"Generating a sequence on {_label(ctx, source)}: the time of one step (left) and the state kept "
        "(right) against the position t of the token, log-log; dashed: attention without a key/value cache (each "
        "token by the causal forward over its prefix); hollow: a time not to be trusted on its clock, left out of the "
        "fits; grey: ∝ t through the cached attention's last point.",
    )


def _bottleneck(ctx: ReportContext, source: str, rows) -> str:
    by_name = {name: sweep for name, _, _, sweep in rows}
    recurrent, attention = by_name.get(models.ROLES.recurrent), by_name.get(models.ROLES.attention)
    if recurrent is None or attention is None or recurrent["mem_state_bytes"].isna().any():
        return ""
    r_low, r_high = recurrent["mem_state_bytes"].iloc[[0, -1]].astype(int)
    a_low, a_high = attention["mem_state_bytes"].iloc[[0, -1]].astype(int)
    t_low, t_high = int(recurrent["n"].iloc[0]), int(recurrent["n"].iloc[-1])
    holds = r_low == r_high and a_high > a_low
    verdict = ctx.cite(
        f"{source}.claims.context_bottleneck", "holds" if holds else "fails", "", attention["run_id"].iloc[-1]
    )
    run_id = recurrent["run_id"].iloc[-1]
    low = ctx.cite(f"{source}.{models.ROLES.recurrent}.state_bytes.t{t_low}", int(r_low), "B", run_id)
    high = ctx.cite(f"{source}.{models.ROLES.recurrent}.state_bytes.t{t_high}", int(r_high), "B", run_id)
    return (
        f"**Claim** ({BOTTLENECK_REF}: “{BOTTLENECK_QUOTE}”, a recurrent encoder compresses the whole input into one "
        f"fixed-length vector): **{verdict}**. The {models.ROLES.recurrent}'s state is {low} at t = {t_low} and "
        f"{high} at t = {t_high}, whatever the length; the cached {models.ROLES.attention} keeps every position, "
        f"{int(a_low):,} B at t = {int(attention['n'].iloc[0])} and {int(a_high):,} B at t = "
        f"{int(attention['n'].iloc[-1])}.\n"
    )


def decode_section(ctx: ReportContext) -> str:
    sources = decode_sources(ctx)
    if not sources:
        return ""
    parts = [
        f"## {TITLE}\n",
        "An autoregressive decoder makes one token at a time from everything before it. A decode point times the "
        "step that makes the token at position t (the `n` column) from the state of positions 0..t−1: attention's "
        "key/value cache, a recurrence's hidden state, a convolution's last (k−1)·dilation inputs, linear "
        "attention's running sums, the restricted attention's window (`run --mode decode`); recompute points make "
        "that token by the causal forward over all t + 1 positions, attention without a cache (`--mode "
        "recompute`). FLOPs of one step are counted at the operator level; the state's bytes are those of the "
        "tensors the step reads (`mem_state_bytes`). Each exponent in t is judged against the layer's decode row "
        "(models: `decode`), the state's against its formula.\n",
    ]
    for source in sources:
        rows = _rows(ctx, source)
        if not rows:
            continue
        table, _ = _table(ctx, source, rows)
        parts += [f"### {_label(ctx, source)}\n", table, _figure(ctx, source, rows)]
        parts += _crossovers(ctx, source, rows)
        parts.append("\n" + _bottleneck(ctx, source, rows))
        parts.append(_generation(ctx, source))
        bad = ctx.decode[(ctx.decode["source"].isin([source, _sibling(source)])) & (ctx.decode["status"] != "ok")]
        if len(bad):
            parts.append(f"\nNot measured: {len(bad)} points ({', '.join(sorted(set(bad['status'])))}).\n")
    return "\n".join(parts)


def _generation(ctx: ReportContext, source: str) -> str:
    mine = ctx.decode[ctx.decode["source"] == source]
    if ctx.generate is None or mine.empty:
        return ""
    device, dtype = str(mine["device"].iloc[0]).split(":")[0], mine["dtype"].iloc[0]
    table = ctx.generate
    table = table[
        table["run_id"].isin(set(mine["run_id"]))
        & table["device"].astype(str).str.startswith(device)
        & (table["dtype"] == dtype)
    ]
    if table.empty:
        return ""
    lines = [
        "\nGenerating as a user sees it: T tokens after a prompt of P, the prefill then a Python loop of steps into a "
        "static cache made for P + T (`python -m bench.benchmarks.decode --generate --into RUN`; eager, each step's "
        "launches included), timed as a point is: on the threads `run` would choose, rounds interleaved across the "
        "layers, the median on the clock `run`'s rule picks; ? marks a median whose rounds disagree (its flag "
        "below):\n",
        "| layer | prompt P | tokens T | batch | tokens/s, one sequence | tokens/s, the batch | clock, threads |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    flags = []
    for r in table.itertuples():
        key = f"{source}.{r.layer}.tokens_per_s.p{r.prompt}.t{r.tokens}"
        one = ctx.cite(key, float(f"{r.tokens_per_s:.4g}"), "tokens/s", r.run_id)
        whole = ctx.cite(f"{key}.batch", float(f"{r.batch_tokens_per_s:.4g}"), "tokens/s", r.run_id)
        unsure = getattr(r, "reliable", True) is False  # a table from before the thread policy has no flags
        if unsure:
            flags.append(f"- {r.layer}: {r.flag}")
        clock = f"{r.clock}, {int(r.threads)}" if hasattr(r, "clock") else "wall, as the process ran"
        lines.append(
            f"| {r.layer} | {r.prompt} | {r.tokens} | {r.batch} | {'? ' if unsure else ''}{one} | {whole} | {clock} |"
        )
    return "\n".join([*lines, "", *flags]) + "\n"


def _flops_crossing(ctx: ReportContext, source: str, attention: pd.DataFrame) -> str:
    other, batch, cfg = models.ROLES.recurrent, int(attention["batch"].iloc[0]), _config(attention)
    at = fits.closed_form_crossover_n(models.ROLES.attention, other, batch, cfg, DECODE_MODE)
    if at is None:
        return ""
    key = f"{source}.crossover_t.{models.ROLES.attention}_vs_{other}.flops"
    cited = ctx.cite(key, at, "positions", attention["run_id"].iloc[-1], show_unit=False)
    return f"; by FLOPs the cached step costs more than the {other}'s from t* = {cited} (d = {cfg.d})"


def _time_phrase(ctx: ReportContext, source: str, layer: str) -> str:
    why = why_no_exponent(ctx.decode_texts, source, layer, "time")
    return f"no verdict ({why})" if why else verdict_cell(ctx.decode_texts, source, layer, "time")


def _every_row_line(ctx: ReportContext, source: str, rows) -> str:
    phrases = [
        f"{_time_phrase(ctx, src, layer)} for {name} (predicted {_predicted(name, layer)[0]})"
        for name, layer, src, _ in rows
    ]
    cached = any(not _uncached(name) for name, *_ in rows)
    how = "" if cached else "; each token made without a cache, by the causal forward over its prefix"
    return f"{_lead(ctx, source)}{'; '.join(phrases)}{how} (section {TITLE})."


def _lead(ctx: ReportContext, source: str) -> str:
    return (
        f"**Generating on {_label(ctx, source)}**, the time of one token's step against its position t grows as t^e: "
    )


def decode_headline(ctx: ReportContext) -> str:
    lines = []
    for source in decode_sources(ctx):
        every = _rows(ctx, source)
        rows = {name: sweep for name, _, _, sweep in every}
        attention_name, recurrent_name = models.ROLES.attention, models.ROLES.recurrent
        attention, recurrent = rows.get(attention_name), rows.get(recurrent_name)
        if attention is None or recurrent is None:
            lines += [_every_row_line(ctx, source, every)] if every else []
            continue
        a_time, r_time = (_time_phrase(ctx, source, layer) for layer in (attention_name, recurrent_name))
        lines.append(
            f"{_lead(ctx, source)}{a_time} for {models.ROLES.attention} with a key/value cache (predicted "
            f"{models.LAYERS[models.ROLES.attention].decode.compute_text}), {r_time} for the "
            f"{models.ROLES.recurrent} ({models.LAYERS[models.ROLES.recurrent].decode.compute_text}); the state "
            f"they keep: {_state_at(ctx, source, models.ROLES.attention, attention)} against "
            f"{_state_at(ctx, source, models.ROLES.recurrent, recurrent)}{_flops_crossing(ctx, source, attention)} "
            f"(section {TITLE})."
        )
    if lines and not len(ctx.points):
        lines.append("No inference points are stored, so there are no Table 1 verdicts (`run --mode inference`).")
    return "\n\n".join(lines) + ("\n" if lines else "")
