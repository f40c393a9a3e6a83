"""The encoding's frequencies along its dimensions: the largest wavelength, their decrease, the binary analogy."""

from __future__ import annotations

import math

import torch

from models.encoding import PE_BASE, pe_frequencies, sinusoidal_encoding

from .pe_geometry import top_wavelength_check
from .record import D2L_SELF_ATTENTION, D_MODEL, PAPER, claim, numbers_of, rounded
from .verdict import Outcome, above, all_met, at_most, equals, is_true, some_met, within

MAX_WAVELENGTH_DS = (4, 64, 512)


def pe_wavelengths_exact(d: int, base: float = PE_BASE) -> torch.Tensor:
    return 2 * math.pi / pe_frequencies(d, torch.float64, base)


@claim(
    "The largest wavelength occurs at i = d_model/2 − 1 and is about 10000·2π.",
    "study notes (not in the paper); cf. " + f"{PAPER}, §3.5",
)
def pe_max_wavelength(seed: int) -> Outcome:
    ratios, places = {}, {}
    for d in MAX_WAVELENGTH_DS:
        lam = pe_wavelengths_exact(d)
        places[d] = int(lam.argmax()) == d // 2 - 1
        ratios[d] = float(lam.max()) / (PE_BASE * 2 * math.pi)
    ratio = ratios[D_MODEL]
    return Outcome(
        measured=rounded(ratio, 5),
        rule=some_met(
            top_wavelength_check(ratio * PE_BASE * 2 * math.pi, D_MODEL),
            is_true("it sits at i = d/2 − 1", places[D_MODEL]),
        ),
        note=f"exactly 10000^(−2/d) = {PE_BASE ** (-2 / D_MODEL):.5f}",
        details={
            "d": list(MAX_WAVELENGTH_DS),
            "max_over_10000_2pi": [rounded(ratios[d], 5) for d in MAX_WAVELENGTH_DS],
            "at_last_pair": [places[d] for d in MAX_WAVELENGTH_DS],
            "numbers": numbers_of(
                at_last_pair=("yes" if places[D_MODEL] else "no", "1", f"largest at i = d/2 − 1 (d = {D_MODEL})"),
                d64=(ratios[64], "1", "largest wavelength / (10000·2π) at d = 64"),
                d4_over_2pi=(ratios[4] * PE_BASE, "1", "largest wavelength / 2π at d = 4 (the notes' example)"),
            ),
        },
    )


FREQUENCY_POSITIONS = 1000
D4_ATOL = 1e-12  # d = 4 float64 table against (sin pos, cos pos, sin(pos/100), cos(pos/100))


def pair_step_sizes(pe: torch.Tensor) -> torch.Tensor:
    """Mean step per position of each (sin, cos) pair (d/2,), 2 sin(ω_i / 2) for a sinusoid."""
    step = torch.diff(pe.double(), dim=0)
    return (step[:, 0::2] ** 2 + step[:, 1::2] ** 2).sqrt().mean(0)


def column_mean_steps(pe: torch.Tensor) -> torch.Tensor:
    return torch.diff(pe.double(), dim=0).abs().mean(0)


