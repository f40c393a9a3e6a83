"""The docs state the method's numbers; each must be the code's (a changed constant fails here until
docs/method.md says the same). The README reaches `make bench` on its first screen and links what exists."""

import re
import shlex
from pathlib import Path

import pytest
from small_report import write_run

import models
from bench import fits, load, policy
from bench.cli import main
from bench.presets import get_preset
from bench.report import numbers

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
        f"its IQR exceeds {policy.NOISY_IQR_RATIO:.0%}".replace("%", " %"),
        f"more than {policy.STALL_RATIO:g}x its fastest round",
        f"more than {policy.PASS_SPREAD_RATIO:g}x its fastest pass",
        f"wider than {policy.CI_RELATIVE_WIDTH:.0%} of it".replace("%", " %"),
        f"{policy.CONFIDENCE:.0%} interval from order statistics".replace("%", " %"),
        f"watches the machine for {load.SAMPLE_WINDOW_S:g} s",
        f"less {load.RESERVED_CORES} left to the system",
        f"take at least {load.BUSY_CORES:g} cores",
        f"took at least {policy.BUSY_CORES:g} cores while it was timed",
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


def cite_commands(markdown: str) -> list[list[str]]:
    """The arguments of every `python -m bench cite ...` line of the fenced code blocks, comments dropped."""
    blocks = re.findall(r"^```\w*\n(.*?)^```", markdown, flags=re.M | re.S)
    lines = [line for block in blocks for line in block.splitlines() if "-m bench cite" in line]
    return [(words := shlex.split(line, comments=True))[words.index("bench") + 1 :] for line in lines]


@pytest.mark.parametrize("doc", ["README.md", "docs/usage.md"])
def test_the_cite_examples_of_the_docs_work_after_a_run_of_this_machine(tmp_path, monkeypatch, capsys, doc):
    """As after `make bench` on a fresh clone: this machine's report (a small one, written by `report` without
    --out, to reports/local/ moved to tmp) and the shipped reports/reference/ as it is in the checkout."""
    commands = cite_commands((ROOT / doc).read_text())
    assert any("--list" in argv for argv in commands) and any("--list" not in argv for argv in commands), commands
    local = tmp_path / "reports" / "local"
    monkeypatch.setattr(numbers, "LOCAL_REPORT_DIR", local)
    assert main(["report", "--results", str(write_run(tmp_path / "results"))]) == 0
    capsys.readouterr()
    for argv in commands:
        assert main(argv) == 0, (argv, capsys.readouterr().err)
        out = capsys.readouterr().out.splitlines()
        assert out, argv
        if "--list" in argv:  # the keys of this machine's report beside the shipped one's, each with its report
            assert any(line.endswith(str(local)) for line in out) and any(line.endswith("reference") for line in out)


def test_usage_states_the_progress_interval():
    from bench.progress import PROGRESS_EVERY_S  # noqa: PLC0415

    usage = " ".join((ROOT / "docs" / "usage.md").read_text().split())
    assert f"it writes a line every {PROGRESS_EVERY_S:g} s instead" in usage
