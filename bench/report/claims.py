"""The claims section: each textbook claim of the newest claims run, what was measured, its verdict, and its
figure drawn from the series claims.csv keeps in its `details` column (JSON; a row without it gets no figure)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import matplotlib.pyplot as plt

import models

from ..errors import RunFailed
from . import style
from .context import ReportContext
from .load import newest_run

VERDICT_MARK = {"holds": "holds", "fails": "**fails**", "partly": "*partly*"}


def claims_section(ctx: ReportContext) -> str:
    lines = ["## Textbook claims", ""]
    if ctx.claims is None or ctx.claims.empty:
        lines.append("No claims are stored: run `python -m bench claims` to measure them.")
        return "\n".join(lines) + "\n"
    run_id = _latest_run(ctx)
    rows = ctx.claims[ctx.claims["run_id"] == run_id]
    counts = rows["verdict"].value_counts()
    lines.append(
        f"Run `{run_id}` on {ctx.machine_of(run_id)} checked {len(rows)} claims: "
        + ", ".join(f"{counts.get(v, 0)} {v}" for v in ("holds", "partly", "fails"))
        + ". "
        "Each claim's verdict follows a rule fixed in `bench/claims/` (one module per family) before the run "
        "(`expected` states it); a failing claim is reported as failing."
    )
    lines += ["", "| claim | verdict | measured | expected |", "| --- | --- | --- | --- |"]
    for _, row in rows.iterrows():
        lines.append(
            f"| `{row['claim_id']}` | {row['verdict']} | {_cite_measured(ctx, row, run_id)} | "
            f"{_cell(row['expected'])} |"
        )
    lines.append("")
    lines += _by_note(ctx, rows, run_id)
    for _, row in rows.iterrows():
        lines += _paragraph(ctx, row, run_id)
    return "\n".join(lines) + "\n"


def _by_note(ctx: ReportContext, rows, run_id: str) -> list[str]:
    """Per study note (catalog.toml): its claims by verdict, what no claim measures yet, what needs a trained model."""
    from ..claims import catalog  # noqa: PLC0415 - the notes' statements: data beside the claims

    statements = catalog()["statement"]
    said = [(row, str(row.get("seed_ref") or "")) for _, row in rows.iterrows()]
    measured_refs = {ref.strip() for _, refs in said for ref in refs.split(";") if ref.strip()}
    lines = [
        "### By study note",
        "",
        "What each note says, measured: the claims whose note lines it holds, by verdict; its checkable "
        "statements that no claim measures yet; and what needs a trained model or data, so cannot be measured "
        "here (from `bench/claims/catalog.toml`, which lists every statement with its line and words).",
        "",
        "| note | holds | partly | fails | not measured yet | not measurable here |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for note in catalog()["meta"]["notes"]:
        name = note["file"]
        mine = [row for row, refs in said if name in refs]
        by_verdict = {
            verdict: ", ".join(f"`{row['claim_id']}`" for row in mine if row["verdict"] == verdict) or "–"
            for verdict in ("holds", "partly", "fails")
        }
        entries = [e for e in statements if any(ref.startswith(name) for ref in e["seed_ref"])]
        open_ = [e["id"] for e in entries if e["checkable"] and not measured_refs & set(e["seed_ref"])]
        never = [e["id"] for e in entries if not e["checkable"]]
        lines.append(
            f"| {name}: {_cell(note['description'].split(':')[0])} | {by_verdict['holds']} | "
            f"{by_verdict['partly']} | {by_verdict['fails']} | {', '.join(open_) or '–'} | "
            f"{', '.join(never) or '–'} |"
        )
    return [*lines, ""]


def _latest_run(ctx: ReportContext) -> str:
    claims = ctx.claims
    if "machine" in claims and (claims["machine"] == ctx.primary).any():
        claims = claims[claims["machine"] == ctx.primary]
    return newest_run(ctx.runs, list(dict.fromkeys(claims["run_id"].astype(str))))


def _prefix(ctx: ReportContext, run_id: str) -> str:
    rows = ctx.claims[ctx.claims["run_id"].astype(str) == run_id]
    return f"{rows['machine'].iloc[0]}.claims" if "machine" in rows and len(rows) else "claims"


def _said(value) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def parse_measured(value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value) if float(value).is_integer() and abs(value) < 1e15 else float(value)
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        return text
    if math.isfinite(number) and number.is_integer() and "e" not in text.lower() and "." not in text:
        return int(number)
    return number


def parse_details(row) -> dict:
    """The JSON behind a claim's figure and numbers, {} where there is none; damaged JSON is an error."""
    raw = row.get("details") if hasattr(row, "get") else None
    if raw is None or (isinstance(raw, float) and math.isnan(raw)) or str(raw).strip() == "":
        return {}
    try:
        details = json.loads(raw)
    except (TypeError, json.JSONDecodeError) as exc:
        raise RunFailed(f"claims.csv: claim {row.get('claim_id')!r}: `details` is not valid JSON ({exc})") from None
    if not isinstance(details, dict):
        raise RunFailed(f"claims.csv: claim {row.get('claim_id')!r}: `details` is not a JSON object")
    return details


