"""The position-wise feed-forward network: its size, FLOPs and position-wise action, the residual path around it."""

from __future__ import annotations

import torch
from torch import nn

import models
from models import LayerConfig

from .measure import counted_flops, parameter_count
from .record import PAPER, claim, generator_for, numbers_of, rounded, seeded
from .verdict import Outcome, above, all_met, at_least, at_most, equals, some_met, within

SECTION = f"{PAPER}, §3.3 (Position-wise Feed-Forward Networks)"

FFN_D, FFN_D_FF, FFN_HEADS = 512, 2048, 8  # the base model
FFN_PARAMS_NOTE = 2.1e6  # the note's "≈ 2.1M"
PARAMS_REL_TOL = 0.01  # a count "is about" the note's rounded figure when within 1 % of it
FLOP_POSITIONS = 4
COMPARABLE_MIN = 0.5  # FFN / attention parameters at least this: "comparable, or even more"
SMALL = {"batch": 2, "n": 32, "d": 64, "d_ff": 256}  # the conv, position-wise and linearity checks
SAME_ATOL = 1e-5  # float32 outputs of the same computation, arranged differently, agree within this
NONLINEAR_MIN = 0.01  # relative additivity defect at least this: the map is not linear
LINEAR_MAX = 1e-10  # float64 relative error at most this: the maps are the same linear map
STACK_DEPTH = 6


def ffn(d: int, d_ff: int, dtype: torch.dtype = torch.float32, relu: bool = True) -> nn.Sequential:
    """max(0, xW₁ + b₁)W₂ + b₂ with PyTorch's default init."""
    return nn.Sequential(
        nn.Linear(d, d_ff, dtype=dtype), nn.ReLU() if relu else nn.Identity(), nn.Linear(d_ff, d, dtype=dtype)
    )


def _seeded_ffn(seed: int, d: int, d_ff: int, dtype: torch.dtype = torch.float32, relu: bool = True) -> nn.Sequential:
    with seeded(seed):
        return ffn(d, d_ff, dtype, relu)


def conv1x1_ffn(net: nn.Sequential) -> nn.Sequential:
    """The same FFN as two Conv1d with kernel size 1 on (batch, d, n), with the Linear weights."""
    first, act, second = net
    convs = []
    for linear in (first, second):
        conv = nn.Conv1d(linear.in_features, linear.out_features, 1, dtype=linear.weight.dtype)
        with torch.no_grad():
            conv.weight.copy_(linear.weight[:, :, None])  # (out, in, 1): the kernel at the one tap
            conv.bias.copy_(linear.bias)
        convs.append(conv)
    return nn.Sequential(convs[0], act, convs[1])


def cross_position_jacobian(net: nn.Module, x: torch.Tensor) -> tuple[float, float]:
    """For x (n, d): (max |∂out_i / ∂x_j| over i ≠ j, max over i = j)."""
    jac = torch.func.jacrev(net)(x).detach()
    n = x.shape[0]
    same = torch.eye(n, dtype=torch.bool)[:, None, :, None].expand_as(jac)
    return float(jac[~same].abs().max()), float(jac[same].abs().max())


def additivity_defect(f, x1: torch.Tensor, x2: torch.Tensor) -> float:
    """‖f(x1 + x2) − f(x1) − f(x2) + f(0)‖ / ‖f(x1 + x2)‖: 0 for an affine map."""
    with torch.inference_mode():
        total = f(x1 + x2)
        defect = total - f(x1) - f(x2) + f(torch.zeros_like(x1))
    return float(defect.norm() / total.norm())