@claim(
    "The frequency of the sinusoids decreases along the encoding dimension: low dimensions change at every "
    "position, high ones very slowly (for d_model = 4: sin pos, cos pos, sin(pos/100), cos(pos/100)).",
    f"{D2L_SELF_ATTENTION} (absolute positional information); {PAPER}, §3.5",
    notes=("pe_frequency_decreasing", "pe_dmodel4_example"),
)
def pe_frequency_decreasing(seed: int) -> Outcome:
    omega = pe_frequencies(D_MODEL)
    table = sinusoidal_encoding(FREQUENCY_POSITIONS + 1, D_MODEL, torch.float64)
    steps = pair_step_sizes(table)
    not_smaller = int((torch.diff(steps) >= 0).sum())
    omega_ok = bool((torch.diff(omega) < 0).all())
    columns = column_mean_steps(table)
    pos = torch.arange(FREQUENCY_POSITIONS + 1, dtype=torch.float64)
    d4 = sinusoidal_encoding(FREQUENCY_POSITIONS + 1, 4, torch.float64)
    written = torch.stack([pos.sin(), pos.cos(), (pos / 100).sin(), (pos / 100).cos()], -1)
    d4_error = float((d4 - written).abs().max())
    d4_steps = column_mean_steps(d4)
    fast, slow = float(d4_steps[:2].mean()), float(d4_steps[2:].mean())
    steps_up = (
        f"pairs whose step per position (pos < {FREQUENCY_POSITIONS}, d = {D_MODEL}) is not smaller than the last"
    )
    return Outcome(
        measured=not_smaller,
        rule=all_met(
            equals(steps_up, not_smaller, 0),
            is_true("ω_i strictly decreasing", omega_ok),
            at_most("d = 4: largest |PE − (sin pos, cos pos, sin(pos/100), cos(pos/100))|", d4_error, D4_ATOL),
            above("d = 4: mean |ΔPE| per position, columns 0–1", fast, slow, "that of columns 2–3"),
        ),
        details={
            "pair": list(range(D_MODEL // 2)),
            "step": [rounded(v, 4) for v in steps],
            "numbers": numbers_of(
                omega_last=(float(omega[-1]), "rad/position", "slowest frequency ω_(d/2 − 1)"),
                first_pair_column_step=(float(columns[:2].mean()), "1", "mean |ΔPE| per position, first pair"),
                last_column_steps=(
                    f"{rounded(columns[-2], 3):g}, {rounded(columns[-1], 3):g}",
                    "1",
                    "mean |ΔPE| per position, last two columns",
                ),
                d4_error=(d4_error, "1", "d = 4: largest |PE − (sin p, cos p, sin p/100, cos p/100)|"),
                d4_fast=(fast, "1", "d = 4: mean |ΔPE| per position, columns 0–1"),
                d4_slow=(slow, "1", "d = 4: mean |ΔPE| per position, columns 2–3"),
            ),
        },
    )


BINARY_BITS = 4
NOTE_PATTERNS = ("01010101", "00001111", "0000000011111111")  # the patterns the notes list, lowest first
BINARY_RATIO = 2.0
RATIO_REL_TOL = 0.01  # "exact" correspondence: PE's period ratio per pair this close to BINARY_RATIO


def bit_strings(bits: int) -> list[str]:
    """Bit b of 0 .. 2^bits − 1 as a string, b = 0 the lowest."""
    return ["".join(str((n >> b) & 1) for n in range(2**bits)) for b in range(bits)]


def bit_periods(bits: int) -> list[int]:
    periods = []
    for s in bit_strings(bits):
        periods.append(next(p for p in range(1, len(s) + 1) if all(s[j] == s[j % p] for j in range(len(s)))))
    return periods


def pattern_bits(patterns: tuple[str, ...], bits: int) -> list[int | None]:
    """Which bit each pattern is, or None."""
    strings = bit_strings(bits)
    return [next((b for b, s in enumerate(strings) if s.startswith(p)), None) for p in patterns]


def flip_intervals(bits: int) -> list[int]:
    """How many numbers apart bit b changes when counting 0 .. 2^(bits+1) − 1, for each b (-1: not one interval)."""
    intervals = []
    for s in bit_strings(bits + 1)[:bits]:
        flips = [j for j in range(1, len(s)) if s[j] != s[j - 1]]
        gaps = {j - i for i, j in zip(flips, flips[1:])}
        intervals.append(gaps.pop() if len(gaps) == 1 else -1)
    return intervals


@claim(
    "Counting in binary, the lowest bit changes at every number, the next every two numbers, the next every "
    "four: higher bits alternate at lower frequency.",
    f"{D2L_SELF_ATTENTION} (absolute positional information)",
)
def pe_binary_periods(seed: int) -> Outcome:
    intervals = flip_intervals(BINARY_BITS)
    return Outcome(
        measured=", ".join(map(str, intervals)),
        rule=all_met(
            equals(
                f"numbers between changes of bits 0 .. {BINARY_BITS - 1}", intervals, [2**b for b in range(BINARY_BITS)]
            ),
            is_true("each higher bit alternates less often", all(a < b for a, b in zip(intervals, intervals[1:]))),
        ),
        details={"bit_strings": bit_strings(BINARY_BITS), "bit_periods": bit_periods(BINARY_BITS)},
    )


@claim(
    "The sinusoidal encoding corresponds exactly to binary counting: each higher pattern alternates as the next "
    "bit does (01010101, 00001111, 0000000011111111).",
    f"{D2L_SELF_ATTENTION} (absolute positional information)",
)
def pe_binary_analogy_exact(seed: int) -> Outcome:
    found = pattern_bits(NOTE_PATTERNS, BINARY_BITS)
    lam = pe_wavelengths_exact(D_MODEL)
    ratios = lam[1:] / lam[:-1]
    ratio = float(ratios.mean())
    return Outcome(
        measured=rounded(ratio, 5),
        rule=all_met(
            within(
                f"mean ratio of consecutive PE periods (d = {D_MODEL}), binary's per bit",
                ratio,
                BINARY_RATIO,
                rel_tol=RATIO_REL_TOL,
            ),
        ),
        note="the qualitative reading, slower and slower alternation, is pe_binary_periods and pe_frequency_decreasing",
        details={
            "note_patterns": list(NOTE_PATTERNS),
            "note_pattern_bits": found,
            "numbers": numbers_of(
                pattern_bits=(
                    ", ".join("none" if b is None else str(b) for b in found),
                    "1",
                    "which bit each listed pattern is (bit 1, 00110011, is not listed)",
                ),
                pairs_per_doubling=(math.log(2) / math.log(ratio), "pairs", "PE pairs per doubling of the period"),
                increasing=("yes" if bool((ratios > 1).all()) else "no", "1", "PE periods increasing along the pairs"),
            ),
        },
    )
