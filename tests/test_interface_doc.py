"""bench/interface.md keeps every line of the owner's interface (../shared/interface.md): as it is, or quoted under
"Changed here" where an issue replaced it."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = ROOT / "bench" / "interface.md"
SHARED = ROOT.parent / "shared" / "interface.md"


@pytest.mark.skipif(not SHARED.exists(), reason="no ../shared/interface.md beside this checkout")
def test_every_line_of_the_shared_interface_is_in_ours():
    ours = OURS.read_text().splitlines()
    changed = ours[ours.index("## Changed here, from the owner's copy") :]
    missing = [
        line
        for line in SHARED.read_text().splitlines()
        if line.strip() and line not in ours and f"> {line}" not in changed
    ]
    assert not missing, missing


def test_a_changed_line_is_no_longer_ours_as_it_was():
    """A line quoted as changed is replaced: the old wording is not also kept as if it still held."""
    ours = OURS.read_text().splitlines()
    at = ours.index("## Changed here, from the owner's copy")
    quoted = [line[2:] for line in ours[at:] if line.startswith("> ")]
    assert quoted and not [line for line in quoted if line in ours[:at]]


def test_our_additions_are_marked():
    text = OURS.read_text()
    assert text.count("Added here") >= 5 and "timings.jsonl" in text and "time_reliable" in text
