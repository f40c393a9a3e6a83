"""The report's registered parts: a section registered from outside bench/report is drawn where it asks, its file is
the report's own, and unregister takes it out again."""

import json

import pytest
from small_report import write_run

from bench.report.build import build_report
from bench.report.sections import SECTIONS, Section, register, unregister


def _names() -> list[str]:
    return [section.name for section in SECTIONS]


def test_register_places_a_section_and_unregister_takes_it_out():
    before = _names()
    probe = register(Section("probe", lambda ctx: "", needs=("points",)), after="roofline")
    try:
        at = before.index("roofline") + 1
        assert _names() == [*before[:at], "probe", *before[at:]]
        with pytest.raises(ValueError, match="registered already"):
            register(Section("probe", lambda ctx: ""))
    finally:
        assert unregister("probe") is probe
    assert _names() == before
    with pytest.raises(KeyError, match="no report section"):
        register(Section("other", lambda ctx: ""), after="no such section")
    with pytest.raises(KeyError, match="no report section"):
        unregister("no such section")
    with pytest.raises(ValueError, match="needs among"):
        Section("other", lambda ctx: "", needs=("point",))
    assert _names() == before


def _probe(ctx) -> str:
    (ctx.out_dir / "probe.csv").write_text(f"points\n{len(ctx.points)}\n")
    count = ctx.cite("probe.points", len(ctx.points), "points", ctx.points["run_id"].iloc[0])
    return f"## Toy probe\n\nPoints seen: {count}.\n"


def test_a_registered_section_is_drawn_cited_and_its_file_kept_as_the_reports(tmp_path):
    results, out = write_run(tmp_path / "results"), tmp_path / "out"
    register(Section("toy probe", _probe, needs=("points",), writes=("probe.csv",)), after="training")
    try:
        build_report([results], out)
        build_report([results], out)  # its file from the first report is replaced, not kept as a user's
    finally:
        unregister("toy probe")
    md = (out / "report.md").read_text()
    assert "- [Toy probe](#toy-probe)" in md
    assert md.index("## Memory") < md.index("## Toy probe") < md.index("## Provenance")
    assert (out / "probe.csv").read_text() == "points\n10\n"
    assert json.loads((out / "numbers.json").read_text())["numbers"]["probe.points"]["value"] == 10
    assert not [p for p in tmp_path.iterdir() if "-kept-" in p.name]
