"""The claims section's figures, each drawn from the series a claim keeps in claims.csv's `details` (JSON)."""

from __future__ import annotations

import math
from collections.abc import Callable

import matplotlib.pyplot as plt

import models

from . import style


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


def _fig_slow_long_sequences(d: dict):
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name, times in d["time_median_s"].items():
        ax.loglog(d["n"], [t * 1e3 for t in times], "o-", label=name)
    ax.set(xlabel="n", ylabel="median time (ms)", title="Time against sequence length")
    _finish(fig, (ax,), d["n"])
    return fig, f"One layer each at d = {d['d']}, {d.get('time_threads', '?')} thread(s), CPU clock"


def _fig_residual(d: dict):
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for (name, norms), style_ in zip(d["grad_norm"].items(), ("o-", "o:", "s-", "s:")):
        ax.loglog(d["depths"], [max(v, 1e-30) for v in norms], style_, label=name)
    ax.set(xlabel="blocks", ylabel="‖∂L/∂x‖ (1e-30: zero)", title="Gradient at the input")
    _finish(fig, (ax,), d["depths"])
    return fig, f"FFN blocks (d = {d['d']}, d_ff = {d['d_ff']}) at initialisation, with and without the residual"


FIGURES: dict[str, Callable[[dict], tuple]] = {
    "dot_product_variance": _fig_dot_product_variance,
    "softmax_saturation": _fig_softmax_saturation,
    "multihead_cost": _fig_multihead_cost,
    "dot_vs_additive": _fig_dot_vs_additive,
    "pe_rotation": _fig_pe_rotation,
    "pe_distinct": _fig_pe_distinct,
    "pe_wavelength_growth": _fig_pe_wavelengths,
    "pe_variance_one_third": _fig_pe_variance,
    "attention_slow_long_sequences": _fig_slow_long_sequences,
    "residual_gradient_path": _fig_residual,
}