def _unit(row) -> str:
    unit = row.get("unit")
    return "1" if unit is None or (isinstance(unit, float) and math.isnan(unit)) else str(unit)


def _cite_measured(ctx: ReportContext, row, run_id: str) -> str:
    return ctx.cite(
        f"{_prefix(ctx, run_id)}.{row['claim_id']}.measured",
        parse_measured(row["measured"]),
        _unit(row),
        run_id,
        note=str(row["expected"]),
    )


def _paragraph(ctx: ReportContext, row, run_id: str) -> list[str]:
    claim_id = row["claim_id"]
    details = parse_details(row)
    text = (
        f"**`{claim_id}`** — {VERDICT_MARK.get(row['verdict'], row['verdict'])}. {row['statement']} "
        f"Measured {_cite_measured(ctx, row, run_id)}; expected: {row['expected']}."
    )
    if _said(row.get("seed_ref")):
        text += f" The notes ({_cell(row['seed_ref'])}): “{_cell(row.get('quote', ''))}”"
    elif "seed_ref" in row:
        text += " (Not said in the study notes.)"
    extras = []
    for name, number in details.get("numbers", {}).items():
        value = number.get("value")
        shown = ctx.cite(
            f"{_prefix(ctx, run_id)}.{claim_id}.{name}",
            value,
            number.get("unit", "1"),
            run_id,
            note=number.get("label", ""),
        )
        extras.append(f"{number.get('label', name)}: {shown}")
    if extras:
        text += " Also measured: " + "; ".join(extras) + "."
    text += f" Source: {row['source']}."
    out = [text, ""]
    draw = FIGURES.get(claim_id)
    if draw is not None and details:
        try:
            fig, caption = draw(details)
        except (KeyError, TypeError, ValueError) as exc:  # a details blob from another version: said, not hidden
            out += [f"_Figure omitted: the stored details lack what it draws ({type(exc).__name__}: {exc})._", ""]
        else:
            out += [ctx.figure(fig, f"claims_{claim_id}", f"{caption} (run {run_id})"), ""]
    return out


def _ticks(ax, values) -> None:
    style.measured_ticks(ax, values, "x")


def _fig_dot_product_variance(d: dict):
    fig, ax = plt.subplots(figsize=(5, 3.5))
    d_k = d["d_k"]
    ax.loglog(d_k, d["var_unscaled"], "o", label="var(q·k), measured")
    ax.loglog(d_k, d_k, "--", color="grey", label="d_k")
    ax.loglog(d_k, d["var_scaled"], "s", label="var(q·k/√d_k), measured")
    ax.axhline(1, ls=":", color="grey")
    ax.set(xlabel="d_k", ylabel="variance", title="Dot-product variance")
    _ticks(ax, d_k)
    ax.legend(fontsize=8)
    return fig, f"Variance of q·k over {d['samples']:,} random pairs per d_k, with and without 1/√d_k"


def _finish(fig, axes, ticks) -> None:
    """Ticks at the measured values, a tight layout, and each panel's legend under it, off the data."""
    for ax in axes:
        _ticks(ax, ticks)
        style.grid(ax)
    fig.tight_layout()
    for ax in axes:
        style.legend_outside(ax, where="below")


def _fig_softmax_saturation(d: dict):
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    d_k = d["d_k"]
    for v, marker, color in (("unscaled", "o", "C0"), ("scaled", "s", "C1")):
        a.semilogx(d_k, d[f"max_weight_{v}"], marker + "-", color=color, label=v)
        b.loglog(d_k, d[f"grad_norm_mean_{v}"], marker + "-", color=color, label=f"{v}, mean")
        b.loglog(d_k, d[f"grad_norm_median_{v}"], marker + ":", color=color, mfc="none", label=f"{v}, median")
    a.set(xlabel="d_k", ylabel="largest attention weight (mean)", ylim=(0, 1.05), title="Saturation")
    b.set(xlabel="d_k", ylabel="‖∂softmax/∂logits‖_F", title="Gradient through the softmax")
    _finish(fig, (a, b), d_k)
    return fig, f"Softmax over {d['keys']} keys, {d['trials']} queries per d_k, scaled against unscaled scores"


