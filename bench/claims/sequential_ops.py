"""Sequential operations: what one forward pass of a layer must compute one step after another."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import models
from bench import paths
from models import LayerConfig

from .complexity import measured_first
from .record import D2L_CNN_RNN_SA, TABLE1, claim, generator_for, numbers_of, rounded
from .verdict import Outcome, all_met, at_least, equals, is_true

SEQ_PARALLEL_NS = (16, 64, 256, 1024, 4096)
SEQ_RNN_NS = (8, 16, 32, 64)
RECEPTIVE_D = 4  # channels of the receptive-field probes (the structure does not depend on d)
LOCALITY_K, LOCALITY_N, LOCALITY_POSITION = 3, 32, 16  # the conv whose output window is probed


def receptive_field(fn, n: int, d: int, position: int, gen: torch.Generator) -> list[int]:
    """The inputs output `position` of fn depends on: a nonzero gradient, in float64 (a structural zero exact)."""
    x = torch.randn(1, n, d, generator=gen, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(fn(x)[0, position].sum(), x)
    return torch.nonzero((grad[0] != 0).any(dim=-1)).flatten().tolist()


def float64_layer(name: str, cfg: LayerConfig, seed: int = 0) -> nn.Module:
    return models.build(name, cfg, seed=seed).double()


@claim(
    "Self-attention and convolution compute all n positions at once: O(1) sequential operations; each "
    "convolution output depends only on its local window.",
    f"{TABLE1}; {D2L_CNN_RNN_SA}",
    notes=("seq_ops_attention", "seq_ops_conv"),
)
def seq_ops_parallel(seed: int) -> Outcome:
    gen = generator_for(seed, 126)
    names = (models.ROLES.attention, models.ROLES.attention_explicit, models.ROLES.convolution)
    depths = {name: [paths.layer_seq_depth(name, n)[0] for n in SEQ_PARALLEL_NS] for name in names}
    k, n, j = LOCALITY_K, LOCALITY_N, LOCALITY_POSITION
    conv = float64_layer(models.ROLES.convolution, LayerConfig(d=RECEPTIVE_D, k=k), seed)
    window = receptive_field(conv, n, RECEPTIVE_D, j, gen)
    worst = max(max(v) for v in depths.values())
    over = f"n = {SEQ_PARALLEL_NS[0]}..{SEQ_PARALLEL_NS[-1]}"
    return Outcome(
        measured=worst,
        measured_is=f"largest operator depth of one forward pass of {', '.join(names)} over {over}",
        rule=all_met(
            *(
                equals(f"distinct operator depths of {name} over {over}" if i == 0 else f"of {name}", len(set(v)), 1)
                for i, (name, v) in enumerate(depths.items())
            ),
            equals(
                f"inputs conv output {j} sees (k = {k})", window, list(range(j - (k - 1) // 2, j + (k - 1) // 2 + 1))
            ),
        ),
        details={
            "n": list(SEQ_PARALLEL_NS),
            "seq_depth": depths,
            "conv_window": window,
            "numbers": numbers_of(
                conv_depth=(depths[models.ROLES.convolution][0], "1", "operator depth of the convolution"),
                conv_window=(len(window), "1", f"inputs conv output {j} depends on (k = {k})"),
            ),
        },
    )


@claim(
    "A recurrent layer needs at least n sequential steps: h_t cannot be computed before h_{t−1} (O(n) "
    "sequential operations).",
    f"{TABLE1}; {D2L_CNN_RNN_SA}",
)
def seq_ops_rnn(seed: int) -> Outcome:
    per_step, steps, depths, fused = {}, {}, {}, {}
    for name in models.recurrent():
        depths[name] = [paths.layer_seq_depth(name, n)[0] for n in SEQ_RNN_NS]
        steps[name] = np.diff(depths[name]) / np.diff(SEQ_RNN_NS)
        per_step[name] = rounded(steps[name][0])
        fused[name] = [paths.layer_seq_depth(name, n, reference=False)[0] for n in (SEQ_RNN_NS[0], SEQ_RNN_NS[-1])]
    rec = models.ROLES.recurrent
    return Outcome(
        measured=per_step[rec],
        rule=all_met(  # depth = a·n + c exactly, a ≥ 1; the measured layer's checks first
            *(
                check
                for name in measured_first(steps, rec)
                for check in (
                    at_least(
                        f"operators added to {name}'s longest dependent chain per step"
                        if name == rec
                        else f"to {name}'s",
                        steps[name][0],
                        1,
                    ),
                    is_true(
                        f"the same at every n in {list(SEQ_RNN_NS)}" if name == rec else "the same at every n",
                        bool(np.all(steps[name] == steps[name][0])),
                    ),
                )
            )
        ),
        note="so depth = a·n + c exactly (O(n)); a fused kernel (the CPU's oneDNN LSTM) hides the loop in one "
        "operator, not the dependence",
        details={
            "n": list(SEQ_RNN_NS),
            "seq_depth_reference": depths,
            "depth_per_step": per_step,
            "seq_depth_forward_first_last_n": fused,
            "numbers": numbers_of(
                depth_largest_n=(depths[rec][-1], "1", f"operator depth of {rec} at n = {SEQ_RNN_NS[-1]}"),
            ),
        },
    )
