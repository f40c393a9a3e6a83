"""The docs state the method's numbers; each must be the code's (a changed constant fails here until
docs/method.md says the same). The README reaches `make bench` on its first screen and links what exists."""

import re
from pathlib import Path

import pytest

import models
from bench import fits, load, timing
from bench.presets import get_preset

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
METHOD_FLAT = " ".join((ROOT / "docs" / "method.md").read_text().split())  # line breaks as spaces
FIRST_SCREEN_LINES = 40
QUICK = get_preset("quick").timing


@pytest.mark.parametrize(
    "phrase",
    [
        f"at least {QUICK.min_round_s * 1e3:g} ms of repeated calls in the quick preset",
        f"split over {QUICK.passes} passes",
        f"its IQR exceeds {timing.NOISY_IQR_RATIO:.0%}".replace("%", " %"),
        f"more than {timing.STALL_RATIO:g}x its fastest round",
        f"more than {timing.PASS_SPREAD_RATIO:g}x its fastest pass",
        f"wider than {timing.CI_RELATIVE_WIDTH:.0%} of it".replace("%", " %"),
        f"{timing.CONFIDENCE:.0%} interval from order statistics".replace("%", " %"),
        f"watches the machine for {load.SAMPLE_WINDOW_S:g} s",
        f"less {load.RESERVED_CORES} left to the system",
        f"take at least {load.BUSY_CORES:g} cores",
        f"took at least {timing.BUSY_CORES:g} cores while it was timed",
        f"at most {QUICK.extra_passes} more passes and together at most {QUICK.extra_budget:.0%} of the first "
        "passes' time".replace("%", " %"),
        f"within {fits.PLATEAU_FRACTION:.0%} of the sweep's best".replace("%", " %"),
        f"within ± {fits.TOLERANCE['flops']:g} of the table's",
        f"(attention: n ≥ {models.LAYERS['attention'].table1.fit_n_over_d}·d)",
        f"± {fits.TOLERANCE['time']:g} for time, ± {fits.TOLERANCE['flops']:g} for FLOPs, "
        f"± {fits.TOLERANCE['memory']:g} for memory",
        f"an interval wider than {fits.MAX_VERDICT_WIDTH:g}, fewer than {fits.MIN_FIT_POINTS} points",
    ],
)
def test_the_method_states_the_codes_numbers(phrase):
    assert phrase in METHOD_FLAT, phrase


def test_readme_reaches_make_bench_on_its_first_screen():
    first_screen = README.splitlines()[:FIRST_SCREEN_LINES]
    assert any(line.startswith("make bench") for line in first_screen)


def test_every_file_the_readme_links_exists():
    links = re.findall(r"\]\(([^)#]+)\)", README)
    assert len(links) >= 5
    for link in links:
        if not link.startswith("http"):
            assert (ROOT / link).exists(), link
