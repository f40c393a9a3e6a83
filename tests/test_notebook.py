"""examples/table1.ipynb, stored without outputs, runs top to bottom in a fresh kernel (nbclient) on the CPU in
under 5 minutes, showing the Table 1 comparison and at least two figures."""

from __future__ import annotations

import importlib.util
import subprocess
import time
from pathlib import Path

import pytest

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
    for _ in range(2):  # twice in one folder, as a user runs it again: a new run folder each time (issue 46: 17)
        notebook = nbformat.read(NOTEBOOK, as_version=4)
        client = nbclient.NotebookClient(
            notebook, timeout=BUDGET_S, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
        )
        started = time.monotonic()
        client.execute()
        took_s = time.monotonic() - started
        time.sleep(1)  # the folders are named to the second
    outputs = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    images = [out for out in outputs if "image/png" in out.get("data", {})]
    tables = [out for out in outputs if "text/html" in out.get("data", {}) and "O(n²·d)" in out["data"]["text/html"]]
    assert len(images) >= 2, f"{len(images)} figures"
    assert tables, "no Table 1 beside the measurement"
    assert any(".cpu.attention.flops.exponent_n" in out.get("text", "") for out in outputs), "no cited number"
    assert took_s < BUDGET_S, f"{took_s:.0f} s"
    assert len(list((tmp_path / "runs").glob("table1-*/points.csv"))) == 2


def test_what_the_notebook_writes_where_it_lies_is_ignored_by_git():
    root = NOTEBOOK.parent.parent
    checked = subprocess.run(["git", "check-ignore", "-q", "examples/runs/table1-x/points.csv"], cwd=root)
    assert checked.returncode == 0
