"""Training: "the backward pass costs about twice the forward", one claim per layer; counted FLOPs decide."""

from __future__ import annotations

import torch

import models
from bench.point import one_call
from bench.spec import TRAIN_MODE, PointSpec, expand_grid

from .measure import counted_flops, interleaved_times_s
from .record import claim, generator_for, numbers_of, rounded
from .verdict import Outcome, all_met, within

KAPLAN = "Kaplan et al. 2020, Scaling Laws for Neural Language Models, §2.1 (backward ≈ 2 × forward)"
ABOUT_REL_TOL = 0.1  # "about twice": the counted ratio within this fraction of models.BACKWARD_PER_FORWARD
# n = 8·d, where attention's n²·d terms carry most of its FLOPs, so the fused kernel's recomputation shows.
SIZE = {"batch": 2, "n": 256, "d": 32, "heads": 4, "k": 3, "window": 32}


def train_point(name: str):
    """The layer's training point at SIZE, as a sweep would make it."""
    return expand_grid(
        [name],
        [SIZE["n"]],
        [SIZE["d"]],
        k=[SIZE["k"]],
        heads=[SIZE["heads"]],
        window=[SIZE["window"]],
        batch=[SIZE["batch"]],
        modes=(TRAIN_MODE,),
    )[0]


def backward_over_forward(spec: PointSpec, seed: int, offset: int) -> dict:
    """Counted FLOPs and median times of the forward and of the backward (the train call less the forward)."""
    layer = models.build(spec.layer, spec.config(), seed=seed)
    x = torch.randn(spec.batch, spec.n, spec.d, generator=generator_for(seed, offset))
    train_call, forward = one_call(spec, layer, x, seed)
    flops_forward = counted_flops(forward, autograd=True)
    flops_train = counted_flops(train_call, autograd=True)
    times = interleaved_times_s({"forward": forward, "train": train_call}, autograd=True)
    return {
        "flops_forward": flops_forward,
        "flops_backward": flops_train - flops_forward,
        "time_forward_s": rounded(times["forward"]),
        "time_backward_s": rounded(times["train"] - times["forward"]),
    }


def _declare(name: str, offset: int) -> None:
    @claim(
        f"The backward pass of {name} costs about twice its forward pass (training ≈ 3 × inference).",
        KAPLAN,
        notes=None,
        claim_id=f"backward_twice_forward_{name}",
    )
    def backward_twice_forward(seed: int) -> Outcome:
        spec = train_point(name)
        m = backward_over_forward(spec, seed, offset)
        flops_ratio = m["flops_backward"] / m["flops_forward"]
        time_ratio = m["time_backward_s"] / m["time_forward_s"]
        point = ", ".join(f"{k} = {v}" for k, v in spec.as_row().items() if k in SIZE and v is not None)
        return Outcome(
            measured=rounded(flops_ratio),
            rule=all_met(
                within(
                    f"backward / forward counted FLOPs ({point})",
                    flops_ratio,
                    models.BACKWARD_PER_FORWARD,
                    rel_tol=ABOUT_REL_TOL,
                )
            ),
            note="the median time's ratio reported, not judged",
            details={
                **m,
                "numbers": numbers_of(
                    flops_backward=(m["flops_backward"], "FLOP", "counted FLOPs of the backward pass"),
                    flops_forward=(m["flops_forward"], "FLOP", "counted FLOPs of the forward pass"),
                    time_ratio=(time_ratio, "1", "backward / forward median time (not judged)"),
                ),
            },
        )


for _offset, _name in enumerate(models.LAYERS, start=201):
    _declare(_name, _offset)