def collapse_affine(layers: list[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor]:
    """(W, c) with x ↦ x W + c equal to the stack applied in order (nn.Linear: x ↦ x Aᵀ + b)."""
    first = layers[0]
    w, c = first.weight.T.detach().clone(), first.bias.detach().clone()
    for layer in layers[1:]:
        w, c = w @ layer.weight.T, c @ layer.weight.T + layer.bias
    return w.detach(), c.detach()


@claim(
    "With d_model = 512 and d_ff = 2048 the FFN has weights 512×2048 and 2048×512, about 512·2048·2 ≈ 2.1 M "
    "parameters.",
    SECTION,
)
def ffn_params(seed: int) -> Outcome:
    d, d_ff = FFN_D, FFN_D_FF
    net = _seeded_ffn(seed, d, d_ff)
    params = parameter_count(net)
    x = torch.randn(1, FLOP_POSITIONS, d, generator=generator_for(seed, 111))
    flops_per_position = counted_flops(lambda: net(x)) / FLOP_POSITIONS
    linears = f"parameters of Linear({d}, {d_ff}) + Linear({d_ff}, {d})"
    return Outcome(
        measured=params,
        rule=all_met(
            within(linears, params, FFN_PARAMS_NOTE, rel_tol=PARAMS_REL_TOL, bound_text=f"{FFN_PARAMS_NOTE / 1e6:g} M")
        ),
        note=f"2·d·d_ff = {2 * d * d_ff:,} weights + {d_ff + d:,} biases",
        details={
            "numbers": numbers_of(
                weights=(2 * d * d_ff, "parameters", "weights 2 · d_model · d_ff"),
                biases=(d_ff + d, "parameters", "biases d_ff + d_model"),
                flops_per_position=(int(flops_per_position), "FLOPs", "counted FLOPs per position (4 · d · d_ff)"),
            ),
        },
        unit="parameters",
    )


@claim(
    "The FFN's parameter count is comparable to, or even more than, that of the multi-head attention layer.",
    SECTION,
)
def ffn_vs_mha_params(seed: int) -> Outcome:
    d, d_ff, h = FFN_D, FFN_D_FF, FFN_HEADS
    ffn_params = parameter_count(_seeded_ffn(seed, d, d_ff))
    attention = models.build(models.ROLES.attention, LayerConfig(d=d, heads=h), seed=seed)
    mha_params = parameter_count(attention)
    ratio = ffn_params / mha_params
    return Outcome(
        measured=rounded(ratio, 4),
        rule=all_met(
            at_least(f"FFN / multi-head attention parameters, d = {d}, d_ff = {d_ff}, h = {h}", ratio, COMPARABLE_MIN)
        ),
        note="comparable or more; (2·d·d_ff + d_ff + d) / (4·d² + 4·d) ≈ 2",
        details={
            "numbers": numbers_of(
                ffn=(ffn_params, "parameters", "FFN"),
                attention=(mha_params, "parameters", "multi-head attention (Q, K, V, output projections)"),
            ),
        },
    )


@claim(
    "The FFN can be seen as two convolutions with kernel size 1.",
    SECTION,
)
def ffn_conv1x1(seed: int) -> Outcome:
    b, n, d, d_ff = SMALL["batch"], SMALL["n"], SMALL["d"], SMALL["d_ff"]
    net = _seeded_ffn(seed, d, d_ff)
    x = torch.randn(b, n, d, generator=generator_for(seed, 112))
    conv = conv1x1_ffn(net)
    with torch.inference_mode():
        error = float((conv(x.transpose(1, 2)).transpose(1, 2) - net(x)).abs().max())
    convs = f"max |Conv1d(k=1) → ReLU → Conv1d(k=1) − FFN| with the same weights, b = {b}, n = {n}, d = {d}"
    return Outcome(
        measured=rounded(error, 3),
        rule=all_met(at_most(f"{convs}, d_ff = {d_ff}, float32", error, SAME_ATOL)),
        details={"numbers": numbers_of(conv_params=(parameter_count(conv), "parameters", "the two convolutions"))},
    )


@claim(
    "The FFN is applied at every position with the same parameters, independently: the output at position i "
    "depends only on the input at position i.",
    SECTION,
)
def ffn_position_wise(seed: int) -> Outcome:
    n, d, d_ff = SMALL["n"], SMALL["d"], SMALL["d_ff"]
    net = _seeded_ffn(seed, d, d_ff)
    gen = generator_for(seed, 113)
    x = torch.randn(n, d, generator=gen)
    cross, own = cross_position_jacobian(net, x)
    perm = torch.randperm(n, generator=gen)
    with torch.inference_mode():
        perm_error = float((net(x[perm]) - net(x)[perm]).abs().max())
    return Outcome(
        measured=cross,
        rule=all_met(
            equals(f"max |∂FFN(X)_i / ∂X_j| over i ≠ j, n = {n}, d = {d} (block-diagonal Jacobian)", cross, 0.0),
            above("max |∂FFN(X)_i / ∂X_i| (the blocks)", own, 0.0),
            at_most("max |FFN(PX) − P·FFN(X)|", perm_error, SAME_ATOL),
        ),
        details={
            "numbers": numbers_of(
                own=(own, "1", "max |∂FFN(X)_i / ∂X_i| (the diagonal blocks)"),
                permutation_error=(perm_error, "1", "max |FFN(PX) − P·FFN(X)|"),
            ),
        },
    )


@claim(
    "FFN(x) = max(0, xW₁ + b₁)W₂ + b₂ is a two-layer network whose ReLU makes it nonlinear; without it, any "
    "number of stacked linear layers is equivalent to a single linear transformation.",
    SECTION,
    notes=("ffn_nonlinear", "linear_stack_collapses"),
)
def ffn_nonlinear(seed: int) -> Outcome:
    n, d, d_ff = SMALL["n"], SMALL["d"], SMALL["d_ff"]
    gen = generator_for(seed, 114)
    x1, x2 = (torch.randn(n, d, generator=gen, dtype=torch.float64) for _ in range(2))
    with_relu = additivity_defect(_seeded_ffn(seed, d, d_ff, torch.float64), x1, x2)
    without_relu = additivity_defect(_seeded_ffn(seed, d, d_ff, torch.float64, relu=False), x1, x2)
    with seeded(seed):
        stack = [nn.Linear(d, d, dtype=torch.float64) for _ in range(STACK_DEPTH)]
    w, c = collapse_affine(stack)
    with torch.inference_mode():
        deep = nn.Sequential(*stack)(x1)
        stack_error = float((deep - (x1 @ w + c)).abs().max() / deep.abs().max())
    defect = f"‖FFN(x1+x2) − FFN(x1) − FFN(x2) + FFN(0)‖ / ‖FFN(x1+x2)‖, d = {d}, d_ff = {d_ff}"
    return Outcome(
        measured=rounded(with_relu, 4),
        rule=all_met(
            at_least(f"{defect} (nonlinear)", with_relu, NONLINEAR_MIN),
            at_most("the same without the ReLU, float64", without_relu, LINEAR_MAX),
            at_most(
                f"a {STACK_DEPTH}-layer affine stack against its collapsed x·W + c, relative", stack_error, LINEAR_MAX
            ),
        ),
        details={
            "numbers": numbers_of(
                without_relu=(without_relu, "1", "additivity defect without the ReLU"),
                stack_error=(stack_error, "1", f"{STACK_DEPTH} stacked affine layers vs one, relative max error"),
            ),
        },
    )


RESIDUAL_SIZE = {"n": 16, "d": 64, "d_ff": 256}
RESIDUAL_DEPTHS = (1, 6, 24, 96)
RESIDUAL_DEPTH = 6  # the note's "6 layers (or more)"
VANISHED_RATIO = 0.01


def input_gradient_norm(depth: int, residual: bool, norm: bool, seed: int) -> float:
    """‖∂⟨G, y⟩/∂x‖ through `depth` blocks y = [LayerNorm](x [+] FFN(x)) at initialisation, G random."""
    gen = generator_for(seed, 45)
    x = torch.randn(RESIDUAL_SIZE["n"], RESIDUAL_SIZE["d"], generator=gen, requires_grad=True)
    with seeded(seed), torch.enable_grad():
        h = x
        for _ in range(depth):
            y = ffn(RESIDUAL_SIZE["d"], RESIDUAL_SIZE["d_ff"])(h)
            y = h + y if residual else y
            h = nn.functional.layer_norm(y, y.shape[-1:]) if norm else y
        (h * torch.randn(h.shape, generator=gen)).sum().backward()
    return float(x.grad.norm())


@claim(
    "The residual connection lets information bypass the FFN and so solves the vanishing-gradient problem of "
    "deep networks.",
    f"{PAPER}, §3.1; He et al. 2016",
)
def residual_gradient_path(seed: int) -> Outcome:
    grads = {
        (form, residual, depth): input_gradient_norm(depth, residual, form == "post-LN", seed)
        for form in ("plain", "post-LN")
        for residual in (True, False)
        for depth in RESIDUAL_DEPTHS
    }
    ratio = {
        form: grads[form, False, RESIDUAL_DEPTH] / grads[form, True, RESIDUAL_DEPTH] for form in ("plain", "post-LN")
    }
    without = f"‖∂L/∂x‖ without the residual / with it, {RESIDUAL_DEPTH} blocks"
    return Outcome(
        measured=rounded(ratio["post-LN"], 4),
        measured_is=f"{without}, the note's LayerNorm(x + FFN(x))",
        rule=some_met(
            at_most(f"{without}, plain x + FFN(x)", ratio["plain"], VANISHED_RATIO),
            at_most(f"{without}, LayerNorm(x + FFN(x)) as the note writes it", ratio["post-LN"], VANISHED_RATIO),
        ),
        note="with LayerNorm on the path, the gradient does not vanish without the residual at initialisation "
        "either; stable training of deep stacks needs training",
        details={
            **RESIDUAL_SIZE,
            "depths": list(RESIDUAL_DEPTHS),
            "grad_norm": {
                f"{form}, {'residual' if residual else 'no residual'}": [
                    rounded(grads[form, residual, depth], 4) for depth in RESIDUAL_DEPTHS
                ]
                for form in ("plain", "post-LN")
                for residual in (True, False)
            },
            "numbers": numbers_of(
                plain_ratio=(ratio["plain"], "1", f"{without}, plain blocks"),
                plain_deepest=(
                    grads["plain", False, RESIDUAL_DEPTHS[-1]],
                    "1",
                    f"‖∂L/∂x‖ through {RESIDUAL_DEPTHS[-1]} plain blocks without the residual",
                ),
                post_ln_deepest=(
                    grads["post-LN", False, RESIDUAL_DEPTHS[-1]] / grads["post-LN", True, RESIDUAL_DEPTHS[-1]],
                    "1",
                    f"the post-LN ratio at {RESIDUAL_DEPTHS[-1]} blocks",
                ),
            ),
        },
    )
