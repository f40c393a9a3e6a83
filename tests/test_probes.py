"""docs/adding-a-probe.md, proven: a probe written here, registered and in nothing else, fills its column in
points.csv, in bench/interface.md's generated list and in a report section; the columns are spelled once."""

import ast
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from stand_ins import CEILINGS_STUB

from bench import schema
from bench.cli import main
from bench.probes import Call, Column, Probe, register, unregister
from bench.report import sections
from bench.spec import PointSpec

ROOT = Path(__file__).resolve().parent.parent
INTERFACE = ROOT / "bench" / "interface.md"
FAST = ["--rounds", "4", "--target-time", "0.002", "--passes", "1", "--no-progress"]
TOY = "toy_output_numbers"


def _numbers(call: Call, spec: PointSpec) -> dict:
    return {TOY: call.forward().numel()}


@pytest.fixture
def toy_probe():
    probe = register(Probe("toy", (Column(TOY, "int", "", "numbers in one forward pass's output"),), _numbers))
    yield probe
    unregister("toy")


def _toy_section(ctx) -> str:
    ok = ctx.points[ctx.points["status"] == "ok"]
    largest = ok.loc[ok[TOY].idxmax()]
    cited = ctx.cite("toy.output_numbers.max", int(largest[TOY]), "numbers", largest["run_id"])
    return f"## Output size\n\nThe largest output measured: {cited} numbers.\n"


def test_a_toy_probe_fills_its_column_in_points_csv_the_generated_list_and_a_report_section(toy_probe, tmp_path):
    results = tmp_path / "results"
    grid = ["run", "--layers", "conv,attention", "--n", "8,16", "--d", "4", "--heads", "2", "--device", "cpu"]
    assert main([*grid, "--out", str(results / "run"), *FAST]) == 0
    points = pd.read_csv(results / "run" / "points.csv")
    assert list(points.columns) == schema.names() and TOY in points and points.columns[-1] == "finished_utc"
    assert (points[TOY] == points["batch"] * points["n"] * points["d"]).all()
    listed = schema.with_column_list(INTERFACE.read_text())
    assert f"| `{TOY}` | int |  | numbers in one forward pass's output |" in listed
    assert TOY not in INTERFACE.read_text()
    sections.register(sections.Section("output size", _toy_section, needs=("points",)), after="roofline")
    try:
        assert main(["report", "--results", str(results), "--out", str(tmp_path / "report")]) == 0
    finally:
        sections.unregister("output size")
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Output size" in report and f"measured: {16 * 4} numbers" in report
    assert report.index("## Output size") > report.index("Against the roofline")


def test_a_probe_fills_only_its_own_columns(toy_probe):
    stray = Probe("stray", (Column("stray_x", "int", "", "x"),), lambda call, spec: {"time_median_s": 1.0})
    with pytest.raises(ValueError, match="stray: measure filled \\['time_median_s'\\], not among its columns"):
        stray.measured(Call(lambda: None, lambda: None), PointSpec("conv", n=8, d=4, k=3))
    with pytest.raises(ValueError, match="registered already"):
        register(Probe("other", (Column(TOY, "int", "", "again"),), _numbers))
    with pytest.raises(ValueError, match="type 'number'"):
        Column("y", "number", "", "a type that is not one")


def test_the_interface_doc_lists_every_column_as_the_schema_has_it():
    """bench/interface.md's generated list is current: `python -m bench.schema` rewrites it."""
    text = INTERFACE.read_text()
    assert schema.with_column_list(text) == text
    assert text.count("| `") >= len(schema.names())


def spelled_lists(
    paths: list[Path], names: set[str], allowed: set[Path], at_least: int = 4, root: Path = ROOT
) -> list[str]:
    """Literals (lists, tuples, sets, dict keys, keyword arguments) naming `at_least` point columns, outside the
    modules that declare columns: a column list spelled by hand."""
    found = []
    for path in paths:
        if path in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
                spelled = {e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names}
            elif isinstance(node, ast.Dict):
                spelled = {k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in names}
            elif isinstance(node, ast.Call):
                spelled = {k.arg for k in node.keywords if k.arg in names}
            else:
                continue
            if len(spelled) >= at_least:
                found.append(f"{path.relative_to(root)}:{node.lineno} {sorted(spelled)}")
    return found


def test_no_module_spells_a_list_of_point_columns_but_the_schema_and_the_probes():
    """Four or more measured columns named together outside bench/schema.py and bench/probes/ would be a second
    copy of the schema (a report table that shows two or three columns chooses them; it copies nothing)."""
    sources = sorted([*(ROOT / "bench").rglob("*.py"), *(ROOT / "models").rglob("*.py")])
    allowed = {ROOT / "bench" / "schema.py", *(ROOT / "bench" / "probes").glob("*.py")}
    measured = set(schema.names()) - {c.name for c in schema.IDENTITY}
    assert spelled_lists(sources, measured, allowed) == []


def test_spelled_lists_finds_a_copied_schema(tmp_path):
    module = tmp_path / "copy.py"
    module.write_text('COLUMNS = ["time_median_s", "time_iqr_s", "rounds", "status"]\nrow = dict(rounds=1, status=2)\n')
    names = {"time_median_s", "time_iqr_s", "rounds", "status"}
    assert spelled_lists([module], names, set(), root=tmp_path) == [f"copy.py:1 {sorted(names)}"]
    assert spelled_lists([module], names, {module}, root=tmp_path) == []


def test_a_local_run_imports_no_ray_module(tmp_path):
    """The local executor and the Ray one sit beside each other: a run here never loads bench's Ray modules (its
    ceilings stand-ins: tests/stand_ins.py)."""
    code = CEILINGS_STUB + (
        "import sys; from bench.cli import main; "
        f"assert main(['run', '--layers', 'conv', '--n', '8', '--d', '4', '--out', {str(tmp_path / 'run')!r}, "
        f"*{FAST!r}]) == 0; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'ray' or m in "
        "('bench.cluster', 'bench.ray_phase', 'bench.ray_worker')))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"
