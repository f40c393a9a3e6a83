"""examples/table1.ipynb, stored without outputs, runs top to bottom in a fresh kernel (nbclient) on the CPU in
under 5 minutes, showing the Table 1 comparison and at least two figures."""

from __future__ import annotations

import importlib.util
import subprocess
import time
from pathlib import Path

import pytest
from stand_ins import CEILINGS_STUB

NOTEBOOK = Path(__file__).resolve().parent.parent / "examples" / "table1.ipynb"
BUDGET_S = 300


def test_the_notebook_is_stored_without_outputs_and_with_a_parameter_cell():
    nbformat = pytest.importorskip("nbformat", reason="pip install -e '.[test]' (nbclient brings nbformat)")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(not cell.outputs and cell.execution_count is None for cell in code)
    assert any("parameters" in cell.metadata.get("tags", []) for cell in code)


@pytest.mark.slow
def test_the_notebook_runs_top_to_bottom_in_a_fresh_kernel(tmp_path):
    nbformat = pytest.importorskip("nbformat", reason="pip install -e '.[test]'")
    nbclient = pytest.importorskip("nbclient", reason="pip install -e '.[test]'")
    if importlib.util.find_spec("ipykernel") is None:  # not imported here: a kernel's module in the test process
        pytest.skip("pip install -e '.[test]'")

    def execute(**after_cell) -> tuple[object, float]:
        """The notebook run in a fresh kernel in tmp_path, a cell of our own after the first cell whose source
        starts with each key: (the notebook with its outputs, seconds)."""
        notebook = nbformat.read(NOTEBOOK, as_version=4)
        for start, source in after_cell.items():
            at = next(i for i, c in enumerate(notebook.cells) if c.cell_type == "code" and c.source.startswith(start))
            notebook.cells.insert(at + 1, nbformat.v4.new_code_cell(source))
        client = nbclient.NotebookClient(
            notebook, timeout=BUDGET_S, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
        )
        started = time.monotonic()
        client.execute()
        return notebook, time.monotonic() - started

    notebook, took_s = execute()
    outputs = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    images = [out for out in outputs if "image/png" in out.get("data", {})]
    tables = [out for out in outputs if "text/html" in out.get("data", {}) and "O(n²·d)" in out["data"]["text/html"]]
    assert len(images) >= 2, f"{len(images)} figures"
    assert tables, "no Table 1 beside the measurement"
    assert "TransformerEncoderLayer" in tables[0]["data"]["text/html"], "torch's own layer has no row"
    assert any(".cpu.attention.flops.exponent_n" in out.get("text", "") for out in outputs), "no cited number"
    assert took_s < BUDGET_S, f"{took_s:.0f} s"
    # Again in the same folder, as a user runs it again: a new run folder each time (issue 46: 17). What it measures
    # is not this run's question: the ceilings are stand-ins (tests/stand_ins.py) and the points timed briefly.
    time.sleep(1)  # the folders are named to the second
    again, _ = execute(**{"# Installs the project": CEILINGS_STUB, "# Parameters": "TARGET_TIME_S = 0.005"})
    assert not [
        out for cell in again.cells if cell.cell_type == "code" for out in cell.outputs if out.output_type == "error"
    ]
    assert len(list((tmp_path / "runs").glob("table1-*/points.csv"))) == 2


def test_what_the_notebook_writes_where_it_lies_is_ignored_by_git():
    root = NOTEBOOK.parent.parent
    checked = subprocess.run(["git", "check-ignore", "-q", "examples/runs/table1-x/points.csv"], cwd=root)
    assert checked.returncode == 0
