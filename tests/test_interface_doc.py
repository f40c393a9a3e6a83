"""bench/interface.md keeps every line of the owner's interface (../shared/interface.md) and only adds to it."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = ROOT / "bench" / "interface.md"
SHARED = ROOT.parent / "shared" / "interface.md"


@pytest.mark.skipif(not SHARED.exists(), reason="no ../shared/interface.md beside this checkout")
def test_every_line_of_the_shared_interface_is_in_ours():
    ours = OURS.read_text().splitlines()
    missing = [line for line in SHARED.read_text().splitlines() if line.strip() and line not in ours]
    assert not missing, missing


def test_our_additions_are_marked():
    text = OURS.read_text()
    assert text.count("Added here") >= 5 and "timings.jsonl" in text and "time_reliable" in text
