"""Multi-head attention: its cost and widths, its parameters, the projection split into heads, self-focus."""

from __future__ import annotations

import torch

import models
from models import LayerConfig

from .measure import TIME_THREADS, counted_flops, interleaved_times_s, parameter_count
from .record import PAPER, claim, generator_for, numbers_of, rounded
from .verdict import Outcome, all_met, at_least, at_most, equals, some_met

MULTIHEAD_HEADS = (1, 2, 4, 8, 16)
MULTIHEAD_SIZE = {"batch": 1, "n": 256, "d": 256}  # the timed size (the figure's)
MULTIHEAD_COUNT_SIZES = ((64, 64), (128, 128), (256, 256), (256, 512))  # (n, d) whose FLOPs and parameters are counted
MULTIHEAD_COUNT_RATIO = 1.0  # largest / smallest counted FLOPs (and parameters) over h: exactly 1 for "the same"
# Times are reported, not judged: their ratios over h vary from run to run far more than any threshold.
TIME_SIMILAR_RATIO = 1.25  # (informative) slowest / fastest time over h that would read "about the same"


@claim(
    "Multi-head attention with d_k = d_v = d/h costs about the same as single-head attention of full width d.",
    f"{PAPER}, §3.2.2",
)
def multihead_cost(seed: int) -> Outcome:
    """Exact counts decide; the h·n² softmax elements the count leaves out and the times are reported."""
    explicit, fused = models.ROLES.attention_explicit, models.ROLES.attention
    gen = generator_for(seed, 3)
    b = MULTIHEAD_SIZE["batch"]
    counts = {}  # (n, d) -> {"flops": [...], f"flops_{fused}": [...], "params": [...]}
    for n, d in MULTIHEAD_COUNT_SIZES:
        x = torch.randn(b, n, d, generator=gen)
        row = {"flops": [], f"flops_{fused}": [], "params": []}
        for h in MULTIHEAD_HEADS:
            layer = models.build(explicit, LayerConfig(d=d, heads=h), seed=seed)
            layer_fused = models.build(fused, LayerConfig(d=d, heads=h), seed=seed)
            row["flops"].append(counted_flops(lambda: layer(x)))
            row[f"flops_{fused}"].append(counted_flops(lambda: layer_fused(x)))
            row["params"].append(parameter_count(layer))
            row["params"].append(parameter_count(layer_fused))
        counts[n, d] = row
    flop_ratio = max(
        max(r["flops"] + r[f"flops_{fused}"]) / min(r["flops"] + r[f"flops_{fused}"]) for r in counts.values()
    )
    param_ratio = max(max(r["params"]) / min(r["params"]) for r in counts.values())
    over = f"over h in {list(MULTIHEAD_HEADS)}, both layers, (n, d) in {[list(s) for s in MULTIHEAD_COUNT_SIZES]}"
    same = all_met(
        at_most(f"largest / smallest counted FLOPs {over}", flop_ratio, MULTIHEAD_COUNT_RATIO),
        at_most("largest / smallest parameter count, likewise", param_ratio, MULTIHEAD_COUNT_RATIO),
    )

    n, d = MULTIHEAD_SIZE["n"], MULTIHEAD_SIZE["d"]
    x = torch.randn(b, n, d, generator=gen)
    layers = {
        (name, h): models.build(name, LayerConfig(d=d, heads=h), seed=seed)
        for h in MULTIHEAD_HEADS
        for name in (explicit, fused)
    }
    times = interleaved_times_s({key: (lambda layer=layer: layer(x)) for key, layer in layers.items()})
    times_math = [rounded(times[explicit, h]) for h in MULTIHEAD_HEADS]
    times_fused = [rounded(times[fused, h]) for h in MULTIHEAD_HEADS]
    ratio = max(times_math) / min(times_math)
    ratio_fused = max(times_fused) / min(times_fused)
    timed = counts.get((n, d)) or next(iter(counts.values()))
    softmax_elements = [b * h * n * n for h in MULTIHEAD_HEADS]
    return Outcome(
        measured=rounded(max(flop_ratio, param_ratio), 6),
        measured_is="the larger of the two ratios below",
        rule=same,
        note="times and the h·n² softmax work reported, not judged",
        details={
            "heads": list(MULTIHEAD_HEADS),
            **MULTIHEAD_SIZE,
            "flops_counted": timed["flops"],
            f"flops_counted_{fused}": timed[f"flops_{fused}"],
            "count_sizes": [list(s) for s in MULTIHEAD_COUNT_SIZES],
            "flops_counted_by_size": [counts[s]["flops"] for s in MULTIHEAD_COUNT_SIZES],
            "params_by_size": [counts[s]["params"][::2] for s in MULTIHEAD_COUNT_SIZES],
            "softmax_elements": softmax_elements,
            f"time_median_s_{explicit}": times_math,
            f"time_median_s_{fused}": times_fused,
            "time_threads": TIME_THREADS,
            "numbers": numbers_of(
                flops_counted=(timed["flops"][0], "FLOP", f"counted FLOPs at n = {n}, d = {d}, every h"),
                flops_ratio=(flop_ratio, "1", "largest / smallest counted FLOPs over h, every size"),
                params=(timed["params"][0], "1", f"parameters at d = {d}, every h (4·d² + 4·d)"),
                softmax_elements_ratio=(
                    softmax_elements[-1] // softmax_elements[0],
                    "1",
                    f"softmax elements h·n² at h = {MULTIHEAD_HEADS[-1]} over h = {MULTIHEAD_HEADS[0]} (not counted)",
                ),
                time_ratio_explicit=(ratio, "1", f"slowest / fastest median time over h, {explicit} (not judged)"),
                time_ratio_attention=(ratio_fused, "1", f"slowest / fastest median time over h, {fused} (not judged)"),
            ),
        },
    )