def _fig_multihead_cost(d: dict):
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    h = d["heads"]
    explicit, fused = models.ROLES.attention_explicit, models.ROLES.attention
    a.plot(h, [f / 1e6 for f in d["flops_counted"]], "o-", label=explicit)
    if f"flops_counted_{fused}" in d:
        a.plot(h, [f / 1e6 for f in d[f"flops_counted_{fused}"]], "s--", mfc="none", label=f"{fused} (SDPA)")
    a.set(
        xscale="log",
        xlabel="heads h",
        ylabel="counted MFLOP",
        title="Counted FLOPs",
        ylim=(0, max(d["flops_counted"]) / 1e6 * 1.2),
    )
    b.plot(h, [t * 1e3 for t in d[f"time_median_s_{explicit}"]], "o-", label=explicit)
    b.plot(h, [t * 1e3 for t in d[f"time_median_s_{fused}"]], "s-", label=f"{fused} (SDPA)")
    b.set(xscale="log", xlabel="heads h", ylabel="median time (ms)", title="Time", ylim=(0, None))
    _finish(fig, (a, b), h)
    return fig, (
        f"Multi-head attention with d/h per head, b = {d['batch']}, n = {d['n']}, d = {d['d']}, "
        f"{d.get('time_threads', '?')} thread(s)"
    )


def _fig_dot_vs_additive(d: dict):
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    n = d["n"]
    a.loglog(n, d["time_median_s_dot"], "o-", label="dot-product")
    a.loglog(n, d["time_median_s_additive"], "s-", label="additive")
    a.set(xlabel="n", ylabel="median time (s)", title="Time")
    b.loglog(n, d["time_ratio"], "o-", label="time")
    b.loglog(n, d["flops_ratio"], "s--", label="counted FLOPs")
    b.axhline(1, ls=":", color="grey")
    b.set(xlabel="n", ylabel="additive / dot-product", title="Ratio")
    _finish(fig, (a, b), n)
    return fig, f"Additive (Bahdanau) against dot-product attention, one head, d = {d['d']}"


def _fig_pe_rotation(d: dict):
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.loglog(d["k"], d["error_float32"], "o-", label="float32 table")
    ax.loglog(d["k"], d["error_float64"], "s-", label="float64 table")
    ax.set(xlabel="offset k", ylabel="max |PE(pos+k) − M_k PE(pos)|", title="Offsets are rotations")
    _ticks(ax, d["k"])
    ax.tick_params(axis="x", labelsize=7)
    ax.legend(fontsize=8)
    return fig, f"Largest error of the rotation M_k over pos < {d['positions']}, d = {d['d']}"


def _fig_pe_distinct(d: dict):
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.loglog(d["scan_positions"], d["scan_float32_error"], ".", ms=3, label="float32 rounding error")
    ax.axhline(d["nearly_equal_threshold"], ls="--", color="grey", label="half the smallest distance")
    ax.axvline(d["positions"], ls=":", color="grey", label=f"{d['positions']:,} positions")
    ax.set(xlabel="position", ylabel="‖PE₃₂(pos) − PE(pos)‖", title="When float32 blurs positions")
    ax.legend(fontsize=8)
    return fig, f"Rounding error of the float32 encoding against position, d = {d['d']}"


def _fig_pe_wavelengths(d: dict):
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.semilogy(d["i"], [w / (2 * math.pi) for w in d["wavelength"]], ".", ms=3, label="estimated from the table")
    ax.axhline(1, ls=":", color="grey")
    ax.axhline(10000, ls=":", color="grey")
    ax.set(xlabel="frequency index i", ylabel="wavelength / 2π", title="Wavelengths")
    ax.legend(fontsize=8)
    return fig, f"Wavelength of each sin/cos pair, estimated from {d['positions']:,} positions, d = {d['d']}"


def _fig_pe_variance(d: dict):
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(d["dim"], d["variance_per_dim"], ".", ms=3, label="measured, per dimension")
    ax.axhline(1 / 3, ls="--", color="C3", label="claimed 1/3")
    ax.axhline(1 / 2, ls=":", color="grey", label="1/2 (mean of sin²)")
    ax.set(xlabel="dimension", ylabel="variance over positions", title="Variance of the encoding")
    ax.legend(fontsize=8)
    return fig, "Variance of each dimension of the sinusoidal encoding over positions"


FIGURES: dict[str, Callable[[dict], tuple]] = {
    "dot_product_variance": _fig_dot_product_variance,
    "softmax_saturation": _fig_softmax_saturation,
    "multihead_cost": _fig_multihead_cost,
    "dot_vs_additive": _fig_dot_vs_additive,
    "pe_rotation": _fig_pe_rotation,
    "pe_distinct": _fig_pe_distinct,
    "pe_wavelengths": _fig_pe_wavelengths,
    "pe_variance_one_third": _fig_pe_variance,
}