BASE_D, BASE_HEADS = 512, 8  # the paper's base model: d_model = 512, h = 8
BASE_SHAPE = (2, 10)  # (batch, sequence length) of the probe
DIMS_LABELS = {
    "per_head": "one head's Q, K, V (batch, n, d_k = d_v)",
    "heads": "heads",
    "concat": "concatenated heads (W_O's input)",
    "w_o": "W_O",
    "out": "output",
}


@claim(
    "In the base model (d_model = 512, h = 8) each head's Q, K, V are (batch, n, 64), d_k = d_v = 512/8; "
    "the 8 head outputs concatenate to 8·64 = 512 and W_O (512 × 512) projects them back to d_model.",
    f"{PAPER}, §3.2.2",
    notes=("head_dim", "multihead_concat_dim"),
)
def multihead_dims(seed: int) -> Outcome:
    """Shapes read off the real layer, the concatenated heads by a hook on W_O."""
    b, n = BASE_SHAPE
    layer = models.build(models.ROLES.attention_explicit, LayerConfig(d=BASE_D, heads=BASE_HEADS), seed=seed)
    x = torch.randn(b, n, BASE_D, generator=generator_for(seed, 31))
    seen = {}

    def record_concat(_module, args, _out) -> None:
        seen["concat"] = tuple(args[0].shape)

    hook = layer.out_proj.register_forward_hook(record_concat)
    with torch.inference_mode():
        heads = tuple(layer._split(layer.q_proj(x)).shape)
        out = tuple(layer(x).shape)
    hook.remove()
    w_o = tuple(layer.out_proj.weight.shape)
    per_head = (heads[0], heads[2], heads[3])
    expect = {
        "per_head": (b, n, BASE_D // BASE_HEADS),
        "heads": BASE_HEADS,
        "concat": (b, n, BASE_HEADS * (BASE_D // BASE_HEADS)),
        "w_o": (BASE_D, BASE_D),
        "out": (b, n, BASE_D),
    }
    got = {"per_head": per_head, "heads": heads[1], "concat": seen["concat"], "w_o": w_o, "out": out}
    checks = {k: equals(DIMS_LABELS[k], got[k], expect[k]) for k in expect}
    return Outcome(
        measured=per_head[-1],
        rule=all_met(*checks.values()),
        details={
            "d": BASE_D,
            "heads": BASE_HEADS,
            "shapes": {k: list(v) if isinstance(v, tuple) else v for k, v in got.items()},
            "wrong": [k for k, check in checks.items() if not check.met],
            "numbers": numbers_of(
                concat_width=(seen["concat"][-1], "1", "width of the concatenated heads (W_O's input)"),
                w_o_rows=(w_o[0], "1", "W_O rows (d_model)"),
            ),
        },
        unit="features",
    )


PARAMS_HEADS = (1, 2, 4, 8, 16)


@claim(
    "Single-head and multi-head attention of the same total width have a similar number of parameters.",
    f"{PAPER}, §3.2.2",
)
def multihead_params(seed: int) -> Outcome:
    """Not merely similar: W_Q, W_K, W_V, W_O are d×d whatever h is."""
    counts = {
        name: [parameter_count(models.build(name, LayerConfig(d=BASE_D, heads=h), seed=seed)) for h in PARAMS_HEADS]
        for name in (models.ROLES.attention, models.ROLES.attention_explicit)
    }
    every = [c for row in counts.values() for c in row]
    formula = 4 * BASE_D**2 + 4 * BASE_D
    spread = max(every) - min(every)
    return Outcome(
        measured=spread,
        rule=all_met(
            equals(f"largest − smallest parameter count over h in {list(PARAMS_HEADS)} at d = {BASE_D}", spread, 0),
            equals(f"the count at h = {PARAMS_HEADS[0]}, 4·d² + 4·d", every[0], formula),
        ),
        details={
            "d": BASE_D,
            "heads": list(PARAMS_HEADS),
            "params": counts,
            "numbers": numbers_of(params=(every[0], "1", f"parameters at d = {BASE_D}, h = {PARAMS_HEADS[0]}")),
        },
        unit="parameters",
    )


FUSED_SPLIT_ATOL = 1e-5  # float32: one 512-wide matmul against eight 64-wide ones, O(1) outputs


@claim(
    "Projecting with one d_model × h·d_k matrix and reshaping into h heads equals h separate d_model × d_k "
    "projections.",
    f"{PAPER}, §3.2.2",
)
def multihead_fused_projection(seed: int) -> Outcome:
    """The layer's own projection and split against each head computed alone from its rows of the weight."""
    b, n = BASE_SHAPE
    d_head = BASE_D // BASE_HEADS
    layer = models.build(models.ROLES.attention_explicit, LayerConfig(d=BASE_D, heads=BASE_HEADS), seed=seed)
    x = torch.randn(b, n, BASE_D, generator=generator_for(seed, 32))
    errors = {}
    with torch.inference_mode():
        for name, proj in (("q", layer.q_proj), ("k", layer.k_proj), ("v", layer.v_proj)):
            split = layer._split(proj(x))
            separate = torch.stack(
                [
                    x @ proj.weight[i * d_head : (i + 1) * d_head].T + proj.bias[i * d_head : (i + 1) * d_head]
                    for i in range(BASE_HEADS)
                ],
                dim=1,
            )
            errors[name] = rounded(float((split - separate).abs().max()))
    worst = max(errors.values())
    split = f"one {BASE_D}×{BASE_D} projection split into {BASE_HEADS} heads − {BASE_HEADS} separate {BASE_D}×{d_head}"
    return Outcome(
        measured=worst,
        rule=all_met(at_most(f"max |{split} projections| over Q, K, V", worst, FUSED_SPLIT_ATOL)),
        note="float32 rounding",
        details={"d": BASE_D, "heads": BASE_HEADS, "batch": b, "n": n, "error": errors, "numbers": {}},
    )


SELF_FOCUS_SIZE = {"batch": 8, "n": 64, "d": 512}
SELF_FOCUS_HEADS = (1, 8)
SELF_FOCUS_MIN = 2.0  # × the uniform 1/n: "too much"
HEADS_FIX_RATIO = 0.5


def self_weight(q: torch.Tensor, k: torch.Tensor) -> float:
    """The mean weight softmax(QKᵀ/√d_head) puts on the diagonal, q and k split into heads (B, h, n, d_head)."""
    weights = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
    return float(weights.diagonal(dim1=-2, dim2=-1).mean())


@claim(
    "When encoding a position, self-attention puts too much weight on that position itself, and multiple heads "
    "were introduced to fix this.",
    "study notes; cf. " + f"{PAPER}, §3.2.2",
)
def self_focus(seed: int) -> Outcome:
    """At initialisation, over 1/n: the paper's layer (own W_Q, W_K) and Q = K = X, one head and eight."""
    s = SELF_FOCUS_SIZE
    x = torch.randn(s["batch"], s["n"], s["d"], generator=generator_for(seed, 33))
    uniform = 1 / s["n"]
    layer_w, same_w = {}, {}
    for h in SELF_FOCUS_HEADS:
        layer = models.build(models.ROLES.attention_explicit, LayerConfig(d=s["d"], heads=h), seed=seed)
        with torch.inference_mode():
            layer_w[h] = self_weight(layer._split(layer.q_proj(x)), layer._split(layer.k_proj(x))) / uniform
        same_w[h] = self_weight(layer._split(x), layer._split(x)) / uniform
    one, many = SELF_FOCUS_HEADS
    return Outcome(
        measured=rounded(layer_w[one], 4),
        measured_is=f"a position's weight on itself / (1/n), the paper's layer at initialisation, h = {one}",
        rule=some_met(
            at_least(f"the paper's layer, h = {one}: weight on itself / (1/n)", layer_w[one], SELF_FOCUS_MIN),
            at_most(
                f"Q = K = X, where it does attend to itself: weight on itself, h = {many} / h = {one}",
                same_w[many] / same_w[one],
                HEADS_FIX_RATIO,
            ),
        ),
        note=f"n = {s['n']}, d = {s['d']}; what a trained layer learns needs training",
        details={
            **s,
            "heads": list(SELF_FOCUS_HEADS),
            "layer_over_uniform": [rounded(layer_w[h], 4) for h in SELF_FOCUS_HEADS],
            "same_over_uniform": [rounded(same_w[h], 4) for h in SELF_FOCUS_HEADS],
            "numbers": numbers_of(
                layer_many=(layer_w[many], "1", f"the paper's layer, h = {many}: weight on itself / (1/n)"),
                same_one=(same_w[one] * uniform, "1", f"Q = K = X, h = {one}: mean weight on itself"),
                same_many=(same_w[many] * uniform, "1", f"Q = K = X, h = {many}: mean weight on itself"),
            ),
        },
    )
